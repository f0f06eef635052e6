"""Errors raised by rl-trainers. Each message names the argument, what was expected and
what was received."""

from __future__ import annotations

__all__ = ["EvaluationError", "ExportError", "TrainerError"]


class TrainerError(ValueError):
    """A Trainer argument or hook registration that cannot work."""


class EvaluationError(ValueError):
    """``evaluate`` was given a policy and env that do not fit together."""


class ExportError(ValueError):
    """A policy that cannot be exported (e.g. its action is random under DETERMINISTIC)."""
