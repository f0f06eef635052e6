"""Exceptions raised by rl-recurrent."""

from __future__ import annotations

__all__ = [
    "BackendUnavailableError",
    "MissingIsInitError",
    "MissingRecurrentStateError",
    "RecurrentError",
]


class RecurrentError(RuntimeError):
    """Base class of every error rl-recurrent raises at run time."""


class MissingIsInitError(RecurrentError):
    """The input has no ``"is_init"`` entry, so trajectory starts are unknown.

    Add ``InitTracker()`` to the environment (it writes ``"is_init"`` on reset) or set
    the entry yourself before calling the module.
    """


class MissingRecurrentStateError(RecurrentError):
    """A hidden-state entry is missing at a step that does not start a trajectory.

    This is what a missing primer looks like: the collector did not carry the state from
    ``("next", key)`` to ``key``. Append ``module.make_tensordict_primer()`` to the
    environment.
    """


class BackendUnavailableError(RecurrentError):
    """The requested recurrent backend cannot run here (e.g. triton is not installed)."""
