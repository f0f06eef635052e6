"""Batched environments, specs, transforms and a gymnasium wrapper at near-raw speed."""

from __future__ import annotations

from rl_envs._batched import ParallelEnv, SerialEnv
from rl_envs._checks import check_env_specs
from rl_envs._composite import Composite
from rl_envs._env import EnvBase
from rl_envs._fast_path import FastPathEnv
from rl_envs._gym import GymWrapper
from rl_envs._gym_backend import gym_backend, set_gym_backend
from rl_envs._gym_env import GymEnv
from rl_envs._moving import MovingObs, moving_obs_source
from rl_envs._policy import RandomPolicy
from rl_envs._resets import reset_where
from rl_envs._rollout import StepPlan, carry_pairs, carry_state, step_loop
from rl_envs._spec_aliases import (
    BinaryDiscreteTensorSpec,
    BoundedTensorSpec,
    CompositeSpec,
    DiscreteTensorSpec,
    MultiDiscreteTensorSpec,
    OneHotDiscreteTensorSpec,
    UnboundedContinuousTensorSpec,
    UnboundedDiscreteTensorSpec,
)
from rl_envs._specs import Bounded, ContinuousBox, TensorSpec, Unbounded
from rl_envs._specs_discrete import (
    Binary,
    BinaryBox,
    BoxList,
    Categorical,
    CategoricalBox,
    MultiCategorical,
    OneHot,
)
from rl_envs._step_mdp import EnvCreator, step_mdp
from rl_envs._transforms import Compose, Transform, TransformedEnv
from rl_envs._transforms_action import ActionScaling
from rl_envs._transforms_atari import EndOfLifeTransform, NoopResetEnv
from rl_envs._transforms_finite import FiniteTensorDictCheck
from rl_envs._transforms_frames import CatFrames
from rl_envs._transforms_frameskip import FrameSkipTransform
from rl_envs._transforms_image import GrayScale, Resize, ToTensorImage
from rl_envs._transforms_keys import CatTensors, ExcludeTransform, RenameTransform, SelectTransform
from rl_envs._transforms_lib import InitTracker, RewardSum, StepCounter
from rl_envs._transforms_mask import ActionMask
from rl_envs._transforms_obs import DoubleToFloat, ObservationNorm, TensorDictPrimer
from rl_envs._transforms_reward import ClipTransform, RewardClipping, RewardScaling, SignTransform
from rl_envs._transforms_reward_norm import NormalizeReward
from rl_envs._transforms_shape import (
    DTypeCastTransform,
    FlattenObservation,
    PermuteTransform,
    UnsqueezeTransform,
)
from rl_envs._transforms_vecnorm import VecNorm
from rl_envs._writer import RolloutWriter
from rl_envs.exceptions import (
    EnvClosedError,
    InvalidActionError,
    NonFiniteError,
    SpecError,
    WorkerError,
)

__version__ = "0.1.0"

__all__ = [
    "ActionMask",
    "ActionScaling",
    "Binary",
    "BinaryBox",
    "BinaryDiscreteTensorSpec",
    "Bounded",
    "BoundedTensorSpec",
    "BoxList",
    "CatFrames",
    "CatTensors",
    "Categorical",
    "CategoricalBox",
    "ClipTransform",
    "Compose",
    "Composite",
    "CompositeSpec",
    "ContinuousBox",
    "DTypeCastTransform",
    "DiscreteTensorSpec",
    "DoubleToFloat",
    "EndOfLifeTransform",
    "EnvBase",
    "EnvClosedError",
    "EnvCreator",
    "ExcludeTransform",
    "FastPathEnv",
    "FiniteTensorDictCheck",
    "FlattenObservation",
    "FrameSkipTransform",
    "GrayScale",
    "GymEnv",
    "GymWrapper",
    "InitTracker",
    "InvalidActionError",
    "MovingObs",
    "MultiCategorical",
    "MultiDiscreteTensorSpec",
    "NonFiniteError",
    "NoopResetEnv",
    "NormalizeReward",
    "ObservationNorm",
    "OneHot",
    "OneHotDiscreteTensorSpec",
    "ParallelEnv",
    "PermuteTransform",
    "RandomPolicy",
    "RenameTransform",
    "Resize",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "RolloutWriter",
    "SelectTransform",
    "SerialEnv",
    "SignTransform",
    "SpecError",
    "StepCounter",
    "StepPlan",
    "TensorDictPrimer",
    "TensorSpec",
    "ToTensorImage",
    "Transform",
    "TransformedEnv",
    "Unbounded",
    "UnboundedContinuousTensorSpec",
    "UnboundedDiscreteTensorSpec",
    "UnsqueezeTransform",
    "VecNorm",
    "WorkerError",
    "__version__",
    "carry_pairs",
    "carry_state",
    "check_env_specs",
    "gym_backend",
    "moving_obs_source",
    "reset_where",
    "set_gym_backend",
    "step_loop",
    "step_mdp",
]
