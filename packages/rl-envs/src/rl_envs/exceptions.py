"""Errors raised by rl-envs. Each message names the key, what was expected and what was received."""

from __future__ import annotations

__all__ = ["EnvClosedError", "InvalidActionError", "SpecError"]


class SpecError(ValueError):
    """A value does not match its spec (key, expected and received shape/dtype/bounds)."""


class InvalidActionError(SpecError):
    """An action handed to ``step`` is outside the action spec, or has the wrong shape/dtype."""


class EnvClosedError(RuntimeError):
    """An operation was attempted on an environment after ``close()``."""
