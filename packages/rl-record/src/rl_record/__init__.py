"""Experiment loggers (CSV, TensorBoard, W&B, MLflow) and video recording, with TorchRL's
names: ``get_logger``, ``generate_exp_name``, ``log_scalar`` / ``log_video`` /
``log_hparams`` / ``log_histogram``, and the ``VideoRecorder`` / ``PixelRenderTransform``
env transforms. Backends are the extras ``[tensorboard]``, ``[wandb]``, ``[mlflow]`` and
``[video]``; each is imported only when its logger is built.
"""

from __future__ import annotations

from rl_record._common import Logger
from rl_record._csv import CSVLogger
from rl_record._mlflow import MLFlowLogger
from rl_record._recorder import PixelRenderTransform, VideoRecorder
from rl_record._tensorboard import TensorboardLogger
from rl_record._utils import LOGGER_TYPES, experiment_logger, generate_exp_name, get_logger
from rl_record._video import read_video, write_mp4
from rl_record._wandb import WandbLogger, read_wandb_history
from rl_record.exceptions import LoggerInputError, MissingBackendError, VideoFormatError

__version__ = "0.1.0"

__all__ = [
    "CSVLogger",
    "LOGGER_TYPES",
    "Logger",
    "LoggerInputError",
    "MLFlowLogger",
    "MissingBackendError",
    "PixelRenderTransform",
    "TensorboardLogger",
    "VideoFormatError",
    "VideoRecorder",
    "WandbLogger",
    "__version__",
    "experiment_logger",
    "generate_exp_name",
    "get_logger",
    "read_video",
    "read_wandb_history",
    "write_mp4",
]
