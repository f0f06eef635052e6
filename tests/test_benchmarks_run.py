"""``benchmarks/run.py`` runs every bench that has a ``run()`` and says which it leaves out."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _runner():
    spec = importlib.util.spec_from_file_location("_bench_runner", BENCHMARKS / "run.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _defines_run(path: Path) -> bool:
    return re.search(r"^def run\(", path.read_text(), re.MULTILINE) is not None


def test_a_full_run_takes_every_bench_with_run_and_lists_the_others(capsys):
    runner = _runner()
    scripts = {p.stem.removeprefix("bench_"): p for p in BENCHMARKS.glob("bench_*.py")}
    with_run = {name for name, path in scripts.items() if _defines_run(path)}
    assert {p.stem.removeprefix("bench_") for p in runner._select([])} == with_run
    # every other script is listed with its reason, and nothing listed has a run() or is gone
    assert set(runner.STANDALONE) == set(scripts) - with_run
    assert all(len(why) > 20 for why in runner.STANDALONE.values())
    line = runner._left_out()
    assert all(f"{name} (" in line for name in runner.STANDALONE)


def test_naming_a_standalone_bench_says_how_to_run_it(tmp_path, monkeypatch):
    runner = _runner()
    with pytest.raises(SystemExit, match=r"gpu: not run by run.py \(needs a CUDA GPU.*"
                       r"uv run python benchmarks/bench_gpu.py --help"):
        runner._select(["envs", "gpu"])
    with pytest.raises(SystemExit, match=r"unknown benchmark\(s\) \['nope'\]"):
        runner._select(["nope"])
    # a new script without run() and without a reason is refused, not silently skipped
    (tmp_path / "bench_new.py").write_text("def main():\n    pass\n")
    (tmp_path / "bench_old.py").write_text("def run():\n    return []\n")
    monkeypatch.setattr(runner, "HERE", tmp_path)
    with pytest.raises(SystemExit, match=r"benchmarks \['new'\] have no run\(\)"):
        runner._select([])
    assert "bench_old" not in sys.modules
