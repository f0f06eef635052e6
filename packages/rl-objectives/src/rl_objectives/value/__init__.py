"""Return estimators: pure functions in :mod:`rl_objectives.value.functional`, modules here
(TorchRL's ``torchrl.objectives.value`` path)."""

from __future__ import annotations

from rl_objectives.value import functional
from rl_objectives.value._estimator_base import ValueEstimatorBase, marked_time_dim
from rl_objectives.value._estimators import (
    GAE,
    MultiAgentGAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
)
from rl_objectives.value._vtrace_estimator import VTrace

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "VTrace",
    "ValueEstimatorBase",
    "functional",
    "marked_time_dim",
]
