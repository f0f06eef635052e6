"""``torchrl.envs.libs.gym``'s path: the gymnasium wrappers."""

from __future__ import annotations

from rl_envs._gym import GymEnv, GymWrapper

__all__ = ["GymEnv", "GymWrapper"]
