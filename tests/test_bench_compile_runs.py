"""``benchmarks/bench_compile_runs.py`` keeps the rows of the examples a run does not measure."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_compile_runs.py"


def _bench():
    spec = importlib.util.spec_from_file_location("_bench_compile_runs", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_run_of_one_example_keeps_the_others_rows_with_their_own_time(tmp_path, monkeypatch):
    bench = _bench()
    out = tmp_path / "compile_runs.json"
    out.write_text(json.dumps({"benchmark": "bench_compile_runs", "time": "2026-11-27T05:07:20",
                               "total_frames_override": None,
                               "rows": [{"example": "ppo_cartpole", "eager_seconds": 25.15},
                                        {"example": "sac_mujoco", "eager_seconds": 1.0}]}))
    # the pair's runs are whole training runs (an hour); what is tested here is the file
    monkeypatch.setattr(bench, "compare", lambda name, *a: {"example": name,
                                                             "eager_seconds": 1272.0})
    bench.main(["--examples", "sac_mujoco", "--out", str(out)])
    rows = {r["example"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"ppo_cartpole", "sac_mujoco"}
    assert rows["ppo_cartpole"]["eager_seconds"] == 25.15  # kept, stamped with its old time
    assert rows["ppo_cartpole"]["time"] == "2026-11-27T05:07:20"
    assert rows["sac_mujoco"]["eager_seconds"] == 1272.0  # replaced, stamped now
    assert rows["sac_mujoco"]["time"] != "2026-11-27T05:07:20"


def test_a_first_run_writes_its_rows_alone(tmp_path, monkeypatch):
    bench = _bench()
    out = tmp_path / "new" / "compile_runs.json"
    monkeypatch.setattr(bench, "compare", lambda name, *a: {"example": name})
    bench.main(["--examples", "ppo_cartpole", "--out", str(out)])
    assert [r["example"] for r in json.loads(out.read_text())["rows"]] == ["ppo_cartpole"]
