"""Exceptions of rl-migrate."""

from __future__ import annotations

__all__ = ["MigrateError"]


class MigrateError(ValueError):
    """An input rl-migrate cannot read: a syntax error, a binary file, a missing path or a
    folder with no Python file. The message names the file (and line, for a syntax error).

    Examples:
        >>> str(MigrateError("a.py:3:1: syntax error"))
        'a.py:3:1: syntax error'
    """
