"""Errors raised by rl-collectors. Each message names the argument or worker involved."""

from __future__ import annotations

from rl_envs.processes import error_summary

__all__ = ["CheckpointError", "CollectorClosedError", "CollectorError", "WorkerError"]


class CollectorError(RuntimeError):
    """A collector could not do what was asked (bad state, bad policy output, timeout)."""


class CollectorClosedError(CollectorError):
    """An operation was attempted on a collector after ``shutdown()``."""


class WorkerError(CollectorError):
    """A worker process raised, died or stopped answering.

    Attributes:
        worker_idx: index of the worker in the collector's list of env constructors.
        remote_traceback: the worker's formatted traceback (its exception's
            ``Type: message`` line is also on the error's first line), or ``None`` when it died
            without one (killed, segfault) or timed out.
        alive: ``True`` when a command (``map_fn``, ``set_seed``, ...) raised in a worker
            that is still running and serving: the collector stays usable.
    """

    def __init__(self, worker_idx: int, message: str, remote_traceback: str | None = None,
                 alive: bool = False):
        self.worker_idx = worker_idx
        self.remote_traceback = remote_traceback
        self.alive = alive
        text = f"worker {worker_idx}: {message}"
        summary = error_summary(remote_traceback)
        if summary and summary not in message:  # the worker's own exception, on the first line
            text += f": {summary}"
        if remote_traceback:
            text += f"\n--- traceback in worker {worker_idx} ---\n{remote_traceback}"
        super().__init__(text)

    def __reduce__(self):  # keep the fields when the error crosses a process boundary
        message = self.args[0].partition(": ")[2].split("\n--- traceback in worker")[0]
        return (type(self), (self.worker_idx, message, self.remote_traceback, self.alive))


class CheckpointError(CollectorError):
    """A run checkpoint is missing, incomplete, or of another layout, format or version."""
