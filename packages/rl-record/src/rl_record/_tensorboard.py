"""``TensorboardLogger``: TorchRL's TensorBoard wrapper (``torch.utils.tensorboard``)."""

from __future__ import annotations

import os
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
from rl_record._video import encode_gif

__all__ = ["TensorboardLogger"]


class TensorboardLogger(Logger):
    """Write TensorBoard event files to ``<log_dir>/<exp_name>`` (the ``[tensorboard]``
    extra).

    Scalars are ``add_scalar`` events (read back with TensorBoard's ``EventAccumulator``);
    videos are animated GIF image summaries, as ``SummaryWriter.add_video`` writes them
    (encoded with PyAV, the ``[video]`` extra, instead of moviepy); hyper-parameters a
    markdown table under the ``hparams`` text tag.

    Args:
        exp_name: the experiment's name (a sub-folder of ``log_dir``).
        log_dir: the parent folder (TorchRL's default ``tb_logs``).
        video_fps: frames per second of videos.
        flush_secs: the writer's flush period.

    Raises:
        MissingBackendError: tensorboard is not installed.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with TensorboardLogger("ppo", log_dir=d) as logger:
        ...         logger.log_scalar("charts/SPS", 900.0, step=64)
        ...     from tensorboard.backend.event_processing.event_accumulator import (
        ...         EventAccumulator)
        ...     events = EventAccumulator(f"{d}/ppo"); _ = events.Reload()
        ...     [(e.step, e.value) for e in events.Scalars("charts/SPS")]
        [(64, 900.0)]
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike = "tb_logs", *,
                 video_fps: int = 30, flush_secs: float = 10.0) -> None:
        require("tensorboard", "tensorboard", "TensorboardLogger")
        self.video_fps, self.flush_secs = video_fps, flush_secs
        super().__init__(exp_name, log_dir)

    def _create_experiment(self) -> Any:
        writer_cls = require("torch.utils.tensorboard", "tensorboard", "TensorboardLogger")
        return writer_cls.SummaryWriter(
            os.path.join(self.log_dir, self.exp_name), flush_secs=self.flush_secs
        )

    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        """``add_scalar(name, value, step)``.

        Raises:
            LoggerInputError: ``value`` is not a number or one-element tensor.
        """
        check_name(name, "TensorboardLogger")
        value = scalar_value(name, value, "TensorboardLogger")
        self.experiment.add_scalar(name, value, self._step(name, step))

    def log_video(self, name: str, video: torch.Tensor, step: int | None = None,
                  **kwargs: Any) -> None:
        """An animated GIF image summary (what ``add_video`` writes); ``fps=`` overrides.

        Raises:
            VideoFormatError: wrong layout or dtype (nothing is written).
        """
        check_name(name, "TensorboardLogger")
        frames = video_frames(name, video, "TensorboardLogger")
        gif = encode_gif(frames, int(kwargs.get("fps", self.video_fps)))
        summary_pb2 = require("tensorboard.compat.proto.summary_pb2", "tensorboard",
                              "TensorboardLogger")
        t, h, w, c = frames.shape
        image = summary_pb2.Summary.Image(height=h, width=w, colorspace=3,
                                          encoded_image_string=gif)
        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=name, image=image)])
        self.experiment.file_writer.add_summary(summary, self._step(f"video:{name}", step))

    def log_hparams(self, cfg: Any) -> None:
        """A markdown table of the flat hyper-parameters, text tag ``hparams``."""
        params = flat_hparams(cfg, "TensorboardLogger")
        rows = "\n".join(f"| {k} | {v} |" for k, v in sorted(params.items()))
        self.experiment.add_text("hparams", "| name | value |\n|---|---|\n" + rows)

    def log_histogram(self, name: str, data: Any, **kwargs: Any) -> None:
        """``add_histogram`` (``step=`` and ``bins=`` 64 as keywords)."""
        check_name(name, "TensorboardLogger")
        counts, edges = histogram(name, data, int(kwargs.get("bins", 64)), "TensorboardLogger")
        values = torch.as_tensor(data).detach().cpu().double().flatten()
        self.experiment.add_histogram_raw(
            name, min=float(values.min()), max=float(values.max()), num=int(values.numel()),
            sum=float(values.sum()), sum_squares=float((values * values).sum()),
            bucket_limits=edges[1:].tolist(), bucket_counts=counts.tolist(),
            global_step=self._step(f"histogram:{name}", kwargs.get("step")),
        )

    def close(self) -> None:
        self.experiment.close()
