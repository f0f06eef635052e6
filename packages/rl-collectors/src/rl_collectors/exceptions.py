"""Errors raised by rl-collectors. Each message names the argument or worker involved.

``WorkerError`` is rl-envs' (one class for every process-based component), re-exported.
"""

from __future__ import annotations

from rl_envs.exceptions import WorkerError

__all__ = ["CheckpointError", "CollectorClosedError", "CollectorError", "WorkerError"]


class CollectorError(RuntimeError):
    """A collector could not do what was asked (bad state, bad policy output, timeout)."""


class CollectorClosedError(CollectorError):
    """An operation was attempted on a collector after ``shutdown()``."""


class CheckpointError(CollectorError):
    """A run checkpoint is missing, incomplete, or of another layout, format or version."""
