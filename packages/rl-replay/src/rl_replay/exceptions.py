"""Exceptions raised by rl-replay.

Every error names the argument, what was expected and what was received. A call that
raises one of them leaves the buffer (data, priorities, write cursor) as it was.
"""

from __future__ import annotations

__all__ = [
    "CheckpointError",
    "DatasetError",
    "EmptyBufferError",
    "InvalidPriorityError",
    "ReplayBufferError",
    "StorageError",
    "StorageLayoutError",
]


class ReplayBufferError(Exception):
    """Base class of every rl-replay error."""


class StorageLayoutError(ReplayBufferError, ValueError):
    """Data written to a storage does not match the keys, shapes or dtypes it holds."""


class EmptyBufferError(ReplayBufferError, RuntimeError):
    """Sampling from a buffer that holds no data, or more than it holds without replacement."""


class InvalidPriorityError(ReplayBufferError, ValueError):
    """A priority is negative, NaN or infinite, or its index is outside the storage."""


class StorageError(ReplayBufferError, RuntimeError):
    """A storage's files could not be created (a full disk, a file size limit): the
    message names the file, the bytes wanted and the cause."""


class CheckpointError(ReplayBufferError, RuntimeError):
    """A checkpoint directory is missing, incomplete or of another layout."""


class DatasetError(ReplayBufferError, RuntimeError):
    """An offline dataset is missing, incomplete or corrupt, or cannot be written: the
    message names the file and what to do."""
