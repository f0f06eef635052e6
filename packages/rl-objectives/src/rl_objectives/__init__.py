"""rl-objectives: exact, fast return estimators and the standard RL losses.

Estimators (:mod:`rl_objectives.value`): ``GAE``, ``TD0Estimator``, ``TD1Estimator``,
``TDLambdaEstimator``, ``MultiAgentGAE`` and the pure functions in
:mod:`rl_objectives.value.functional`. Losses: ``PPOLoss``, ``ClipPPOLoss``,
``KLPENPPOLoss``, ``A2CLoss``, ``DQNLoss``, ``SACLoss``; target updaters ``SoftUpdate`` and
``HardUpdate``; ``make_update_step`` builds the whole learner step (compiled and
CUDA-graphed on request). See ``docs/objectives.md``.
"""

from __future__ import annotations

from rl_objectives._a2c import A2CLoss
from rl_objectives._compile import compile_with_warmup
from rl_objectives._cql import CQLLoss
from rl_objectives._crossq import CrossQLoss
from rl_objectives._ddpg import DDPGLoss
from rl_objectives._discrete_sac import DiscreteSACLoss
from rl_objectives._distributional_dqn import DistributionalDQNLoss
from rl_objectives._dqn import DQNLoss
from rl_objectives._iql import IQLLoss
from rl_objectives._loss_base import LossModule, ValueEstimators, distance_loss
from rl_objectives._optim import group_optimizers
from rl_objectives._ppo import ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rl_objectives._redq import REDQLoss
from rl_objectives._sac import SACLoss
from rl_objectives._target_updaters import HardUpdate, SoftUpdate
from rl_objectives._td3 import TD3Loss
from rl_objectives._td3_bc import TD3BCLoss
from rl_objectives._update_step import UpdateStep, make_update_step
from rl_objectives._value_kwargs import default_value_kwargs
from rl_objectives.exceptions import (
    MissingKeyError,
    ObjectivesError,
    ShapeMismatchError,
    TimeDimError,
)
from rl_objectives.value import (
    GAE,
    MultiAgentGAE,
    TD0Estimator,
    TD1Estimator,
    TDLambdaEstimator,
    ValueEstimatorBase,
    VTrace,
    marked_time_dim,
)

__version__ = "0.1.0"

__all__ = [
    "A2CLoss",
    "CQLLoss",
    "ClipPPOLoss",
    "CrossQLoss",
    "DDPGLoss",
    "DQNLoss",
    "DiscreteSACLoss",
    "DistributionalDQNLoss",
    "GAE",
    "HardUpdate",
    "IQLLoss",
    "KLPENPPOLoss",
    "LossModule",
    "MissingKeyError",
    "MultiAgentGAE",
    "ObjectivesError",
    "PPOLoss",
    "REDQLoss",
    "SACLoss",
    "ShapeMismatchError",
    "SoftUpdate",
    "TD0Estimator",
    "TD1Estimator",
    "TD3BCLoss",
    "TD3Loss",
    "TDLambdaEstimator",
    "TimeDimError",
    "UpdateStep",
    "VTrace",
    "ValueEstimatorBase",
    "ValueEstimators",
    "__version__",
    "compile_with_warmup",
    "default_value_kwargs",
    "distance_loss",
    "group_optimizers",
    "make_update_step",
    "marked_time_dim",
]
