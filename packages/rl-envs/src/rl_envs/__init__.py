"""Batched environments, specs, transforms and a gymnasium wrapper at near-raw speed."""

from __future__ import annotations

from rl_envs._batched import ParallelEnv, SerialEnv, WorkerError
from rl_envs._checks import check_env_specs
from rl_envs._composite import Composite
from rl_envs._env import EnvBase
from rl_envs._gym import GymEnv, GymWrapper
from rl_envs._policy import RandomPolicy
from rl_envs._specs import Bounded, TensorSpec, Unbounded
from rl_envs._specs_discrete import Binary, Categorical, MultiCategorical, OneHot
from rl_envs._transforms import Compose, Transform, TransformedEnv
from rl_envs._transforms_lib import InitTracker, RewardSum, StepCounter
from rl_envs._transforms_obs import DoubleToFloat, ObservationNorm, TensorDictPrimer
from rl_envs.exceptions import EnvClosedError, InvalidActionError, SpecError

__version__ = "0.1.0"

__all__ = [
    "Binary",
    "Bounded",
    "Categorical",
    "Compose",
    "Composite",
    "DoubleToFloat",
    "EnvBase",
    "EnvClosedError",
    "GymEnv",
    "GymWrapper",
    "InitTracker",
    "InvalidActionError",
    "MultiCategorical",
    "ObservationNorm",
    "OneHot",
    "ParallelEnv",
    "RandomPolicy",
    "RewardSum",
    "SerialEnv",
    "SpecError",
    "StepCounter",
    "TensorDictPrimer",
    "TensorSpec",
    "Transform",
    "TransformedEnv",
    "Unbounded",
    "WorkerError",
    "__version__",
    "check_env_specs",
]
