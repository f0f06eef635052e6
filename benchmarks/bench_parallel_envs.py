"""``ParallelEnv(2, ...)`` vs ``SerialEnv(2, ...)`` on an env whose step burns ~0.5 ms of CPU.

Target: ParallelEnv >= 1.6x SerialEnv's steps/s on 2 cores. Both are measured in the same
run, interleaved, best of ``REPEATS``; steps are counted per sub-env (2 per batched step).
A second figure gives the median over rounds of the per-round ratio (each round times
both back to back): on a machine shared with other jobs the two figures differ, and the
spread says how noisy the run was. Wall-clock figures: parallelism is the point.

``BusyEnv`` is defined at module level so the spawned workers can import it (they
re-import this module by name: ``python benchmarks/bench_parallel_envs.py`` or through
``benchmarks/run.py``, which registers it in ``sys.modules``).

Usage::

    uv run --no-sync python benchmarks/bench_parallel_envs.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from rl_envs import Categorical, Composite, EnvBase, ParallelEnv, SerialEnv, Unbounded
from tensordict import TensorDictBase

STEP_CPU_S = 0.0005
"""CPU time each ``BusyEnv`` step burns (measured with ``time.thread_time``)."""
NUM_WORKERS = 2
STEPS = 1000
WARMUP = 100
REPEATS = 5
TARGET = 1.6


class BusyEnv(EnvBase):
    """A one-env ``EnvBase`` (fast pair) whose step busy-spins ``step_cpu_s`` of CPU time."""

    def __init__(self, step_cpu_s: float = STEP_CPU_S):
        super().__init__(batch_size=())
        self.observation_spec = Composite(observation=Unbounded((4,)))
        self.action_spec = Categorical(2)
        self.step_cpu_s = step_cpu_s

    def _on_buffers_bound(self) -> None:
        self._root_obs = self._root_buf.get("observation")
        self._next_obs = self._next_buf.get("observation")
        self._reward = self._next_buf.get("reward")

    def fast_reset(self, reset_mask: torch.Tensor | None = None) -> TensorDictBase:
        root, _ = self.buffers()
        self._root_obs.zero_()
        return root

    def fast_step(self, action: Any) -> tuple[TensorDictBase, TensorDictBase]:
        self.validate_action(action)
        root, nxt = self.buffers()
        end = time.thread_time() + self.step_cpu_s
        while time.thread_time() < end:
            pass
        self._next_obs.copy_(self._root_obs).add_(1.0)
        self._root_obs.copy_(self._next_obs)
        self._reward.fill_(1.0)
        return nxt, root  # never done: no reset inside the measured loop


def _steps_per_s(env: EnvBase) -> float:
    """Sub-env steps per second of ``env.rollout`` (the public path, random actions)."""
    env.rollout(WARMUP, break_when_any_done=False)
    start = time.perf_counter()
    env.rollout(STEPS, break_when_any_done=False)
    return STEPS * env.batch_size.numel() / (time.perf_counter() - start)


def run() -> list[dict]:
    serial = SerialEnv(NUM_WORKERS, BusyEnv)
    parallel = ParallelEnv(NUM_WORKERS, BusyEnv)
    try:
        rounds = []
        for _ in range(REPEATS):  # interleaved, so both see the same machine load
            rounds.append((_steps_per_s(serial), _steps_per_s(parallel)))
    finally:
        parallel.close()
        serial.close()
    serial_sps = max(r[0] for r in rounds)
    parallel_sps = max(r[1] for r in rounds)
    ratio = parallel_sps / serial_sps
    median_ratio = statistics.median(p / s for s, p in rounds)
    return [
        {
            "figure": "SerialEnv(2), 0.5 ms/step env",
            "value": serial_sps,
            "unit": "steps/s",
            "limit": serial_sps,
            "ratio": 1.0,
        },
        {
            "figure": f"ParallelEnv(2) / SerialEnv(2) steps/s (target >= {TARGET})",
            "value": parallel_sps,
            "unit": "steps/s",
            "limit": serial_sps,
            "ratio": ratio,
        },
        {
            "figure": "ParallelEnv(2) / SerialEnv(2), median of per-round ratios",
            "value": statistics.median(r[1] for r in rounds),
            "unit": "steps/s",
            "limit": statistics.median(r[0] for r in rounds),
            "ratio": median_ratio,
        },
    ]


if __name__ == "__main__":
    rows = run()
    print(f"{'figure':<58} {'value':>10} {'unit':>8} {'limit':>10} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['figure']:<58} {r['value']:>10.0f} {r['unit']:>8} {r['limit']:>10.0f} "
            f"{r['ratio']:>6.2f}"
        )
