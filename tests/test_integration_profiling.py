"""Profiling path: named ranges in a real collection, read back by ``rl-profile summary``.

With ``RL_PROFILING=1`` (read once at import, hence a subprocess) a short collection under
``torch.profiler`` yields a Chrome trace whose ranges nest ``Collector.rollout`` >
``Collector.policy`` and ``EnvBase.fast_step`` > ``TransformedEnv._step``.
Without it, the decorated methods are the plain functions and nothing is recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import rl_profiling

COLLECT = textwrap.dedent(
    """
    import json, sys
    import torch
    from rl_collectors import Collector
    from rl_envs import GymEnv, InitTracker, StepCounter, TransformedEnv
    from tensordict.nn import TensorDictModule
    import rl_profiling

    torch.set_num_threads(1)
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                categorical_action_encoding=True), StepCounter())
    env.append_transform(InitTracker())
    env.set_seed(0)
    net = torch.nn.Linear(4, 2)
    policy = TensorDictModule(lambda obs: net(obs).argmax(-1), ["observation"], ["action"])
    collector = Collector(env, policy, frames_per_batch=32, total_frames=96)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        frames = sum(batch.numel() for batch in collector)
    collector.shutdown()
    prof.export_chrome_trace(sys.argv[1])
    print(json.dumps({"armed": rl_profiling.ARMED, "frames": frames}))
    """
)

RANGES = (
    "Collector.rollout",
    "Collector.policy",
    "EnvBase.fast_step",
    "TransformedEnv._step",
    "TransformedEnv._reset",
)
STEPS = 96 // 2


def run_python(
    args: list[str], env_update: dict[str, str | None], cwd: Path
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for key, value in env_update.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def collect_trace(tmp_path: Path, armed: bool) -> tuple[dict, list[dict]]:
    script = tmp_path / "collect.py"
    script.write_text(COLLECT)
    trace = tmp_path / "trace.json"
    proc = run_python([str(script), str(trace)], {"RL_PROFILING": "1" if armed else None}, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    events = json.loads(trace.read_text())["traceEvents"]
    return result, [e for e in events if e.get("ph") == "X" and e.get("name") in RANGES]


def inside(inner: dict, outer: dict) -> bool:
    return (
        inner["tid"] == outer["tid"]
        and outer["ts"] <= inner["ts"]
        and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    )


def assert_nested(events: list[dict], inner: str, outer: str) -> None:
    outers = [e for e in events if e["name"] == outer]
    inners = [e for e in events if e["name"] == inner]
    assert outers and inners, (inner, outer)
    orphans = [e for e in inners if not any(inside(e, o) for o in outers)]
    assert not orphans, f"{len(orphans)} of {len(inners)} {inner} ranges are not inside {outer}"


@pytest.mark.timeout(120)
def test_armed_collection_trace_nests_ranges_and_summary_reads_it(tmp_path: Path) -> None:
    result, events = collect_trace(tmp_path, armed=True)
    assert result == {"armed": True, "frames": 96}
    counts = {name: sum(e["name"] == name for e in events) for name in RANGES}
    assert counts["Collector.rollout"] == 3  # one per batch
    assert counts["Collector.policy"] == STEPS  # one per step
    assert counts["EnvBase.fast_step"] == STEPS
    assert counts["TransformedEnv._step"] == STEPS
    assert counts["TransformedEnv._reset"] >= 1
    assert_nested(events, "Collector.policy", "Collector.rollout")
    assert_nested(events, "EnvBase.fast_step", "Collector.rollout")
    assert_nested(events, "TransformedEnv._step", "EnvBase.fast_step")
    # the policy runs before the env step, never inside it
    steps = [e for e in events if e["name"] == "EnvBase.fast_step"]
    assert not any(inside(p, s) for p in events if p["name"] == "Collector.policy" for s in steps)

    proc = run_python(["-m", "rl_profiling", "summary", str(tmp_path / "trace.json")], {}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout
    assert "Top 15 ranges by total time" in table and "Verdict:" in table
    for name in (
        "Collector.rollout",
        "Collector.policy",
        "EnvBase.fast_step",
        "TransformedEnv._step",
    ):
        assert name in table, name
    rollout = next(line for line in table.splitlines() if line.endswith(" Collector.rollout"))
    assert int(rollout.split()[2]) == 3  # the calls column


def check_unarmed_in_this_process() -> None:
    """Un-armed: the decorators returned the very functions, and a profile has no range."""
    import torch
    from rl_collectors import Collector
    from rl_envs import EnvBase, GymEnv, InitTracker, TransformedEnv

    assert not rl_profiling.ARMED
    assert not rl_profiling.profiling_enabled()

    def f() -> None:
        pass

    assert rl_profiling.profiled("Demo.f")(f) is f
    assert rl_profiling.record("Demo.a") is rl_profiling.record("Demo.b")
    for method in (
        Collector._collect,
        EnvBase.step_and_maybe_reset,
        TransformedEnv.fast_step,
        TransformedEnv.fast_reset,
    ):
        assert not hasattr(method, "__wrapped__"), method
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                categorical_action_encoding=True), InitTracker())
    collector = Collector(env, None, frames_per_batch=16, total_frames=32)
    try:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            for _ in collector:
                pass
    finally:
        collector.shutdown()
    names = {event.name for event in prof.events()}
    assert not names & set(RANGES), names & set(RANGES)


@pytest.mark.timeout(120)
def test_unarmed_no_range_and_plain_functions(tmp_path: Path) -> None:
    if not rl_profiling.ARMED:
        check_unarmed_in_this_process()
        return
    # this test process was started with RL_PROFILING=1: check in a clean child instead
    result, events = collect_trace(tmp_path, armed=False)
    assert result == {"armed": False, "frames": 96}
    assert events == []
