"""Errors raised by rl-record. Each message names the argument, what was expected and what
was received."""

from __future__ import annotations

__all__ = ["LoggerInputError", "MissingBackendError", "VideoFormatError"]


class MissingBackendError(ImportError):
    """A logger's backend is not installed; the message names the extra to install."""


class LoggerInputError(ValueError):
    """A value handed to a logger does not have the expected type or shape."""


class VideoFormatError(LoggerInputError):
    """A video whose layout, dtype or channel count is not the one loggers take."""
