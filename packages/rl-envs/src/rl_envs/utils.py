"""``torchrl.envs.utils``'s names that live in this package (TorchRL's module path).

``ExplorationType`` / ``set_exploration_type`` are in :mod:`rl_modules`.
"""

from __future__ import annotations

from rl_envs._checks import check_env_specs
from rl_envs._step_mdp import step_mdp

__all__ = ["check_env_specs", "step_mdp"]
