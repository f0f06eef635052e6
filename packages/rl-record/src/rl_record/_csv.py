"""``CSVLogger``: TorchRL's dependency-free logger, one CSV file per scalar."""

from __future__ import annotations

import json
import os
import time
import weakref
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch

from rl_record._common import (
    Logger,
    check_name,
    ensure_dir,
    flat_hparams,
    histogram,
    scalar_value,
    video_frames,
)
from rl_record._video import write_mp4
from rl_record.exceptions import LoggerInputError

__all__ = ["CSVLogger"]

VIDEO_FORMATS = ("pt", "mp4")


def _write_rows(pending: dict[str, list[str]], files: dict[str, IO[str]], root: Path,
                close: bool = False) -> None:
    """Append the buffered rows to their files (opened once, kept in ``files``); ``close``
    closes the files after (the logger is gone)."""
    for name, rows in pending.items():
        handle = files.get(name)
        if handle is None:
            path = root / f"{name}.csv"
            path.parent.mkdir(parents=True, exist_ok=True)
            handle = files[name] = open(path, "a", encoding="utf-8")  # noqa: SIM115
        handle.write("".join(rows))
        handle.flush()
    pending.clear()
    if close:
        for handle in files.values():
            handle.close()
        files.clear()


class CSVLogger(Logger):
    """Write scalars as TorchRL's CSVLogger does: ``<log_dir>/<exp_name>/scalars/<name>.csv``
    with one ``step,value`` row per call (a name with ``/`` makes sub-folders).

    Rows are buffered and flushed at most every ``flush_secs`` and on :meth:`close`, so
    logging every batch costs a list append. Videos go to ``videos/<name>_<step>.mp4``
    (``video_format="mp4"``, the ``[video]`` extra) or ``.pt``; hyper-parameters to
    ``hparams.json``; histograms to ``histograms/<name>.csv`` (``step,edges,counts``).

    Args:
        exp_name: the experiment's name (a sub-folder of ``log_dir``).
        log_dir: the parent folder; defaults to ``csv_logs`` in the working directory.
        video_format: ``"pt"`` (TorchRL's default, ``torch.save``) or ``"mp4"``.
        video_fps: frames per second of mp4 videos.
        flush_secs: the longest time a row waits in memory.

    Raises:
        LoggerInputError: an unknown ``video_format`` or a non-positive ``video_fps``.

    Examples:
        >>> import tempfile, pathlib
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with CSVLogger("ppo", log_dir=d) as logger:
        ...         logger.log_scalar("charts/episodic_return", 21.5, step=2048)
        ...     (pathlib.Path(d) / "ppo/scalars/charts/episodic_return.csv").read_text()
        '2048,21.5\\n'
    """

    def __init__(self, exp_name: str, log_dir: str | os.PathLike | None = None,
                 video_format: str = "pt", video_fps: int = 30, *,
                 flush_secs: float = 10.0) -> None:
        if video_format not in VIDEO_FORMATS:
            raise LoggerInputError(
                f"CSVLogger: video_format must be one of {VIDEO_FORMATS}, received "
                f"{video_format!r}"
            )
        if not isinstance(video_fps, int) or video_fps < 1:
            raise LoggerInputError(f"CSVLogger: video_fps must be an int >= 1, got {video_fps!r}")
        self.video_format, self.video_fps, self.flush_secs = video_format, video_fps, flush_secs
        self._pending: dict[str, list[str]] = {}
        self._files: dict[str, IO[str]] = {}
        self._last_flush = time.monotonic()
        super().__init__(exp_name, log_dir if log_dir is not None else "csv_logs")
        # a script that never calls close() (TorchRL's sota scripts) keeps its last rows:
        # written when the logger is collected or at exit
        weakref.finalize(self, _write_rows, self._pending, self._files, self.root, True)

    def _create_experiment(self) -> Path:
        return ensure_dir(Path(self.log_dir) / self.exp_name)

    @property
    def root(self) -> Path:
        """The experiment's folder."""
        return self.experiment

    def _write(self, name: str, row: str) -> None:
        self._pending.setdefault(name, []).append(row)
        if time.monotonic() - self._last_flush >= self.flush_secs:
            self.flush()

    def flush(self) -> None:
        """Write the buffered rows to their files."""
        _write_rows(self._pending, self._files, self.root)
        self._last_flush = time.monotonic()

    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        """Append ``step,value`` to ``scalars/<name>.csv``.

        Raises:
            LoggerInputError: ``value`` is not a number or one-element tensor.
        """
        check_name(name, "CSVLogger")
        value = scalar_value(name, value, "CSVLogger")
        self._write(f"scalars/{name}", f"{self._step(name, step)},{value!r}\n")

    def log_video(self, name: str, video: torch.Tensor, step: int | None = None,
                  **kwargs: Any) -> Path:
        """Save a ``uint8 [T, C, H, W]`` / ``[N, T, C, H, W]`` video; ``fps=`` overrides.

        Returns:
            The file written.

        Raises:
            VideoFormatError: wrong layout or dtype (nothing is written).
        """
        check_name(name, "CSVLogger")
        frames = video_frames(name, video, "CSVLogger")
        step = self._step(f"video:{name}", step)
        path = self.root / "videos" / f"{name}_{step}.{self.video_format}"
        if self.video_format == "mp4":
            return write_mp4(path, frames, int(kwargs.get("fps", self.video_fps)))
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save(torch.as_tensor(video).cpu(), path)
        return path

    def log_hparams(self, cfg: Any) -> None:
        """Write ``hparams.json`` (a flat ``{"a.b": value}`` mapping)."""
        params = flat_hparams(cfg, "CSVLogger")
        tmp = self.root / ".hparams.json.tmp"
        tmp.write_text(json.dumps(params, indent=1, sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.root / "hparams.json")

    def log_histogram(self, name: str, data: Any, **kwargs: Any) -> None:
        """Append ``step,"edges","counts"`` to ``histograms/<name>.csv`` (``bins=`` 64)."""
        check_name(name, "CSVLogger")
        counts, edges = histogram(name, data, int(kwargs.get("bins", 64)), "CSVLogger")
        step = self._step(f"histogram:{name}", kwargs.get("step"))
        fmt = lambda a: " ".join(np.format_float_positional(x) for x in a)  # noqa: E731
        self._write(f"histograms/{name}", f'{step},"{fmt(edges)}","{fmt(counts)}"\n')

    def close(self) -> None:
        self.flush()
        for handle in self._files.values():
            handle.close()
        self._files.clear()
