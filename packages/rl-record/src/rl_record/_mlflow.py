"""``MLFlowLogger``: TorchRL's MLflow wrapper, on a local SQLite store by default."""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from rl_record._backend import require
from rl_record._common import (
    Logger,
    check_name,
    flat_hparams,
    histogram,
    scalar_value,
    video_frames,
)
from rl_record._video import write_mp4

__all__ = ["MLFlowLogger", "resolve_tracking_uri"]


def resolve_tracking_uri(tracking_uri: str | os.PathLike) -> tuple[str, str | None]:
    """``(store uri, artifact location)``: a local folder (a path or ``file:`` URI) becomes
    an SQLite store ``<folder>/mlflow.db`` (MLflow 3's default backend) with artifacts in
    ``<folder>/artifacts``; any other URI (``sqlite:``, ``http(s):``) is used as given."""
    uri = str(tracking_uri)
    if "://" in uri and not uri.startswith("file:"):
        return uri, None
    folder = Path(uri.removeprefix("file://").removeprefix("file:")).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}", (folder / "artifacts").as_uri()


class MLFlowLogger(Logger):
    """Log to an MLflow run (the ``[mlflow]`` extra), through ``MlflowClient`` (no global
    active run). Scalars are buffered and written with ``log_batch`` at most every
    ``flush_secs`` and on :meth:`close` (one SQLite transaction per batch of rows).

    Args:
        exp_name: the MLflow experiment's name (created when missing).
        tracking_uri: a local folder or ``file:`` URI (see :func:`resolve_tracking_uri`),
            or a tracking server / database URI.
        tags: the run's tags.
        video_fps: frames per second of videos (saved as mp4 artifacts under ``videos/``).
        flush_secs: the longest time a scalar waits in memory.

    Raises:
        MissingBackendError: mlflow is not installed.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with MLFlowLogger("ppo", d) as logger:
        ...         logger.log_scalar("charts/SPS", 900.0, step=64)
        ...     history = logger.client.get_metric_history(logger.run_id, "charts/SPS")
        ...     [(m.step, m.value) for m in history]
        [(64, 900.0)]
    """

    def __init__(self, exp_name: str, tracking_uri: str | os.PathLike,
                 tags: dict[str, Any] | None = None, *, video_fps: int = 30,
                 flush_secs: float = 5.0, **kwargs: Any) -> None:
        self._mlflow = require("mlflow", "mlflow", "MLFlowLogger")
        self._tags, self.video_fps, self.flush_secs = dict(tags or {}), video_fps, flush_secs
        self._pending: list[Any] = []
        self._last_flush = time.monotonic()
        self._closed = False
        self.tracking_uri, self._artifacts = resolve_tracking_uri(tracking_uri)
        super().__init__(exp_name, str(tracking_uri))

    def _create_experiment(self) -> Any:
        self.client = self._mlflow.MlflowClient(tracking_uri=self.tracking_uri)
        found = self.client.get_experiment_by_name(self.exp_name)
        experiment_id = (
            found.experiment_id if found is not None
            else self.client.create_experiment(self.exp_name, artifact_location=self._artifacts)
        )
        run = self.client.create_run(experiment_id, tags={k: str(v) for k, v in
                                                          self._tags.items()})
        self.run_id = run.info.run_id
        return run

    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        """Buffer one metric row (written by the next flush).

        Raises:
            LoggerInputError: ``value`` is not a number or one-element tensor.
        """
        check_name(name, "MLFlowLogger")
        value = scalar_value(name, value, "MLFlowLogger")
        metric = self._mlflow.entities.Metric(name, value, int(time.time() * 1000),
                                              self._step(name, step))
        self._pending.append(metric)
        if time.monotonic() - self._last_flush >= self.flush_secs:
            self.flush()

    def flush(self) -> None:
        """Write the buffered metrics (``log_batch``, 1000 rows a call)."""
        pending, self._pending = self._pending, []
        for i in range(0, len(pending), 1000):
            self.client.log_batch(self.run_id, metrics=pending[i : i + 1000])
        self._last_flush = time.monotonic()

    def _artifact(self, folder: str, filename: str, write: Any) -> None:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / filename
            write(path)
            self.client.log_artifact(self.run_id, str(path), artifact_path=folder)

    def log_video(self, name: str, video: torch.Tensor, step: int | None = None,
                  **kwargs: Any) -> None:
        """An mp4 artifact ``videos/<name>_<step>.mp4``; ``fps=`` overrides.

        Raises:
            VideoFormatError: wrong layout or dtype (nothing is written).
        """
        check_name(name, "MLFlowLogger")
        frames = video_frames(name, video, "MLFlowLogger")
        step = self._step(f"video:{name}", step)
        fps = int(kwargs.get("fps", self.video_fps))
        filename = f"{name.replace('/', '_')}_{step}.mp4"
        self._artifact("videos", filename, lambda p: write_mp4(p, frames, fps))

    def log_hparams(self, cfg: Any) -> None:
        """The flat hyper-parameters as run params."""
        params = [self._mlflow.entities.Param(k, str(v))
                  for k, v in flat_hparams(cfg, "MLFlowLogger").items()]
        self.client.log_batch(self.run_id, params=params)

    def log_histogram(self, name: str, data: Any, **kwargs: Any) -> None:
        """MLflow has no histogram type: a JSON artifact ``histograms/<name>_<step>.json``
        with ``edges`` and ``counts`` (``step=`` and ``bins=`` 64 as keywords)."""
        check_name(name, "MLFlowLogger")
        counts, edges = histogram(name, data, int(kwargs.get("bins", 64)), "MLFlowLogger")
        step = self._step(f"histogram:{name}", kwargs.get("step"))
        text = json.dumps({"step": step, "edges": edges.tolist(), "counts": counts.tolist()})
        filename = f"{name.replace('/', '_')}_{step}.json"
        self._artifact("histograms", filename, lambda p: p.write_text(text))

    def close(self) -> None:
        """Flush and mark the run finished."""
        if not self._closed:
            self._closed = True
            self.flush()
            self.client.set_terminated(self.run_id)
