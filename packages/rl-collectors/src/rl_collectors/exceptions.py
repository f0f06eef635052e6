"""Errors raised by rl-collectors. Each message names the argument or worker involved."""

from __future__ import annotations

__all__ = ["CollectorClosedError", "CollectorError", "WorkerError"]


class CollectorError(RuntimeError):
    """A collector could not do what was asked (bad state, bad policy output, timeout)."""


class CollectorClosedError(CollectorError):
    """An operation was attempted on a collector after ``shutdown()``."""


class WorkerError(CollectorError):
    """A worker process raised, died or stopped answering.

    Attributes:
        worker_idx: index of the worker in the collector's list of env constructors.
        remote_traceback: the worker's formatted traceback, or ``None`` when it died
            without one (killed, segfault) or timed out.
    """

    def __init__(self, worker_idx: int, message: str, remote_traceback: str | None = None):
        self.worker_idx = worker_idx
        self.remote_traceback = remote_traceback
        text = f"worker {worker_idx}: {message}"
        if remote_traceback:
            text += f"\n--- traceback in worker {worker_idx} ---\n{remote_traceback}"
        super().__init__(text)

    def __reduce__(self):  # keep the fields when the error crosses a process boundary
        return (type(self), (self.worker_idx, self.args[0], self.remote_traceback))
