"""``rl-profile summary``'s verdict on traces where one component dominates, and workers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rl_profiling import CATEGORIES, summarize_events
from rl_profiling._cli import main


def _x(name: str, ts: float, dur: float, pid: int = 1, tid: int = 1) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid}


def _training_step(big: str, t0: float) -> list[dict]:
    """One collect + learn iteration in which the range ``big`` takes 70 of 101 us."""
    durations = {
        "EnvBase.step": 5,
        "Collector.policy": 5,
        "LazyTensorStorage.set": 5,
        "ReplayBuffer.sample": 5,
        "ClipPPOLoss.forward": 5,
        "autograd::engine::evaluate_function: AddmmBackward0": 5,
        "Optimizer.step#Adam.step": 5,
    }
    durations[big] = 70
    events, t = [], t0
    rollout_len = durations["EnvBase.step"] + durations["Collector.policy"]
    events.append(_x("Collector.rollout", t, rollout_len))
    for name in ("EnvBase.step", "Collector.policy"):
        events.append(_x(name, t, durations[name]))
        t += durations[name]
    extend = _x("ReplayBuffer.extend", t, durations["LazyTensorStorage.set"] + 1)
    events += [extend, _x("LazyTensorStorage.set", t + 1, durations["LazyTensorStorage.set"])]
    t += durations["LazyTensorStorage.set"] + 1
    for name in list(durations)[3:]:
        events.append(_x(name, t, durations[name]))
        t += durations[name]
    return events


@pytest.mark.parametrize(
    ("big", "category"),
    [
        ("EnvBase.step", "env"),
        ("Collector.policy", "policy"),
        ("LazyTensorStorage.set", "storage"),
        ("ReplayBuffer.sample", "replay"),
        ("ClipPPOLoss.forward", "loss"),
        ("autograd::engine::evaluate_function: AddmmBackward0", "backward"),
        ("Optimizer.step#Adam.step", "optimiser"),
    ],
)
def test_the_dominant_component_gets_the_verdict(big: str, category: str) -> None:
    events = _training_step(big, 0) + _training_step(big, 1000)
    summary = summarize_events(events)
    label, page, _ = CATEGORIES[category]
    expected = (70 + (category == "replay")) / 101  # the extend's own microsecond is replay
    assert summary.shares()[category] == pytest.approx(expected)
    assert summary.shares()["other"] == pytest.approx(0.0)
    assert summary.verdict().startswith(f"{label} takes {expected:.0%} of the profiled time")
    assert summary.verdict().endswith(f"read {page} next")


def test_learner_ranges_absorb_what_runs_inside_them() -> None:
    events = [
        _x("Learner.loss", 0, 100),
        _x("ClipPPOLoss.forward", 0, 60),
        _x("ProbabilisticActor.forward", 10, 40),  # the actor inside the loss: loss time
        _x("aten::addmm", 20, 10),
        _x("Learner.backward", 100, 50),
        _x("autograd::engine::evaluate_function: TBackward0", 100, 45),
        _x("Learner.replay", 150, 30),
        _x("ReplayBuffer.extend", 150, 30),
        _x("LazyMemmapStorage.set", 155, 20),  # innermost: a storage write
        _x("Learner.weight_push", 180, 10),
        _x("Collector.update_policy_weights_", 181, 8),
        _x("Learner.collect", 200, 100),
        _x("Collector.rollout", 200, 95),
        _x("EnvBase.step_and_maybe_reset", 210, 60),
        _x("Collector.policy", 270, 20),
        _x("Learner.advantage", 300, 10),
        _x("GAE.forward", 300, 9),
        _x("SoftUpdate.step", 310, 2),
        _x("logging", 312, 8),  # not a category: other
    ]
    categories = summarize_events(events).categories
    assert categories == {
        "loss": 100.0,
        "backward": 50.0,
        "replay": 10.0,
        "storage": 20.0,
        "weights": 10.0,
        "collector": 20.0,
        "env": 60.0,
        "policy": 20.0,
        "advantage": 10.0,
        "optimiser": 2.0,
    }
    assert summarize_events(events).shares()["other"] == pytest.approx(8 / 310)  # 190-200: idle


def _worker_trace(path: Path, pid: int, env_us: float, batches: int = 4) -> None:
    events, t = [], 0.0
    for _ in range(batches):
        events += [
            _x("Collector.rollout", t, env_us + 10, pid=pid),
            _x("EnvBase.step_and_maybe_reset", t, env_us, pid=pid),
            _x("Collector.policy", t + env_us, 10, pid=pid),
        ]
        t += env_us + 20
    path.write_text(json.dumps({"traceEvents": events}))


def test_the_slow_worker_is_named_from_its_own_trace(tmp_path: Path, capsys) -> None:
    paths = []
    for i, env_us in enumerate((100, 300, 110)):
        paths.append(tmp_path / f"worker_{i}.json")
        _worker_trace(paths[-1], pid=4000, env_us=env_us)  # one pid reused: files differ
    assert main(["summary", *map(str, paths)]) == 0
    text = capsys.readouterr().out
    assert "worker_1.json: 4 batches, 0.310 ms per batch" in text
    slow = text.strip().splitlines()[-1]
    assert slow.startswith("Slow worker: process worker_1.json is the slow worker: 0.310 ms")
    assert "2.7x the median of the other 2 (0.115 ms)" in slow
    assert slow.endswith("environment stepping takes 97% of its time: read docs/envs.md next")


def test_no_slow_worker_when_the_workers_are_even(tmp_path: Path, capsys) -> None:
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path in paths:
        _worker_trace(path, pid=1, env_us=100)
    assert main(["summary", *map(str, paths)]) == 0
    assert "Slow worker" not in capsys.readouterr().out
