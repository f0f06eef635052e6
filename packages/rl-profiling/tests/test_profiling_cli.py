"""``rl-profile summary``: real traces, hand-made traces, and bad input."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import pytest
from rl_profiling import TraceError, load_trace_events, summarize_events, summarize_trace
from rl_profiling._cli import main


def _x(name: str, ts: float, dur: float, tid: int = 1, **extra: object) -> dict:
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, **extra}


@pytest.mark.timeout(300)
def test_summary_of_a_real_torch_profiler_trace(torch_run, capsys) -> None:
    _, out = torch_run
    assert main(["summary", str(out / "worker_0.json"), "--top", "8"]) == 0
    text = capsys.readouterr().out
    assert "Top 8 ranges by total time" in text and "Top 8 ranges by self time" in text
    table = text.split("Top 8 ranges by self time")[0]
    assert len([ln for ln in table.splitlines() if ln.endswith(("step", "rollout", "*"))]) >= 2
    first_self_row = text.split("Top 8 ranges by self time")[1].splitlines()[2]
    assert first_self_row.endswith("EnvBase.step")  # the env sleeps: the largest self time
    assert "Where the time goes: environment stepping" in text
    verdict = text.strip().splitlines()[-1]
    assert verdict.startswith("Verdict: environment stepping takes") and verdict.endswith(
        "read docs/envs.md next"
    )

    summary = summarize_trace(out / "worker_0.json")
    by_name = {r.name: r for r in summary.ranges}
    assert by_name["ProfilerStep#*"].calls == 3 and by_name["EnvBase.step"].calls == 30
    policy = by_name["Collector.policy"]
    assert 0 < policy.self_us < policy.total_us  # aten ops nested under it
    assert summary.categories["policy"] == pytest.approx(policy.total_us)
    assert 0 < summary.categories["loss"] < summary.categories["env"]


@pytest.mark.timeout(60)
def test_summary_of_the_stdlib_recorder_trace_through_the_console_script(
    stdlib_run, run_py
) -> None:
    _, out = stdlib_run
    trace = str(out / "stdlib_0.json")
    script = shutil.which("rl-profile", path=str(Path(sys.executable).parent))
    command = (
        [script, "summary", trace] if script else ["-m", "rl_profiling._cli", "summary", trace]
    )
    if script:  # the installed entry point, run as the user would
        import subprocess

        proc = subprocess.run(command, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        text = proc.stdout
    else:
        text = run_py(command, armed=False).stdout
    assert "EnvBase.step" in text and "Verdict: environment stepping" in text
    assert "ProfilerStep#*" in text
    assert (
        run_py(["-m", "rl_profiling", "summary", trace, "--top", "2"], armed=False).stdout.count(
            "EnvBase.step"
        )
        >= 1
    )


def test_self_time_subtracts_nested_ranges_on_the_same_thread_only() -> None:
    events = [
        _x("Collector.rollout", 0, 100),
        _x("EnvBase.step", 10, 50),
        _x("aten::add", 20, 10),
        _x("Collector.policy", 70, 20),
        _x("aten::addmm", 75, 10),
        _x("EnvBase.step", 40, 30, tid=2),  # another thread: not nested in the rollout
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "ts": 0, "dur": 5, "pid": 0, "tid": 7},
        {
            "ph": "X",
            "cat": "python_function",
            "name": "foo.py(1): f",
            "ts": 0,
            "dur": 100,
            "pid": 1,
            "tid": 1,
        },
    ]
    s = summarize_events(events)
    stats = {r.name: (r.calls, r.total_us, r.self_us) for r in s.ranges}
    assert stats == {
        "Collector.rollout": (1, 100.0, 30.0),
        "EnvBase.step": (2, 80.0, 70.0),
        "aten::add": (1, 10.0, 10.0),
        "Collector.policy": (1, 20.0, 10.0),
        "aten::addmm": (1, 10.0, 10.0),
    }
    assert s.threads == 2 and s.profiled_us == 130.0
    # aten ops count for their range; the rollout's own time is collector overhead
    assert s.categories == {"env": 80.0, "policy": 20.0, "collector": 30.0}
    assert (s.gpu_events, s.gpu_us, s.skipped) == (1, 5.0, {"python_function": 1})
    assert [r.name for r in s.top_by_self(2)] == ["EnvBase.step", "Collector.rollout"]


def test_begin_end_pairs_bare_list_and_unterminated_array(tmp_path: Path) -> None:
    events = [
        {"ph": "B", "name": "Collector.rollout", "ts": 0, "pid": 1, "tid": 1},
        {"ph": "B", "name": "ReplayBuffer.extend", "ts": 10, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 40, "pid": 1, "tid": 1},
        {"ph": "E", "ts": 50, "pid": 1, "tid": 1},
    ]
    path = tmp_path / "be.json"
    path.write_text(json.dumps(events)[:-1] + ",")  # Chrome accepts an unterminated array
    assert len(load_trace_events(path)) == 4
    stats = {r.name: (r.total_us, r.self_us) for r in summarize_trace(path).ranges}
    assert stats == {"Collector.rollout": (50.0, 20.0), "ReplayBuffer.extend": (30.0, 30.0)}
    assert "replay buffer takes 60%" in summarize_trace(path).verdict()


def test_verdicts_point_to_the_docs() -> None:
    loss = summarize_events(
        [_x("Optimizer.step#Adam.step", 0, 10), _x("ClipPPOLoss.forward", 10, 30)]
    )
    assert loss.verdict().startswith("loss takes 75% of the profiled time (optimiser 25%)")
    assert loss.verdict().endswith("read docs/objectives.md next")
    overhead = summarize_events([_x("Collector.rollout", 0, 100), _x("EnvBase.step", 0, 10)])
    assert overhead.verdict().startswith("collector overhead / waiting for data takes 90%")
    assert overhead.verdict().endswith("read docs/collectors.md next")
    bare = summarize_events([_x("aten::mm", 0, 10)])
    assert "RL_PROFILING=1" in bare.verdict() and "docs/profiling.md" in bare.verdict()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "not valid JSON"),
        ('{"events": []}', "not a Chrome trace"),
        ("42", "not a Chrome trace"),
    ],
)
def test_bad_files_exit_non_zero_with_a_clear_message(
    tmp_path: Path, capsys, content, message
) -> None:
    path = tmp_path / "trace.json"
    if content is not None:
        path.write_text(content)
    assert main(["summary", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rl-profile summary: error:") and message in err
    if content is not None:
        with pytest.raises(TraceError, match=message):
            load_trace_events(path)


@pytest.mark.parametrize("cut", [0.5, 0.98, 10])
def test_a_truncated_gz_trace_is_an_error_naming_the_file(tmp_path: Path, capsys, cut) -> None:
    events = [{"name": f"r{i}", "ph": "X", "ts": i, "dur": 1, "pid": 1, "tid": 1}
              for i in range(2000)]
    whole = gzip.compress(json.dumps({"traceEvents": events}).encode())
    path = tmp_path / "run.pt.trace.json.gz"
    path.write_bytes(whole[: int(len(whole) * cut)] if cut < 1 else whole[:cut])
    assert main(["summary", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("rl-profile summary: error:") and str(path) in err
    assert "truncated" in err and "Traceback" not in err
    with pytest.raises(TraceError, match="truncated or corrupt"):
        load_trace_events(path)


def test_empty_trace_and_usage_errors(tmp_path: Path, capsys) -> None:
    path = tmp_path / "empty.json"
    path.write_text('{"traceEvents": []}')
    assert main(["summary", str(path)]) == 0
    assert "holds no complete or B/E range events" in capsys.readouterr().out
    for argv in (["summary", str(path), "--top", "0"], ["summary"], []):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
