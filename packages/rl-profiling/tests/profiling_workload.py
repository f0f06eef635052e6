"""A small instrumented RL loop, run by the tests in a subprocess started with RL_PROFILING=1.

``python profiling_workload.py torch OUT_DIR``: under a real ``torch.profiler``, with a
``ProfilerHook``, and prints a JSON report on its last line.
``python profiling_workload.py stdlib OUT_DIR``: the same with torch made unimportable.

Everything happens under ``main`` so that collecting this file (pytest's doctest
collection imports it) runs nothing.
"""

from __future__ import annotations

import json
import pickle
import sys
import time
from pathlib import Path

ENV_SLEEP_S = 0.002  # the "simulator": keeps environment stepping the largest category


def build_loop(torch):  # noqa: ANN001, ANN201 - torch or None
    from rl_profiling import profiled, record

    class EnvBase:
        @profiled("EnvBase.step")
        def step(self, action):
            time.sleep(ENV_SLEEP_S)
            return action * 0.5 if torch is None else torch.tanh(action).sum(-1, keepdim=True)

    class ReplayBuffer:
        def __init__(self):
            self.items = []

        @profiled("ReplayBuffer.extend")
        def extend(self, item):
            self.items.append(item)

    class Collector:
        def __init__(self):
            self.env, self.buffer = EnvBase(), ReplayBuffer()
            self.policy = (
                (lambda obs: obs + 1.0)
                if torch is None
                else torch.nn.Sequential(
                    torch.nn.Linear(1, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1)
                )
            )

        @profiled("Collector.rollout")
        def rollout(self, steps):
            obs = 0.0 if torch is None else torch.zeros(8, 1)
            for _ in range(steps):
                with record("Collector.policy"):
                    action = self.policy(obs) if torch is None else self.policy(obs).detach()
                obs = self.env.step(action)
            self.buffer.extend(obs)
            return obs

    return Collector()


def run_torch(out: Path) -> dict:
    import torch
    from rl_profiling import (
        ProfileConfig,
        ProfilerHook,
        Timing,
        profiled,
        record,
        set_profiling_enabled,
    )

    collector = build_loop(torch)
    optim = torch.optim.SGD(collector.policy.parameters(), lr=1e-3)

    @profiled("ClipPPOLoss.forward")
    def loss_fn():
        return collector.policy(torch.randn(16, 1)).pow(2).mean()

    def train():
        loss = loss_fn()
        optim.zero_grad()
        loss.backward()
        optim.step()

    report: dict = {"null_outside_profiler": record("a") is record("b")}
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        report["null_inside_profiler"] = record("a") is record("b")
        collector.rollout(3)
    report["profiler_names"] = sorted({e.name for e in prof.events()})
    set_profiling_enabled(False)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        collector.rollout(3)
    report["disabled_names"] = sorted({e.name for e in prof.events()})
    set_profiling_enabled(True)

    config = ProfileConfig(
        workers=[0],
        num_rollouts=4,
        warmup_rollouts=1,
        save_path=str(out / "worker_{worker_idx}.json"),
    )
    hook = pickle.loads(pickle.dumps(ProfilerHook(config, worker_idx=0)))
    report["hook_states"] = [(hook.active, hook.done)]
    for _ in range(6):  # two more than num_rollouts: the done hook ignores them
        with hook():
            collector.rollout(10)
            train()
        report["hook_states"].append((hook.active, hook.done))
    report["written"] = hook.written

    early = ProfilerHook(
        ProfileConfig(
            workers=None,
            num_rollouts=10,
            warmup_rollouts=0,
            save_path=str(out / "early_{worker_idx}.json.gz"),
        ),
        worker_idx=3,
    )
    with early():
        collector.rollout(2)
    report["early"] = [early.active, early.stop(), early.stop(), early.done]

    timing = Timing(cuda_sync=True)  # torch present; synchronises only where CUDA is
    with timing.add_time("outer"), timing.timeit("inner"):
        torch.ones(4).sum()
    report["timing_cuda_sync"] = sorted(timing.to_dict())
    return report


def run_stdlib(out: Path) -> dict:
    sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises
    from rl_profiling import RECORDER, ProfileConfig, ProfilerHook, Timing, record

    collector = build_loop(None)
    report: dict = {"off_before_recording": record("x") is record("y")}
    config = ProfileConfig(
        num_rollouts=3, warmup_rollouts=1, save_path=str(out / "stdlib_{worker_idx}.json")
    )
    hook = ProfilerHook(config, worker_idx=0)
    while not hook.done:
        with hook():
            collector.rollout(5)
    report["written"] = hook.written
    report["recording_after"] = RECORDER.recording

    crash = ProfilerHook(
        ProfileConfig(
            num_rollouts=5, warmup_rollouts=0, save_path=str(out / "crash_{worker_idx}.json")
        ),
        0,
    )
    try:
        with crash():
            collector.rollout(2)
            raise RuntimeError("env died")
    except RuntimeError:
        pass
    report["crash"] = [crash.done, crash.written]
    timing = Timing(cuda_sync=True)  # no torch: plain perf_counter
    with timing.add_time("x"):
        pass
    report["timing_keys"] = list(timing.to_dict())
    report["torch_imported"] = sys.modules.get("torch") is not None
    return report


def main(argv: list[str]) -> None:
    mode, out = argv[0], Path(argv[1])
    from rl_profiling import ARMED

    report = run_torch(out) if mode == "torch" else run_stdlib(out)
    report["armed"] = ARMED
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
