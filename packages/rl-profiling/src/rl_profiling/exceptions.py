"""Exceptions of rl-profiling."""

from __future__ import annotations

__all__ = ["TraceError"]


class TraceError(ValueError):
    """A file is not a readable Chrome trace (Trace Event Format JSON).

    Examples:
        >>> issubclass(TraceError, ValueError)
        True
    """
