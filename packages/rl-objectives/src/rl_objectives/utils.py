"""``torchrl.objectives.utils``'s path: target updaters, estimator names and defaults."""

from __future__ import annotations

from rl_objectives._loss_base import ValueEstimators, distance_loss
from rl_objectives._optim import group_optimizers
from rl_objectives._target_updaters import HardUpdate, SoftUpdate
from rl_objectives._value_kwargs import default_value_kwargs

__all__ = [
    "HardUpdate",
    "SoftUpdate",
    "ValueEstimators",
    "default_value_kwargs",
    "distance_loss",
    "group_optimizers",
]
