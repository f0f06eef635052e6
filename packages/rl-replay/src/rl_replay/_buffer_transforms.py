"""A replay buffer's sample transforms (TorchRL's ``append_transform`` /
``insert_transform``) and its ``pin_memory`` option."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["TransformChain", "check_pin_memory", "chain_with"]


class TransformChain:
    """Callables applied in order to each sample (after ``collate_fn``).

    Args:
        transforms: the callables, first applied first.

    Examples:
        >>> chain = TransformChain([lambda x: x + 1, lambda x: x * 10])
        >>> chain(1), len(chain)
        (20, 2)
    """

    def __init__(self, transforms: list[Callable[[Any], Any]]) -> None:
        self.transforms = list(transforms)

    def __call__(self, data: Any) -> Any:
        for transform in self.transforms:
            data = transform(data)
        return data

    def __len__(self) -> int:
        return len(self.transforms)

    def __repr__(self) -> str:
        return f"TransformChain({self.transforms!r})"


def chain_with(current: Callable[[Any], Any] | None, transform: Any, index: int | None,
               invert: bool, method: str) -> TransformChain:
    """``current`` (a buffer's transform, or none) with ``transform`` inserted at
    ``index`` (``None``: appended). ``invert=True`` (TorchRL: the transform runs when
    writing) is refused: here transforms run on samples only."""
    if invert:
        raise ValueError(
            f"{method}: invert=True (a transform applied when data is written) has no "
            "counterpart here; transform the data before extend(), or pass invert=False")
    if not callable(transform):
        raise TypeError(f"{method}: transform: expected a callable, got {type(transform).__name__}")
    if isinstance(current, TransformChain):
        chain = TransformChain(current.transforms)
    else:
        chain = TransformChain([] if current is None else [current])
    chain.transforms.insert(len(chain) if index is None else index, transform)
    return chain


def check_pin_memory(pin_memory: Any) -> bool:
    """``pin_memory``: a bool; ``True`` needs a CUDA device (pinned host memory is what a
    copy to it reads without a staging copy)."""
    if not isinstance(pin_memory, bool):
        raise ValueError(f"pin_memory: expected a bool, got {pin_memory!r}")
    if pin_memory and not torch.cuda.is_available():
        raise ValueError(
            "pin_memory: True pins each sample for a copy to a CUDA device, and none is "
            "available here; pass pin_memory=False (the default)")
    return pin_memory
