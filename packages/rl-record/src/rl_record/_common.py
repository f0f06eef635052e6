"""The ``Logger`` contract (TorchRL's) and the input checks every logger shares.

Every check runs before a logger writes anything, so bad input raises and leaves the
files as they were.
"""

from __future__ import annotations

import abc
import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rl_record.exceptions import LoggerInputError, VideoFormatError

__all__ = [
    "Logger", "check_name", "ensure_dir", "flat_hparams", "histogram", "scalar_value",
    "video_frames",
]


def check_name(name: Any, who: str) -> str:
    """A metric or video name: a non-empty string without ``..`` path parts."""
    if not isinstance(name, str) or not name or ".." in name.split("/"):
        raise LoggerInputError(
            f"{who}: name must be a non-empty str without '..' parts, received {name!r}"
        )
    return name


def scalar_value(name: str, value: Any, who: str) -> float:
    """``value`` as a float: a Python or numpy number, or a one-element tensor/array."""
    if isinstance(value, bool | int | float | np.number):
        return float(value)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach().item())
    if isinstance(value, np.ndarray) and value.size == 1:
        return float(value.item())
    shape = tuple(value.shape) if hasattr(value, "shape") else None
    raise LoggerInputError(
        f"{who}.log_scalar({name!r}): value must be a number or a one-element tensor, "
        f"received {type(value).__name__}" + (f" of shape {shape}" if shape is not None else "")
        + " (reduce it first, e.g. .mean())"
    )


def video_frames(name: str, video: Any, who: str) -> np.ndarray:
    """TorchRL's video layout ``[T, C, H, W]`` or ``[N, T, C, H, W]`` (``uint8``, C = 1 or
    3) as ``uint8 [T, H, W, C]``; N > 1 videos are tiled side by side."""
    where = f"{who}.log_video({name!r})"
    if not isinstance(video, torch.Tensor | np.ndarray):
        raise VideoFormatError(f"{where}: video must be a tensor, received {type(video).__name__}")
    video = torch.as_tensor(video)
    if video.dtype != torch.uint8:
        raise VideoFormatError(
            f"{where}: video must be uint8 (0-255), received {video.dtype}; "
            "convert floats in [0, 1] with (video * 255).to(torch.uint8)"
        )
    received = tuple(video.shape)
    if video.ndim == 4:
        video = video.unsqueeze(0)
    if video.ndim != 5 or video.shape[2] not in (1, 3) or 0 in video.shape:
        raise VideoFormatError(
            f"{where}: video must be [T, C, H, W] or [N, T, C, H, W] with C in (1, 3) and "
            f"no empty dim, received shape {received}"
            + ("; channels-last frames: .permute(0, 3, 1, 2)" if received[-1] in (1, 3) else "")
        )
    n, t, c, h, w = video.shape
    tiled = video.permute(1, 3, 0, 4, 2).reshape(t, h, n * w, c)  # N side by side
    return tiled.cpu().numpy()


def histogram(name: str, data: Any, bins: int, who: str) -> tuple[np.ndarray, np.ndarray]:
    """``(counts, edges)`` of ``data`` (a tensor, array or sequence of numbers)."""
    try:
        values = torch.as_tensor(data).detach().cpu().double().flatten().numpy()
    except (TypeError, ValueError, RuntimeError) as err:
        raise LoggerInputError(
            f"{who}.log_histogram({name!r}): data must be numbers (tensor, array or sequence), "
            f"received {type(data).__name__}"
        ) from err
    if values.size == 0 or not np.isfinite(values).all():
        raise LoggerInputError(
            f"{who}.log_histogram({name!r}): data must be non-empty and finite, received "
            f"{values.size} values"
        )
    return np.histogram(values, bins=bins)


def flat_hparams(cfg: Any, who: str) -> dict[str, Any]:
    """A flat ``{"a.b": value}`` dict from a mapping, dataclass or namespace."""
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        cfg = dataclasses.asdict(cfg)
    elif not isinstance(cfg, Mapping) and hasattr(cfg, "__dict__"):
        cfg = vars(cfg)
    if not isinstance(cfg, Mapping):
        raise LoggerInputError(
            f"{who}.log_hparams: cfg must be a mapping, dataclass or namespace, received "
            f"{type(cfg).__name__}"
        )
    out: dict[str, Any] = {}
    for key, value in cfg.items():
        if isinstance(value, Mapping):
            out.update({f"{key}.{k}": v for k, v in flat_hparams(value, who).items()})
        elif isinstance(value, bool | int | float | str) or value is None:
            out[str(key)] = value
        elif isinstance(value, Sequence):
            out[str(key)] = str(list(value))
        else:
            out[str(key)] = str(value)
    return out


