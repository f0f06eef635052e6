"""``Checkpointer``: periodic checkpoints of a training loop, and one more on a stop signal.

It decides *when* to save (every ``every_frames`` frames, on SIGTERM / SIGUSR2, at the
end) and how a run resumes (the newest intact checkpoint, the corrupt ones set aside);
*what* a checkpoint holds and how it is written atomically is ``_checkpoint.py``'s
(:func:`~rl_collectors.save_checkpoint` / :func:`~rl_collectors.load_checkpoint`).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import warnings
from pathlib import Path
from typing import Any

from rl_collectors._checkpoint import (
    LATEST,
    load_checkpoint,
    save_checkpoint,
    skipped_text,
    valid_checkpoint,
)
from rl_collectors.exceptions import CheckpointError

__all__ = ["Checkpointer"]

_log = logging.getLogger("rl_collectors._checkpoint")


class Checkpointer:
    """Periodic checkpoints of a training loop, and one more when the job is told to stop.

    Give it the run's components once; call :meth:`restore` before the loop and
    :meth:`step` at the end of each iteration (a consistent point: the batch collected,
    the update done). ``step`` saves every ``every_frames`` frames, and at once when one
    of ``signals`` arrived (Slurm sends SIGTERM some time before SIGKILL), after which
    it returns ``True``: the loop breaks and the process exits cleanly. The signal
    handler only sets a flag, so a checkpoint is never written from a half-done step.
    When the signal had a handler before (submitit's preemption handler for SIGUSR2,
    which calls the job's ``checkpoint`` method and requeues it), that handler is
    called after the save, so the job requeues itself and resumes from this checkpoint.

    Args:
        directory: the run's checkpoint directory (``None`` or ``""``: no checkpoints,
            signals are still turned into a clean stop).
        every_frames: save when this many frames passed since the last save (0: only
            on a signal and when :meth:`step` is told ``final=True``).
        keep: checkpoints kept (2: the newest and one to fall back to when the newest
            fails verification on :meth:`restore`).
        signals: signals that request a checkpoint and a stop (SIGTERM: Slurm's and
            most schedulers'; SIGUSR2: submitit's preemption and time-limit signal).
            Handlers can only be installed from the main thread; elsewhere none is.
        **components: as for :func:`save_checkpoint`.

    Examples:
        >>> import tempfile, torch
        >>> from rl_collectors import Checkpointer
        >>> net = torch.nn.Linear(2, 2)
        >>> ckpt = Checkpointer(tempfile.mkdtemp(), every_frames=100, policy=net)
        >>> ckpt.restore() is None  # nothing saved yet: a fresh run
        True
        >>> [ckpt.step(frames, {"frames": frames}) for frames in (50, 100, 150)]
        [False, False, False]
        >>> ckpt.saved_frames, ckpt.restore()["frames"]
        (100, 100)
        >>> ckpt.close()
    """

    def __init__(
        self,
        directory: Any,
        *,
        every_frames: int = 0,
        keep: int = 2,
        signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR2),
        **components: Any,
    ) -> None:
        if not isinstance(every_frames, int) or every_frames < 0:
            raise ValueError(f"every_frames: expected an int >= 0, got {every_frames!r}")
        if not isinstance(keep, int) or keep < 1:
            raise ValueError(f"keep: expected an int >= 1, got {keep!r}")
        self.keep = keep
        self.directory = Path(directory) if directory else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self.every_frames, self.components = every_frames, components
        self.saved_frames = 0
        self.stop_requested: int | None = None  # the signal received, if any
        self._previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():  # Python's rule for handlers
            for sig in signals:
                self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.stop_requested = signum

    def restore(self, *, allow_fresh: bool = False) -> dict[str, Any] | None:
        """Load the newest intact checkpoint; returns its ``extra`` (``None``: a fresh run).

        Newer checkpoints that fail verification are skipped with a ``RuntimeWarning``
        naming each and why, and renamed ``<name>.corrupt`` (kept for inspection, never
        loaded or counted again).

        Args:
            allow_fresh: when the directory has a ``LATEST`` or checkpoints but none is
                intact, start from scratch (with a warning) instead of raising.

        Raises:
            CheckpointError: checkpoints exist but none is intact and not
                ``allow_fresh`` (hours of training are not silently restarted), or the
                chosen one does not fit the components.
        """
        if self.directory is None:
            return None
        where, skipped = valid_checkpoint(self.directory)
        if where is None:
            if not skipped:
                return None  # nothing was ever saved here: a fresh run
            why = skipped_text(skipped)
            if not allow_fresh:
                raise CheckpointError(
                    f"directory: expected an intact checkpoint in {str(self.directory)!r} "
                    f"(it has {LATEST} or checkpoints), got none: {why}. Pass "
                    "allow_fresh=True (the examples' --allow-fresh-start) to start from frame 0"
                )
            warnings.warn(f"{self.directory}: starting from scratch; {why}", RuntimeWarning,
                          stacklevel=2)
            return None
        extra = load_checkpoint(self.directory, **self.components)  # warns of `skipped`
        for bad, _ in skipped:
            if bad.is_dir():
                bad.rename(bad.with_name(f"{bad.name}.corrupt"))
        self.saved_frames = int(extra.get("frames", 0))
        return extra

    def save(self, frames: int, extra: dict[str, Any] | None = None) -> Path | None:
        """Write a checkpoint now (``extra`` gets ``"frames"``)."""
        if self.directory is None:
            return None
        start = time.perf_counter()
        where = save_checkpoint(self.directory, extra={**(extra or {}), "frames": frames},
                                keep=self.keep, **self.components)
        self.saved_frames = frames
        _log.info(
            "checkpoint %s at %d frames in %.3f s", where, frames, time.perf_counter() - start
        )
        return where

    def step(
        self, frames: int, extra: dict[str, Any] | None = None, *, final: bool = False
    ) -> bool:
        """Save if due (``every_frames`` passed, a signal arrived, or ``final``).

        Returns:
            ``True`` when a stop was requested by a signal: the caller leaves its loop.
        """
        due = self.every_frames and frames - self.saved_frames >= self.every_frames
        if due or final or self.stop_requested is not None:
            self.save(frames, extra)
        if self.stop_requested is None:
            return False
        previous = self._previous.get(self.stop_requested)
        if callable(previous):  # e.g. submitit's: checkpoint() the job, requeue, exit
            self.close()
            previous(self.stop_requested, None)
        return True

    def close(self) -> None:
        """Put the previous signal handlers back."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}
