"""Key names used by rl-envs, defined once (see the glossary in ``docs/data-layout.md``)."""

from __future__ import annotations

__all__ = [
    "ACTION",
    "DONE",
    "DONE_KEYS",
    "EPISODE_REWARD",
    "IS_INIT",
    "NEXT",
    "OBSERVATION",
    "PIXELS",
    "RESET",
    "REWARD",
    "STEP_COUNT",
    "TERMINATED",
    "TRUNCATED",
]

OBSERVATION = "observation"
"""Default observation key (a non-``Dict`` gymnasium observation space)."""
PIXELS = "pixels"
"""Image observations (TorchRL's ``IMAGE_KEYS``): the default key of the image transforms."""
ACTION = "action"
"""Action key, written at the root by the policy."""
REWARD = "reward"
"""Reward key, under ``"next"``; shape ``[*B, 1]``."""
DONE = "done"
"""``terminated | truncated``; shape ``[*B, 1]``, bool."""
TERMINATED = "terminated"
"""The episode reached a terminal state (no bootstrapping)."""
TRUNCATED = "truncated"
"""The episode was cut (time limit): bootstrap from ``("next", "observation")``."""
DONE_KEYS = (DONE, TERMINATED, TRUNCATED)
NEXT = "next"
"""Sub-TensorDict holding what a step produced."""
RESET = "_reset"
"""Boolean mask ``[*B, 1]`` (or ``[*B]``) selecting the sub-envs ``reset(td)`` resets."""
IS_INIT = "is_init"
"""Written by ``InitTracker``: ``True`` on the first step of an episode."""
STEP_COUNT = "step_count"
"""Written by ``StepCounter``: steps taken in the current episode."""
EPISODE_REWARD = "episode_reward"
"""Written by ``RewardSum``: running sum of the reward over the episode."""
