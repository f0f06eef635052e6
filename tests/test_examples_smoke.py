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
# per-example options that keep the tiny run short but still exercise every stage
# (learning starts inside the budget; rows short enough for several batches)
EXTRA_ARGS = {
    "dqn_prioritized.py": ["--learning-starts", "512", "--updates-per-batch", "2"],
    # one sub-env of 512 agent steps: a random Breakout episode (5 lives) ends inside it
    "ppo_atari.py": ["--total-frames", "2048", "--num-envs", "1", "--steps-per-env", "256",
                     "--num-minibatches", "2", "--epochs", "1"],
    "ppo_mujoco.py": ["--steps-per-env", "256", "--num-minibatches", "4", "--epochs", "2"],
    # one HalfCheetah episode is 1000 steps: it ends inside the 1024 frames
    "sac_mujoco.py": ["--learning-starts", "512", "--updates-per-frame", "0.05", "--hidden", "64"],
    "ppo_lstm_masked_cartpole.py": ["--num-envs", "4", "--steps-per-env", "64", "--epochs", "1",
                                    "--num-minibatches", "2"],
    # 4 envs x 256 steps: Pendulum's 200-step episodes end inside the budget
    "sac_pendulum.py": ["--num-envs", "4", "--steps-per-env", "8", "--learning-starts", "512",
                        "--updates-per-frame", "0.05"],
}


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert {"ppo_cartpole.py", *EXTRA_ARGS} <= names


@pytest.mark.timeout(300)
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
            "--logdir",
            str(tmp_path / "tb"),
            *EXTRA_ARGS.get(script.name, []),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=290,  # generous: CI machines and a busy 2-core box
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
    assert_scalars_logged(tmp_path / "tb", script.name)


def assert_scalars_logged(logdir: Path, name: str) -> None:
    """``--logdir`` holds TensorBoard scalars named like CleanRL's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"charts/episodic_return", "charts/SPS"} <= tags, (name, sorted(tags))
    assert any(tag.startswith("losses/") for tag in tags), (name, sorted(tags))
