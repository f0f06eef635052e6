"""The profiler on whole training runs: each example's verdict agrees with its run report,
and the traces of a multi-process collector name the slow worker.

The per-example test is also the examples' smoke test (``test_examples_smoke.py``'s
checks run on the same process's output), so each example starts once per session.

Each example runs briefly as a user would profile it (``RL_PROFILING=1``, ``--profile``,
a fresh process); its run report (``RunReport``, printed at the end) and
``rl-profile summary`` of its trace must tell the same story: the phase the verdict names
takes a large share of the run, and *other* (time no range covers) stays small.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from rl_profiling import CATEGORIES, summarize_trace, summarize_traces

HERE = Path(__file__).resolve().parent


def _sibling(name: str):  # noqa: ANN202
    """A module of this folder (tests run in importlib mode: the folder is not on sys.path)."""
    spec = importlib.util.spec_from_file_location(name, HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_smoke = _sibling("test_examples_smoke")
EXAMPLES, EXTRA_ARGS, TOTAL_FRAMES = _smoke.EXAMPLES, _smoke.EXTRA_ARGS, _smoke.TOTAL_FRAMES

# category of the verdict -> the run report's phases that hold that time
COLLECT = ("collect", "wait_for_data")
PHASES_OF = {
    "env": COLLECT, "policy": COLLECT, "collector": COLLECT, "weights": ("weight_push",),
    "storage": ("replay",), "replay": ("replay",), "advantage": ("advantage",),
    "loss": ("loss",), "backward": ("backward",), "optimiser": ("optimiser",),
}
ROW = re.compile(r"^  (?P<key>\w+)\s+(?P<seconds>[\d.e+-]+) s\s+(?P<share>[\d.]+)%  x\d+$")


def report_shares(stdout: str) -> dict[str, float]:
    """The top-level phases of the traced iterations in the run report the example printed,
    as shares of those iterations' time: the window the trace covers."""
    lines = stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("traced iterations: "))
    shares = {}
    for line in lines[head + 1:]:
        match = ROW.match(line)
        if match is None:
            break
        shares[match["key"]] = float(match["share"]) / 100
    return shares


@pytest.mark.timeout(420)
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_the_verdict_matches_the_run_report(script: Path, tmp_path: Path, no_leaks) -> None:
    trace = tmp_path / "traces" / "ppo_cartpole.json"
    profile = ["--profile"] if script.name == "ppo_cartpole.py" else ["--profile", str(trace)]
    args = EXTRA_ARGS[script.name]
    proc = subprocess.run(
        [sys.executable, str(script), "--total-frames", str(TOTAL_FRAMES), "--seed", "1",
         "--device", "cpu", "--logdir", str(tmp_path / "tb"), *args, *profile],
        cwd=tmp_path, env={**os.environ, "RL_PROFILING": "1"},
        capture_output=True, text=True, timeout=400, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    _smoke.check_result(proc.stdout, tmp_path / "tb", script.name)  # the smoke test's checks
    shares = report_shares(proc.stdout)
    summary = summarize_trace(trace)
    verdict = summary.verdict()
    top = max(summary.shares(), key=summary.shares().get)
    # before the lookup: "other" (no named range) has no page, and its share is what failed
    assert top != "other", (summary.shares(), proc.stdout[-2000:])
    label, page, _ = CATEGORIES[top]
    assert verdict.startswith(f"{label} takes") and verdict.endswith(f"read {page} next")
    phase_share = sum(shares.get(phase, 0.0) for phase in PHASES_OF[top])
    assert phase_share >= 0.5 * max(shares.values()), (verdict, shares)
    # other: the loop's own Python between its timed blocks; sac_mujoco collects one
    # frame per iteration (CleanRL's setting), so that Python weighs as much as a step
    one_frame = {"sac_mujoco.py", "td3_mujoco.py", "crossq_mujoco.py"}  # the same loop
    other_limit = 0.25 if script.name in one_frame else 0.1
    assert summary.shares()["other"] < other_limit, (summary.shares(), proc.stdout[-2000:])


@pytest.mark.timeout(600)
def test_the_slow_worker_of_a_multi_process_collector_is_named(tmp_path, monkeypatch) -> None:
    from rl_collectors import MultiSyncCollector

    monkeypatch.syspath_prepend(str(HERE.parent / "packages" / "rl-collectors" / "tests"))
    monkeypatch.syspath_prepend(str(HERE))  # the workers import profiling_learner_helpers
    monkeypatch.setenv("RL_PROFILING", "1")
    import collectors_helpers

    fast = partial(collectors_helpers.make_cartpole, 2)
    slow = partial(_slow_cartpole, 0.004)  # 4 ms more per step in worker 1
    policy = collectors_helpers.greedy_policy()
    with MultiSyncCollector([fast, slow, fast], policy, frames_per_batch=48, total_frames=480,
                            start_timeout=300.0) as collector:
        collector.enable_profile(workers=[0, 1, 2], num_rollouts=5, warmup_rollouts=2,
                                 save_path=str(tmp_path / "worker_{worker_idx}.json"))
        for _ in collector:
            pass
        paths = collector.disable_profile()
    assert sorted(paths) == [str(tmp_path / f"worker_{i}.json") for i in range(3)]
    summary = summarize_traces(sorted(paths))
    slow_line = summary.slow_worker()
    assert slow_line is not None and slow_line.startswith(
        "process worker_1.json is the slow worker"
    ), slow_line
    assert slow_line.endswith("read docs/envs.md next")


def _slow_cartpole(seconds: float):
    from profiling_learner_helpers import slow_cartpole

    return slow_cartpole(seconds)


ASYNC_BATCHED = """
import json, sys
from functools import partial
sys.path.insert(0, sys.argv[2])
import collectors_helpers
from rl_collectors import AsyncBatchedCollector
from rl_envs import GymEnv

with AsyncBatchedCollector(partial(GymEnv, "CartPole-v1", categorical_action_encoding=True),
                           collectors_helpers.greedy_policy(),
                           num_envs=3, frames_per_batch=48, total_frames=48 * 6) as collector:
    collector.enable_profile(num_rollouts=4, warmup_rollouts=1, save_path=sys.argv[1])
    for _ in collector:
        pass
    print(json.dumps(collector.disable_profile()))
"""


@pytest.mark.timeout(300)
def test_one_trace_holds_the_async_batched_server_and_its_env_threads(tmp_path) -> None:
    trace = tmp_path / "server.json"
    helpers = HERE.parent / "packages" / "rl-collectors" / "tests"
    proc = subprocess.run(
        [sys.executable, "-c", ASYNC_BATCHED, str(trace), str(helpers)],
        env={**os.environ, "RL_PROFILING": "1"}, capture_output=True, text=True, timeout=280,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = json.loads(trace.read_text())["traceEvents"]
    threads: dict[str, set] = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "user_annotation":
            threads.setdefault(e["name"], set()).add(e["tid"])
    server = threads["AsyncBatchedCollector._rollout_frames"]
    assert threads["InferenceServer.forward"] == server and len(server) == 1
    envs = threads["EnvBase.fast_step"]
    assert len(envs) == 3 and not envs & server  # one thread per env, beside the server
    summary = summarize_trace(trace)
    assert summary.threads >= 4 and summary.categories["env"] > 0
