"""An env factory for ``test_profiling_learner.py``'s worker processes (importable there)."""

from __future__ import annotations

import time


def slow_cartpole(seconds: float):
    """CartPole (2 sub-envs) whose every step sleeps ``seconds`` more, inside its range."""
    from rl_envs import GymEnv

    class SlowCartPole(GymEnv):
        def _step(self, tensordict):  # noqa: ANN001, ANN202
            time.sleep(seconds)
            return super()._step(tensordict)

        def fast_step(self, action):  # noqa: ANN001, ANN202  (the collector's path)
            time.sleep(seconds)
            return super().fast_step(action)

    return SlowCartPole("CartPole-v1", num_envs=2, categorical_action_encoding=True)
