"""``torchrl.envs.libs.gym``'s path: the gymnasium wrappers."""

from __future__ import annotations

from rl_envs._gym import GymWrapper
from rl_envs._gym_backend import gym_backend, set_gym_backend
from rl_envs._gym_env import GymEnv

__all__ = ["GymEnv", "GymWrapper", "gym_backend", "set_gym_backend"]
