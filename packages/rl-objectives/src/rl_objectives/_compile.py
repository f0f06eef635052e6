"""``compile_with_warmup``: run eagerly for a few calls, then compiled."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from rl_profiling import record

__all__ = ["compile_with_warmup"]


class _WarmupCompiled:
    """Calls ``fn`` eagerly ``warmup`` times, then ``torch.compile(fn, **kwargs)``."""

    def __init__(self, fn: Callable, warmup: int, kwargs: dict[str, Any]) -> None:
        self.fn, self.warmup, self.kwargs = fn, warmup, kwargs
        self.calls = 0
        self.compiled: Callable | None = None

    def __call__(self, *args, **kwargs):
        self.calls += 1
        if self.calls <= self.warmup:
            return self.fn(*args, **kwargs)
        if self.compiled is None:
            with record("compile_with_warmup.compile"):  # torch.compile traces on this call
                self.compiled = torch.compile(self.fn, **self.kwargs)
                return self.compiled(*args, **kwargs)
        return self.compiled(*args, **kwargs)


def compile_with_warmup(
    model: Callable | None = None, warmup: int = 1, **compile_kwargs: Any
) -> Callable:
    """Wrap ``model`` so that its first ``warmup`` calls run eagerly, the rest compiled.

    Eager warm-up calls let lazy modules and caches settle before ``torch.compile``
    traces. Usable as ``compile_with_warmup(fn, warmup=2)`` or as a decorator
    ``@compile_with_warmup(warmup=2)``.

    Args:
        model: the module or function; ``None`` to get a decorator.
        warmup: eager calls before compiling (``>= 0``).
        **compile_kwargs: passed to ``torch.compile``.

    Returns:
        The wrapped callable (or a decorator when ``model`` is ``None``).

    Raises:
        ValueError: ``warmup`` is negative.

    Examples:
        >>> f = compile_with_warmup(lambda x: x + 1, warmup=5)
        >>> f(1), f.calls
        (2, 1)
    """
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an int >= 0, got {warmup!r}")
    if model is None:
        return lambda fn: _WarmupCompiled(fn, warmup, compile_kwargs)
    return _WarmupCompiled(model, warmup, compile_kwargs)
