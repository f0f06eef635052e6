"""Every example runs on another env of its action kind, named with ``--env-id`` (issue 21).

A user who names an env the example was not written for gets a run, not gymnasium's
"doesn't have a vector entry point defined": the examples follow gymnasium's own
vectorization choice and read the action space from the env. Each case runs the example's
``main`` in this process (``runpy``: no interpreter start, so the table stays cheap), on a
tiny budget, and checks the run's figures. ``ppo_lstm_masked_cartpole.py`` is left out: it
is a CartPole task by construction (it hides CartPole's two velocity entries).
"""

from __future__ import annotations

import math
import runpy
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parent / "examples"


# the tiny-budget options of every example (tests run in importlib mode: not importable)
_smoke = runpy.run_path(str(HERE / "test_examples_smoke.py"))
EXTRA_ARGS, TOTAL_FRAMES = _smoke["EXTRA_ARGS"], _smoke["TOTAL_FRAMES"]

OTHER_ENVS = [
    ("ppo_cartpole.py", "Acrobot-v1"),
    ("ppo_cartpole.py", "LunarLander-v3"),  # Box2D, the rl-envs [box2d] extra
    ("dqn_prioritized.py", "Acrobot-v1"),
    ("ppo_mujoco.py", "Pendulum-v1"),
    ("ppo_mujoco.py", "BipedalWalker-v3"),
    ("sac_pendulum.py", "MountainCarContinuous-v0"),
    ("sac_mujoco.py", "Hopper-v5"),
    ("ppo_atari.py", "ALE/Pong-v5"),
]
# iql_offline: its env is the dataset's (its smoke run records one on Pendulum)
# td3_mujoco, crossq_mujoco: sac_mujoco.py's loop (which runs Hopper here) with other defaults
LEFT_OUT = {"ppo_lstm_masked_cartpole.py", "iql_offline.py", "td3_mujoco.py", "crossq_mujoco.py"}


def test_every_example_but_the_masked_cartpole_has_another_env() -> None:
    assert {name for name, _ in OTHER_ENVS} | LEFT_OUT == set(EXTRA_ARGS)


def _run(script: str, env_id: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    """``python examples/<script> --env-id <env_id> ...`` in this process; its figures."""
    args = ["--total-frames", str(TOTAL_FRAMES), *EXTRA_ARGS[script]]
    monkeypatch.setattr(sys, "argv", [script, *args, "--env-id", env_id])
    monkeypatch.syspath_prepend(str(EXAMPLES))  # as for a script: sac_mujoco imports its sibling
    namespace = runpy.run_path(str(EXAMPLES / script), run_name="example_under_test")
    threads = torch.get_num_threads()
    try:
        return namespace["main"](namespace["parse_args"]())
    finally:
        torch.set_num_threads(threads)  # the example sets its own


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("script", "env_id"), OTHER_ENVS, ids=[f"{s}-{e}" for s, e in OTHER_ENVS])
def test_example_runs_on_another_env_of_its_kind(
    script: str, env_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(script, env_id, monkeypatch)
    assert 0 < result["frames"] <= 2 * TOTAL_FRAMES, result
    assert result["seconds"] > 0 and math.isfinite(result["fps"]), result
    # an episode may not end in so few frames (Pong, BipedalWalker): no return then
    assert math.isnan(result["mean_return"]) or math.isfinite(result["mean_return"]), result
