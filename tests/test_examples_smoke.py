"""Every script in ``examples/`` runs end to end on a tiny budget.

Each example is started as a user would (``python examples/X.py --total-frames N``) in a
fresh process and a scratch directory; its last stdout line must be one JSON object with
the run's figures.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
TOTAL_FRAMES = 1024


def test_examples_exist() -> None:
    assert any(p.name == "ppo_cartpole.py" for p in EXAMPLES)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("script", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_with_tiny_budget(script: Path, tmp_path: Path, no_leaks) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            str(script),
            "--total-frames",
            str(TOTAL_FRAMES),
            "--seed",
            "1",
            "--device",
            "cpu",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = proc.stdout.strip().splitlines()
    assert lines, f"{script.name} printed nothing"
    result = json.loads(lines[-1])
    assert isinstance(result, dict)
    for key in ("frames", "seconds", "mean_return", "fps"):
        assert key in result, f"{script.name}: {key!r} missing from {result}"
        assert isinstance(result[key], int | float) and math.isfinite(result[key]), (
            key,
            result[key],
        )
    assert 0 < result["frames"] <= 2 * TOTAL_FRAMES
    assert result["seconds"] > 0 and result["fps"] > 0
    if script.name == "ppo_cartpole.py":
        assert result["frames"] == TOTAL_FRAMES
