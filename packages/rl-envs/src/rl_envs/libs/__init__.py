"""TorchRL's ``torchrl.envs.libs`` path: the simulator wrappers (``rl_envs.libs.gym``)."""

from __future__ import annotations

from rl_envs.libs import gym

__all__ = ["gym"]
