"""``WandbLogger``: TorchRL's Weights & Biases wrapper; ``offline=True`` needs no network
and no login (the run is kept in ``<save_dir>/wandb/offline-run-*``)."""

from __future__ import annotations

import json
import os
import struct
import tempfile
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
from rl_record.exceptions import LoggerInputError

__all__ = ["WandbLogger", "read_wandb_history"]

STEP_KEY = "trainer/step"
"""Every row carries its step under this key (TorchRL's): rows logged out of step order are
kept, where W&B's own ``step=`` drops any step lower than the last."""


class WandbLogger(Logger):
    """Log to a W&B run (the ``[wandb]`` extra).

    Args:
        exp_name: the run's name.
        offline: keep the run on disk only (``mode="offline"``): no network, no login;
            ``wandb sync`` uploads it later.
        save_dir: where ``wandb/`` goes (``log_dir`` is accepted too, not both).
        id: the run's id (to resume).
        project: the W&B project.
        video_fps: frames per second of videos.
        **kwargs: passed to ``wandb.init``.

    Raises:
        MissingBackendError: wandb is not installed.
        LoggerInputError: both ``save_dir`` and ``log_dir`` given.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as d:
        ...     with WandbLogger("ppo", offline=True, save_dir=d, project="doc") as logger:
        ...         logger.log_scalar("charts/SPS", 900.0, step=64)
        ...     len(list(Path(d).glob("wandb/offline-run-*/run-*.wandb")))
        1
    """

    def __init__(self, exp_name: str, offline: bool = False,
                 save_dir: str | os.PathLike | None = None, id: str | None = None,
                 project: str | None = None, *, video_fps: int = 30, **kwargs: Any) -> None:
        if save_dir is not None and kwargs.get("log_dir") is not None:
            raise LoggerInputError(
                f"WandbLogger: give save_dir or log_dir, not both (received {save_dir!r} and "
                f"{kwargs['log_dir']!r})"
            )
        self._wandb = require("wandb", "wandb", "WandbLogger")
        save_dir = save_dir if save_dir is not None else kwargs.pop("log_dir", None)
        kwargs.pop("log_dir", None)
        self.offline, self.video_fps = offline, video_fps
        self._init = {"name": exp_name, "dir": str(save_dir or "."), "id": id,
                      "project": project, **kwargs}
        if offline:
            self._init["mode"] = "offline"
        self._closed = False
        super().__init__(exp_name, str(save_dir or "."))

    def _create_experiment(self) -> Any:
        Path(self._init["dir"]).mkdir(parents=True, exist_ok=True)
        settings = self._init.pop("settings", None) or self._wandb.Settings(
            console="off", silent=True, x_disable_stats=True, x_disable_meta=True
        )
        run = self._wandb.init(settings=settings, **self._init)
        run.define_metric(STEP_KEY)
        run.define_metric("*", step_metric=STEP_KEY)
        return run

    def log_scalar(self, name: str, value: Any, step: int | None = None) -> None:
        """One history row ``{name: value, "trainer/step": step}``.

        Raises:
            LoggerInputError: ``value`` is not a number or one-element tensor.
        """
        check_name(name, "WandbLogger")
        value = scalar_value(name, value, "WandbLogger")
        self.experiment.log({name: value, STEP_KEY: self._step(name, step)})

    def log_video(self, name: str, video: torch.Tensor, step: int | None = None,
                  **kwargs: Any) -> None:
        """An mp4 (encoded with PyAV) logged as ``wandb.Video``; ``fps=`` overrides.

        Raises:
            VideoFormatError: wrong layout or dtype (nothing is written).
        """
        check_name(name, "WandbLogger")
        frames = video_frames(name, video, "WandbLogger")
        step = self._step(f"video:{name}", step)
        with tempfile.TemporaryDirectory() as tmp:
            path = write_mp4(Path(tmp) / "video.mp4", frames,
                             int(kwargs.get("fps", self.video_fps)))
            clip = self._wandb.Video(str(path), format="mp4")
            self.experiment.log({name: clip, STEP_KEY: step})

    def log_hparams(self, cfg: Any) -> None:
        """``run.config.update`` with the flat hyper-parameters."""
        self.experiment.config.update(flat_hparams(cfg, "WandbLogger"), allow_val_change=True)

    def log_histogram(self, name: str, data: Any, **kwargs: Any) -> None:
        """A ``wandb.Histogram`` (``step=`` and ``bins=`` 64 as keywords)."""
        check_name(name, "WandbLogger")
        counts, edges = histogram(name, data, int(kwargs.get("bins", 64)), "WandbLogger")
        hist = self._wandb.Histogram(np_histogram=(counts, edges))
        self.experiment.log({name: hist, STEP_KEY: self._step(f"histogram:{name}",
                                                              kwargs.get("step"))})

    def close(self) -> None:
        """Finish the run; with no other run open, stop W&B's service process too, which
        is when the run's files are complete on disk (``finish`` alone returns before)."""
        if not self._closed:
            self._closed = True
            self.experiment.finish()
            if self._wandb.run is None:
                self._wandb.teardown()


def _records(data: bytes) -> Any:
    """Payloads of a ``.wandb`` run file: W&B's leveldb-style log (a 7-byte header, then
    32 KiB blocks of chunks ``crc32c:u32 length:u16 type:u8``; type 1 full, 2-4 first /
    middle / last)."""
    pos, payload = 7, b""
    while pos + 7 <= len(data):
        if 32768 - pos % 32768 < 7:  # the block's trailer is padding
            pos += 32768 - pos % 32768
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if kind == 0 and length == 0:
            return
        payload += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            yield payload
            payload = b""


def read_wandb_history(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """The history rows of a W&B run directory (``wandb/offline-run-*``), read from its
    ``run-*.wandb`` file with W&B's own protobuf messages: no network, no login.

    Returns:
        One dict per ``log`` call (nested keys as nested dicts).

    Raises:
        LoggerInputError: ``run_dir`` holds no ``.wandb`` file, or it is not one.
    """
    wandb_pb2 = require("wandb.proto.wandb_internal_pb2", "wandb", "read_wandb_history")
    files = sorted(Path(run_dir).glob("run-*.wandb"))
    data = files[0].read_bytes() if files else b""
    if data[:4] != b":W&B":
        raise LoggerInputError(
            f"read_wandb_history: expected a W&B run directory with a run-*.wandb file, "
            f"received {str(run_dir)!r}"
        )
    rows = []
    for payload in _records(data):
        record = wandb_pb2.Record()
        record.ParseFromString(payload)
        if record.WhichOneof("record_type") != "history":
            continue
        row: dict[str, Any] = {}
        for item in record.history.item:
            *parents, last = [item.key] if item.key else list(item.nested_key)
            target = row
            for key in parents:
                target = target.setdefault(key, {})
            target[last] = json.loads(item.value_json)
        rows.append(row)
    return rows