class Logger(abc.ABC):
    """TorchRL's logger template: ``log_scalar``, ``log_video``, ``log_hparams``,
    ``log_histogram``; ``close()`` (also as a context manager) flushes and ends the run.

    Args:
        exp_name: the experiment's name.
        log_dir: where the experiment writes (its meaning is the backend's).

    Examples:
        >>> import tempfile
        >>> from rl_record import CSVLogger
        >>> with tempfile.TemporaryDirectory() as d, CSVLogger("exp", log_dir=d) as logger:
        ...     logger.log_scalar("charts/SPS", 1000.0, step=64)
        ...     isinstance(logger, Logger)
        True
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike) -> None:
        if not isinstance(exp_name, str):
            raise LoggerInputError(
                f"{type(self).__name__}: exp_name must be a str, received {exp_name!r}"
            )
        self.exp_name = exp_name
        self.log_dir = str(log_dir)
        self._counts: dict[str, int] = {}
        self.experiment = self._create_experiment()

    @abc.abstractmethod
    def _create_experiment(self) -> Any: ...

    def _step(self, name: str, step: int | None) -> int:
        """``step``, or the number of earlier calls for ``name`` when it is None."""
        count = self._counts.get(name, 0)
        self._counts[name] = count + 1
        if step is None:
            return count
        if isinstance(step, bool) or not isinstance(step, int | np.integer):
            raise LoggerInputError(
                f"{type(self).__name__}: step of {name!r} must be an int or None, "
                f"received {step!r}"
            )
        return int(step)

    @abc.abstractmethod
    def log_scalar(self, name: str, value: float, step: int | None = None) -> None:
        """Log one scalar (a number or a one-element tensor) at ``step``."""

    @abc.abstractmethod
    def log_video(self, name: str, video: torch.Tensor, step: int | None = None,
                  **kwargs: Any) -> None:
        """Log a ``uint8`` video ``[T, C, H, W]`` or ``[N, T, C, H, W]``."""

    @abc.abstractmethod
    def log_hparams(self, cfg: Any) -> None:
        """Log the run's hyper-parameters (a mapping, dataclass or namespace)."""

    @abc.abstractmethod
    def log_histogram(self, name: str, data: Any, **kwargs: Any) -> None:
        """Log a histogram of ``data`` (``step=`` and ``bins=`` as keywords)."""

    def log_metrics(self, metrics: Any, step: int | None = None, *,
                    keys_sep: str = "/") -> dict[str, Any]:
        """Log several scalars at ``step`` (TorchRL's ``log_metrics``).

        Args:
            metrics: a mapping name -> scalar, or a TensorDict (nested keys joined with
                ``keys_sep``); one-element tensors become Python numbers, ``None`` (no
                measurement yet, e.g. tqdm's first ``rate``) is skipped.
            step: the step of every metric.
            keys_sep: the separator of a TensorDict's nested keys.

        Returns:
            The logged ``{name: number}``.
        """
        if hasattr(metrics, "flatten_keys"):  # a TensorDict, without importing tensordict
            metrics = metrics.flatten_keys(keys_sep)
        safe = {str(name): value.item() if isinstance(value, torch.Tensor) else value
                for name, value in metrics.items() if value is not None}
        for name, value in safe.items():
            self.log_scalar(name, value, step)
        return safe

    def add_scalar(self, tag: str, scalar_value: Any, global_step: int | None = None) -> None:
        """``SummaryWriter.add_scalar``'s name for :meth:`log_scalar` (CleanRL-style scripts
        keep their calls)."""
        self.log_scalar(tag, scalar_value, global_step)

    def close(self) -> None:  # noqa: B027 (an optional hook, not abstract)
        """Flush and end the run (idempotent)."""

    def __enter__(self) -> Logger:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(exp_name={self.exp_name!r}, log_dir={self.log_dir!r})"


def ensure_dir(path: str | os.PathLike) -> Path:
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    return path
