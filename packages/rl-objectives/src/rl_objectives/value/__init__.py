"""Return estimators: pure functions in :mod:`rl_objectives.value.functional`, modules here."""

from __future__ import annotations

from rl_objectives.value import functional
from rl_objectives.value._estimator_base import ValueEstimatorBase
from rl_objectives.value._estimators import (
    GAE,
    MultiAgentGAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
)

__all__ = [
    "GAE",
    "MultiAgentGAE",
    "TD0Estimator",
    "TD1Estimator",
    "TDLambdaEstimator",
    "ValueEstimatorBase",
    "functional",
]
