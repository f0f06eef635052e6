"""``torchrl.envs.transforms``'s path: every transform of this package, and
``TransformedEnv`` / ``Compose`` / ``Transform`` (a test keeps it complete)."""

from __future__ import annotations

from rl_envs._transforms import Compose, Transform, TransformedEnv
from rl_envs._transforms_action import ActionScaling
from rl_envs._transforms_atari import EndOfLifeTransform, NoopResetEnv
from rl_envs._transforms_frames import CatFrames
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

__all__ = [
    "ActionMask",
    "ActionScaling",
    "CatFrames",
    "CatTensors",
    "ClipTransform",
    "Compose",
    "DTypeCastTransform",
    "DoubleToFloat",
    "EndOfLifeTransform",
    "ExcludeTransform",
    "FlattenObservation",
    "GrayScale",
    "InitTracker",
    "NoopResetEnv",
    "NormalizeReward",
    "ObservationNorm",
    "PermuteTransform",
    "RenameTransform",
    "Resize",
    "RewardClipping",
    "RewardScaling",
    "RewardSum",
    "SelectTransform",
    "SignTransform",
    "StepCounter",
    "TensorDictPrimer",
    "ToTensorImage",
    "Transform",
    "TransformedEnv",
    "UnsqueezeTransform",
    "VecNorm",
]
