"""Errors raised by rl-modules. Each message names the key, what was expected and what was
received."""

from __future__ import annotations

from rl_envs.exceptions import SpecError

__all__ = ["ActionSpecError"]


class ActionSpecError(SpecError):
    """A module's output does not fit the spec it was given (shape, dtype or bounds)."""
