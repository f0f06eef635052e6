"""ProfileConfig validation and the ProfilerHook lifecycle (real torch.profiler, real files)."""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest
from rl_profiling import ProfileConfig, ProfilerHook


def _names(path: str | Path) -> set[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    assert isinstance(trace["traceEvents"], list)
    return {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}


def test_config_defaults_and_helpers(tmp_path: Path) -> None:
    cfg = ProfileConfig()
    assert (cfg.workers, cfg.num_rollouts, cfg.warmup_rollouts, cfg.activities) == (
        [0],
        5,
        2,
        ["cpu"],
    )
    assert cfg.trace_path(0) == "traces/worker_0.json" and cfg.active_rollouts == 3
    single = ProfileConfig(
        workers=(1,), save_path=tmp_path / "one.json", activities=("CPU", "cuda")
    )
    assert single.workers == [1] and single.save_path == str(tmp_path / "one.json")
    assert single.activities == ["cpu", "cuda"] and single.profiles(1) and not single.profiles(0)
    assert ProfileConfig(workers=None).profiles(99)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (
            {"num_rollouts": 3, "warmup_rollouts": 3},
            ValueError,
            "num_rollouts must exceed warmup_rollouts",
        ),
        ({"warmup_rollouts": -1}, ValueError, r"warmup_rollouts: expected an int >= 0, got -1"),
        (
            {"num_rollouts": 0, "warmup_rollouts": 0},
            ValueError,
            "num_rollouts: expected an int >= 1",
        ),
        ({"num_rollouts": 2.5}, TypeError, "num_rollouts: expected an int, got float"),
        ({"warmup_rollouts": True}, TypeError, "warmup_rollouts: expected an int, got bool"),
        ({"workers": []}, ValueError, "at least one index"),
        ({"workers": [0, -1]}, ValueError, r"workers\[...\]: expected an int >= 0, got -1"),
        ({"workers": [1, 1]}, ValueError, "duplicate indices"),
        ({"workers": "0"}, TypeError, "expected a list of worker indices or None, got str"),
        ({"workers": [0, 1], "save_path": "t.json"}, ValueError, r"must contain \{worker_idx\}"),
        ({"workers": None, "save_path": "t.json"}, ValueError, r"must contain \{worker_idx\}"),
        ({"save_path": "t_{rank}.json"}, ValueError, r"only placeholder allowed is \{worker_idx\}"),
        ({"save_path": "t_{worker_idx.json"}, ValueError, "save_path 't_{worker_idx.json'"),
        ({"save_path": 3}, TypeError, "save_path: expected a str path, got int"),
        (
            {"activities": ["cpu", "tpu"]},
            ValueError,
            r"activities: expected distinct values among \['cpu', 'cuda'\]",
        ),
        ({"activities": []}, ValueError, "activities: expected distinct values"),
        ({"activities": "cpu"}, TypeError, "activities: expected a list"),
        ({"record_shapes": 1}, TypeError, "record_shapes: expected a bool, got 1"),
    ],
)
def test_config_errors(kwargs: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ProfileConfig(**kwargs)


def test_hook_for_a_worker_not_selected_is_done_and_free(tmp_path: Path) -> None:
    hook = ProfilerHook(
        ProfileConfig(workers=[0], save_path=str(tmp_path / "w.json")), worker_idx=1
    )
    assert (hook.enabled, hook.active, hook.done) == (False, False, True)
    for _ in range(10):
        with hook():
            pass
    assert hook.stop() is None and hook.stop() is None
    assert not list(tmp_path.iterdir())


def test_hook_arguments_and_misuse(tmp_path: Path) -> None:
    config = ProfileConfig(save_path=str(tmp_path / "w{worker_idx}.json"))
    with pytest.raises(TypeError, match="expected a ProfileConfig, got dict"):
        ProfilerHook({}, 0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected an int >= 0, got -1"):
        ProfilerHook(config, -1)
    hook = ProfilerHook(config, 0)
    assert hook.trace_path == str(tmp_path / "w0.json")  # absolute, resolved where it is built
    with pytest.raises(RuntimeError, match="without on_rollout_start"):
        hook.on_rollout_end()
    copy = pickle.loads(pickle.dumps(hook))  # picklable before use: nothing started
    assert (copy.worker_idx, copy.rollouts_seen, copy.done, copy.active) == (0, 0, False, False)
    assert "waiting" in repr(copy)


@pytest.mark.timeout(300)
def test_hook_skips_warmup_records_and_writes_a_chrome_trace(torch_run) -> None:
    report, out = torch_run
    # (active, done) before the first rollout, then after each of 6 rollouts (4 configured)
    assert report["hook_states"] == [
        [False, False], [True, False], [True, False], [True, False],
        [False, True], [False, True], [False, True],
    ]  # fmt: skip
    assert report["written"] == str(out / "worker_0.json")
    names = _names(out / "worker_0.json")
    # rollouts 1..3 recorded (rollout 0 is the warm-up), each a ProfilerStep
    assert {n for n in names if n.startswith("ProfilerStep#")} == {
        f"ProfilerStep#{i}" for i in (1, 2, 3)
    }
    for expected in (
        "EnvBase.step",
        "Collector.policy",
        "Collector.rollout",
        "ReplayBuffer.extend",
    ):
        assert expected in names
    assert "ClipPPOLoss.forward" in names and "Optimizer.step#SGD.step" in names
    assert report["timing_cuda_sync"] == ["outer", "outer/inner"]


@pytest.mark.timeout(300)
def test_hook_stop_exports_early_and_is_idempotent(torch_run) -> None:
    report, out = torch_run
    path = str(out / "early_3.json.gz")
    assert report["early"] == [True, path, path, True]
    assert {"Collector.rollout", "EnvBase.step"} <= _names(path)


@pytest.mark.timeout(60)
def test_hook_without_torch_writes_the_recorder_trace(stdlib_run) -> None:
    report, out = stdlib_run
    assert report["torch_imported"] is False and report["armed"] is True
    assert report["off_before_recording"] is True
    assert report["written"] == str(out / "stdlib_0.json") and report["recording_after"] is False
    names = _names(out / "stdlib_0.json")
    assert {n for n in names if n.startswith("ProfilerStep#")} == {
        "ProfilerStep#1",
        "ProfilerStep#2",
    }
    assert {"EnvBase.step", "Collector.policy", "Collector.rollout", "ReplayBuffer.extend"} <= names
    # a rollout that raises stops the hook and writes what was recorded
    assert report["crash"] == [True, str(out / "crash_0.json")]
    assert "EnvBase.step" in _names(out / "crash_0.json")
    assert report["timing_keys"] == ["x"]
