"""``benchmarks/compare_torchrl_tutorial.py`` (issue 38): the tutorial's text as each side
runs it (migrated on ours, ``total_frames`` replaced) and the ratio's bootstrap interval."""

from __future__ import annotations

from pathlib import Path

import pytest

SCRIPT = '''"""A TorchRL script."""
from torchrl.envs import GymEnv  # the env
frames_per_batch = 1000
total_frames = 10_000  # For a complete training, bring it up to 1M
print(total_frames // frames_per_batch)
'''


def test_each_side_runs_the_script_with_only_total_frames_changed(
    tmp_path: Path, bench_script
) -> None:
    script = tmp_path / "tutorial.py"
    script.write_text(SCRIPT)
    driver = bench_script("compare_torchrl_tutorial")
    ours = driver.patched_source(str(script), "ours", 50_000)
    theirs = driver.patched_source(str(script), "torchrl", 50_000)
    assert theirs == SCRIPT.replace("10_000", "50000")
    assert ours == theirs.replace("from torchrl.envs import GymEnv", "from rl_envs import GymEnv")
    script.write_text(SCRIPT.replace("total_frames = 10_000", "frames = 10"))
    with pytest.raises(SystemExit, match="expected one top-level 'total_frames = ...', found 0"):
        driver.patched_source(str(script), "torchrl", 50_000)


def test_ratio_of_medians_and_its_interval(bench_script) -> None:
    driver = bench_script("compare_torchrl_tutorial")
    ratio, low, high = driver.bootstrap_ratio([900.0, 1000.0, 1100.0], [450.0, 500.0, 550.0])
    assert ratio == 2.0 and 1.6 <= low <= 2.0 <= high <= 2.45
    same = driver.bootstrap_ratio([5.0] * 4, [5.0] * 4)
    assert same == (1.0, 1.0, 1.0)
    rows = [{"side": s, "seed": i, "final_return": r, "seconds": t, "loaded": False}
            for s, rs, t in (("ours", (9.0, 10.0), 1.0), ("torchrl", (10.0, 10.0), 3.0))
            for i, r in enumerate(rs)]
    summary = driver.summary(rows)
    assert summary["return_ratio"]["median_ratio"] == 0.95
    assert summary["speed_ours_over_torchrl"] == 3.0


def test_warm_runs_only_the_imports_and_children_write_bytecode(
    tmp_path: Path, bench_script, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    script = tmp_path / "tutorial.py"
    script.write_text(SCRIPT.replace("from torchrl.envs import GymEnv", "import json"))
    driver = bench_script("compare_torchrl_tutorial")
    driver.warm_imports(str(script), "torchrl")
    assert capsys.readouterr().out == ""  # the body (its print) did not run
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr("sys.argv", ["x", "--script", str(script), "--torchrl-path", "/t"])
    assert "PYTHONDONTWRITEBYTECODE" not in driver.child_env("torchrl", driver.parse())
    monkeypatch.setattr("sys.argv", ["x", "--script", str(script), "--no-bytecode"])
    assert driver.child_env("ours", driver.parse())["PYTHONDONTWRITEBYTECODE"] == "1"
