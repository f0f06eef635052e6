"""Every script in ``examples/`` runs end to end on a tiny budget.

Each example is started as a user would (``python examples/X.py --total-frames N``) in a
fresh process and a scratch directory; its last stdout line must be one JSON object with
the run's figures (:func:`check_result`). The run itself is shared with the profiler's
test (``test_profiling_learner.py``), so that each example starts once per session.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

EXAMPLES = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.py"))
TOTAL_FRAMES = 1024
# per-example options that keep the tiny run short but still exercise every stage:
# learning starts inside the budget, an episode ends inside it (so a return is logged),
# and there are at least 5 iterations, learning from the first batches on (the profiler's
# trace records iterations 3 to 5, which must learn as the rest of the run does)
EXTRA_ARGS = {
    "ppo_cartpole.py": ["--steps-per-env", "8"],
    "ppo_mujoco.py": ["--steps-per-env", "128", "--num-minibatches", "4", "--epochs", "2"],
    "ppo_lstm_masked_cartpole.py": ["--num-envs", "4", "--steps-per-env", "32", "--epochs", "1",
                                    "--num-minibatches", "2"],
    # one sub-env of 512 agent steps: a random Breakout episode (5 lives) ends inside it
    "ppo_atari.py": ["--total-frames", "2048", "--num-envs", "1", "--steps-per-env", "64",
                     "--num-minibatches", "2", "--epochs", "1"],
    "dqn_prioritized.py": ["--learning-starts", "128", "--updates-per-batch", "2"],
    # 4 envs x 256 steps: Pendulum's 200-step episodes end inside the budget
    "sac_pendulum.py": ["--num-envs", "4", "--steps-per-env", "8", "--learning-starts", "32",
                        "--updates-per-frame", "0.05"],
    # one HalfCheetah episode is 1000 steps: it ends inside the 1024 frames
    "sac_mujoco.py": ["--learning-starts", "16", "--updates-per-frame", "0.05", "--hidden", "64"],
    # sac_mujoco.py's loop with TD3's and CrossQ's defaults (CrossQ's critics made narrow)
    "td3_mujoco.py": ["--learning-starts", "16", "--updates-per-frame", "0.05", "--hidden", "64"],
    "crossq_mujoco.py": ["--learning-starts", "16", "--updates-per-frame", "0.05", "--hidden", "64",
                         "--critic-hidden", "64"],
    # offline: a 1,000-frame random Pendulum dataset made first (in the scratch directory),
    # then 256 IQL gradient steps ("frames"), evaluated twice
    "iql_offline.py": ["--env-id", "Pendulum-v1", "--dataset-id", "test/pendulum-random-v0",
                       "--record-frames", "1000", "--minari-root", "minari", "--copies-root",
                       "copies", "--total-frames", "256", "--eval-every", "128",
                       "--eval-episodes", "2", "--hidden", "64", "--batch-size", "64"],
}


def test_examples_exist() -> None:
    names = {p.name for p in EXAMPLES}
    assert names == set(EXTRA_ARGS), "every example needs its tiny-budget options here"


def check_result(stdout: str, logdir: Path, name: str) -> None:
    """The run's last stdout line is its JSON figures, and ``logdir`` holds its scalars.

    Each example runs once per test session, in ``test_profiling_learner.py``
    (``test_the_verdict_matches_the_run_report``): with ``RL_PROFILING=1``, ``--profile``
    and ``--logdir``, its figures and scalars are checked here and its profile there (the
    runs without profiling are those of ``test_checkpoint_resume.py`` and the README's
    main job in CI).
    """
    lines = stdout.strip().splitlines()
    assert lines, f"{name} printed nothing"
    result = json.loads(lines[-1])
    assert isinstance(result, dict)
    for key in ("frames", "seconds", "mean_return", "fps"):
        assert key in result, f"{name}: {key!r} missing from {result}"
        assert isinstance(result[key], int | float) and math.isfinite(result[key]), (
            key,
            result[key],
        )
    assert 0 < result["frames"] <= 2 * TOTAL_FRAMES
    assert result["seconds"] > 0 and result["fps"] > 0
    if name == "ppo_cartpole.py":
        assert result["frames"] == TOTAL_FRAMES
    assert_scalars_logged(logdir, name)


def assert_scalars_logged(logdir: Path, name: str) -> None:
    """``--logdir`` holds TensorBoard scalars named like CleanRL's."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"charts/episodic_return", "charts/SPS"} <= tags, (name, sorted(tags))
    assert any(tag.startswith("losses/") for tag in tags), (name, sorted(tags))
