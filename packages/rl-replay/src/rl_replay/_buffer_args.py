"""``ReplayBuffer``'s constructor arguments, checked in one function beside it."""

from __future__ import annotations

from typing import Any

from rl_replay._samplers import Sampler
from rl_replay._storage import Storage
from rl_replay._writers import Writer

__all__ = ["check_arguments"]


def check_arguments(
    storage: Storage | None,
    sampler: Sampler | None,
    writer: Writer | None,
    batch_size: int | None,
    prefetch: int | None,
    compilable: bool,
    generator: Any,
) -> bool:
    """Validate ``ReplayBuffer``'s arguments; return ``compilable``.

    Raises:
        ValueError: an argument has the wrong type or value, or a component cannot be
            compilable (the message names the argument).
    """
    for name, value, kind in (
        ("storage", storage, Storage),
        ("sampler", sampler, Sampler),
        ("writer", writer, Writer),
    ):
        if value is not None and not isinstance(value, kind):
            raise ValueError(f"{name}: expected a {kind.__name__}, got {type(value).__name__}")
    for name, value in (("batch_size", batch_size), ("prefetch", prefetch)):
        if value is not None and (not isinstance(value, int) or value <= 0):
            raise ValueError(f"{name}: expected a positive int or None, got {value!r}")
    if prefetch and batch_size is None:
        raise ValueError("prefetch: needs batch_size (samples are drawn ahead of time)")
    return _check_compilable(compilable, storage, prefetch, generator)


def _check_compilable(
    compilable: bool, storage: Storage | None, prefetch: int | None, generator: Any
) -> bool:
    """Validate ``compilable`` against the other arguments; return it."""
    if not isinstance(compilable, bool):
        raise ValueError(f"compilable: expected a bool, got {compilable!r}")
    if not compilable:
        if storage is not None and storage.compilable:
            raise ValueError(
                "compilable: expected True with a compilable storage (its row count is a "
                "tensor), got False; pass compilable=True to the buffer too"
            )
        return False
    if prefetch:
        raise ValueError(
            f"prefetch: a compilable buffer samples in the caller's thread, got {prefetch!r}"
        )
    if generator is not None:
        raise ValueError(
            "generator: a compilable buffer draws from torch's global RNG (seed it with "
            "torch.manual_seed), since torch.compile cannot trace a torch.Generator; got one"
        )
    return True
