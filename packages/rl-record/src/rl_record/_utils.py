"""``get_logger`` and ``generate_exp_name`` (TorchRL's names and arguments)."""

from __future__ import annotations

import os
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from rl_record._common import Logger
from rl_record.exceptions import LoggerInputError

__all__ = ["LOGGER_TYPES", "experiment_logger", "generate_exp_name", "get_logger"]

LOGGER_TYPES = ("csv", "tensorboard", "wandb", "mlflow")


def generate_exp_name(model_name: str, experiment_name: str) -> str:
    """``<model>_<experiment>_<8 hex of a uuid4>_<yy_mm_dd-HH_MM_SS>``, as TorchRL's.

    Examples:
        >>> name = generate_exp_name("PPO", "cartpole")
        >>> name.startswith("PPO_cartpole_"), len(name.split("_"))
        (True, 8)
    """
    stamp = datetime.now().strftime("%y_%m_%d-%H_%M_%S")
    return "_".join((model_name, experiment_name, uuid.uuid4().hex[:8], stamp))


def get_logger(logger_type: str | None, logger_name: str | os.PathLike,
               experiment_name: str, **kwargs: Any) -> Logger | None:
    """A logger of ``logger_type`` writing under ``logger_name`` (TorchRL's ``get_logger``).

    Args:
        logger_type: ``"csv"``, ``"tensorboard"``, ``"wandb"`` or ``"mlflow"``; ``""`` or
            None returns None.
        logger_name: the folder the logger writes under (the MLflow store for mlflow).
        experiment_name: the experiment's (run's) name.
        **kwargs: ``wandb_kwargs`` / ``mlflow_kwargs`` for those loggers; ``video_fps``.

    Returns:
        The logger, or None.

    Raises:
        LoggerInputError: an unknown ``logger_type``.
        MissingBackendError: that logger's backend is not installed (the extra is named).

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with get_logger("csv", d, "exp") as logger:
        ...         type(logger).__name__, logger.video_format
        ('CSVLogger', 'mp4')
        >>> get_logger("", "unused", "exp") is None
        True
    """
    if not logger_type:
        return None
    fps = {"video_fps": kwargs["video_fps"]} if "video_fps" in kwargs else {}
    if logger_type == "csv":
        from rl_record._csv import CSVLogger

        return CSVLogger(experiment_name, log_dir=logger_name, video_format="mp4", **fps)
    if logger_type == "tensorboard":
        from rl_record._tensorboard import TensorboardLogger

        return TensorboardLogger(experiment_name, log_dir=logger_name, **fps)
    if logger_type == "wandb":
        from rl_record._wandb import WandbLogger

        wandb_kwargs = dict(kwargs.get("wandb_kwargs", {}))
        wandb_kwargs.setdefault("save_dir", str(logger_name))
        return WandbLogger(experiment_name, **fps, **wandb_kwargs)
    if logger_type == "mlflow":
        from rl_record._mlflow import MLFlowLogger

        uri = Path(os.path.abspath(logger_name)).as_uri()
        return MLFlowLogger(experiment_name, uri, **fps, **dict(kwargs.get("mlflow_kwargs", {})))
    raise LoggerInputError(
        f"get_logger: logger_type must be one of {LOGGER_TYPES} or empty, received "
        f"{logger_type!r}"
    )


def experiment_logger(logger_type: str, logdir: str | os.PathLike, hparams: Any = None, *,
                      video: bool = False, model_name: str = "run") -> Logger | None:
    """The examples' ``--logger`` / ``--logdir`` wiring: one call that builds the logger.

    ``logdir``'s last part names the experiment and its parent is ``get_logger``'s
    ``logger_name``, so TensorBoard writes its events into ``logdir`` itself and CSV its
    ``scalars/`` there. W&B runs offline unless ``WANDB_MODE=online``.

    Args:
        logger_type: one of :data:`LOGGER_TYPES`.
        logdir: the run's folder; empty: no logger, unless ``video`` (then
            ``runs/<generate_exp_name(model_name, logger_type)>``).
        hparams: logged with ``log_hparams`` when given (a dataclass config is fine).
        video: a video will be logged, so a logger is needed.
        model_name: the W&B project and the default run name's prefix.

    Returns:
        The logger, or None.

    Raises:
        LoggerInputError: an unknown ``logger_type``.

    Examples:
        >>> import tempfile
        >>> experiment_logger("csv", "") is None
        True
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with experiment_logger("csv", f"{d}/ppo-seed0", {"lr": 1e-3}) as logger:
        ...         logger.add_scalar("charts/SPS", 1000.0, 64)
        ...     sorted(p.name for p in Path(d, "ppo-seed0").iterdir())
        ['hparams.json', 'scalars']
    """
    if logger_type not in LOGGER_TYPES:
        raise LoggerInputError(
            f"--logger: expected one of {LOGGER_TYPES}, received {logger_type!r}"
        )
    if not logdir:
        if not video:
            return None
        logdir = Path("runs") / generate_exp_name(model_name, logger_type)
    path = Path(logdir)
    online = os.environ.get("WANDB_MODE", "offline") == "online"
    logger = get_logger(logger_type, str(path.parent), path.name,
                        wandb_kwargs={"offline": not online, "project": model_name})
    if hparams is not None:
        logger.log_hparams(hparams)
    return logger
