"""Global switches: recurrent mode (a ContextVar) and the Triton matmul precision."""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = [
    "BACKENDS",
    "PRECISIONS",
    "RECOMPUTE",
    "recurrent_matmul_precision",
    "recurrent_mode",
    "set_recurrent_matmul_precision",
    "set_recurrent_mode",
]

BACKENDS = ("auto", "pad", "scan", "triton")
"""Accepted values of ``recurrent_backend``."""

PRECISIONS = ("ieee", "tf32", "tf32x3")
"""Accepted values of the Triton matmul precision."""

RECOMPUTE = ("none", "full")
"""Accepted values of ``recurrent_recompute``."""

F = TypeVar("F", bound=Callable[..., Any])

_MODE: contextvars.ContextVar[bool] = contextvars.ContextVar("rl_recurrent_mode", default=False)
_PRECISION = {"value": "ieee"}


def recurrent_mode() -> bool:
    """Return whether recurrent modules run over whole ``[*B, T]`` sequences right now.

    Returns:
        ``True`` inside ``set_recurrent_mode(True)``, ``False`` otherwise (the default:
        sequential mode, one step at a time, as a collector calls the policy).
    """
    return _MODE.get()


class set_recurrent_mode:  # noqa: N801 - TorchRL's public name
    """Context manager and decorator that switches recurrent mode on or off.

    Backed by a :class:`contextvars.ContextVar`, so each thread (and each asyncio task)
    has its own mode; nesting restores the outer value on exit.

    Args:
        mode: ``True`` for recurrent mode (sequences ``[*B, T]``, training), ``False``
            for sequential mode (one step, collection).

    Raises:
        TypeError: if ``mode`` is not a bool.

    Examples:
        >>> from rl_recurrent import recurrent_mode, set_recurrent_mode
        >>> with set_recurrent_mode(True):
        ...     recurrent_mode()
        True
        >>> recurrent_mode()
        False
    """

    def __init__(self, mode: bool = True) -> None:
        if not isinstance(mode, bool):
            raise TypeError(
                f"set_recurrent_mode(mode=...) expects a bool, got {type(mode).__name__} {mode!r}"
            )
        self.mode = mode
        self._tokens: list[contextvars.Token[bool]] = []

    def __enter__(self) -> set_recurrent_mode:
        self._tokens.append(_MODE.set(self.mode))
        return self

    def __exit__(self, *exc: object) -> None:
        _MODE.reset(self._tokens.pop())

    def __call__(self, func: F) -> F:
        mode = self.mode

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with set_recurrent_mode(mode):
                return func(*args, **kwargs)

        return wrapper  # type: ignore[return-value]


def check_precision(precision: str, name: str = "precision") -> str:
    """Validate a Triton matmul precision and return it."""
    if precision not in PRECISIONS:
        raise ValueError(f"{name} must be one of {PRECISIONS}, got {precision!r}")
    return precision


def set_recurrent_matmul_precision(precision: str) -> None:
    """Set the default matmul precision of the Triton backend, process-wide.

    A module built with ``recurrent_matmul_precision=...`` overrides it. The torch
    backends follow torch's own settings (``torch.backends.cuda.matmul``).

    Args:
        precision: ``"ieee"`` (full float32, the default), ``"tf32"`` (TensorFloat-32 on
            Ampere and newer: faster, ~1e-3 relative error) or ``"tf32x3"`` (three tf32
            products, close to float32 accuracy).

    Raises:
        ValueError: if ``precision`` is not one of these.
    """
    _PRECISION["value"] = check_precision(precision)


def recurrent_matmul_precision() -> str:
    """Return the process-wide default matmul precision of the Triton backend."""
    return _PRECISION["value"]
