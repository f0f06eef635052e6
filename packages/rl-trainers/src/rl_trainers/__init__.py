"""TorchRL's ``Trainer`` and the hooks of its tutorials, ``evaluate``, policy export
(``torch.export``) and state dicts, SB3's ``EvalCallback`` and ``record_video``."""

from __future__ import annotations

from rl_trainers._eval_callback import EvalCallback
from rl_trainers._evaluate import EvalResult, evaluate, record_video
from rl_trainers._export import export_policy, load_policy, save_policy
from rl_trainers._hooks import (
    CountFramesLog,
    LogScalar,
    LogValidationReward,
    OptimizerHook,
    ReplayBufferTrainer,
    UpdateWeights,
)
from rl_trainers._trainer import HOOK_POINTS, Trainer
from rl_trainers.exceptions import EvaluationError, ExportError, TrainerError

__version__ = "0.1.0"

__all__ = [
    "CountFramesLog",
    "EvalCallback",
    "EvalResult",
    "EvaluationError",
    "ExportError",
    "HOOK_POINTS",
    "LogScalar",
    "LogValidationReward",
    "OptimizerHook",
    "ReplayBufferTrainer",
    "Trainer",
    "TrainerError",
    "UpdateWeights",
    "__version__",
    "evaluate",
    "export_policy",
    "load_policy",
    "record_video",
    "save_policy",
]
