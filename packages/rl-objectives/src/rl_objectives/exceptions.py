"""Exceptions raised by rl-objectives."""

from __future__ import annotations

__all__ = ["MissingKeyError", "ObjectivesError", "ShapeMismatchError", "TimeDimError"]


class ObjectivesError(Exception):
    """Base class of every error raised by rl-objectives."""


class ShapeMismatchError(ObjectivesError, ValueError):
    """Inputs of an estimator or a loss do not have compatible shapes."""


class TimeDimError(ObjectivesError, IndexError):
    """``time_dim`` does not name a dimension of the inputs."""


class MissingKeyError(ObjectivesError, KeyError):
    """A loss or an estimator input TensorDict lacks a key it needs."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""
