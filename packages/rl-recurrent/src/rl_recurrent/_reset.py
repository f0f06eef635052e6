"""Where a hidden state is zeroed: the one rule, for every recurrent module and backend.

A trajectory starts from a zero state. ``zero_where`` applies that to a stored state
(the module's input state, an RSSM step's carry, a padded segment's first state);
``keep_mask`` is the same rule as the multiplier the fused per-step cells and kernels
take (``h_{t-1} * keep_t``: they cannot call back into Python inside their time loop).
Nothing else in the package decides where a state becomes zero
(``tests/test_code_shape.py`` checks it). The environment's ``TensorDictPrimer`` is not a
second rule: it restores its entry's default value on reset (TorchRL's primer contract,
any value), and the modules zero the state at ``is_init`` whatever that entry holds.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["keep_mask", "zero_where"]


def zero_where(state: Tensor, starts: Tensor) -> Tensor:
    """``state`` with zeros where ``starts`` (a trajectory starts there), else unchanged.

    Args:
        state: the hidden state, ``[*S, *E]``.
        starts: bool ``[*S]`` (or any shape that broadcasts against ``state`` once
            trailing singleton dims are appended).

    Returns:
        A new tensor shaped like ``state``; a NaN or stale value at a start is zeroed too.
    """
    mask = starts.reshape(*starts.shape, *([1] * (state.ndim - starts.ndim)))
    return torch.where(mask, 0, state)


def keep_mask(is_init: Tensor, dtype: torch.dtype) -> Tensor:
    """``1`` where the state entering a step is kept, ``0`` where ``is_init`` zeroes it.

    Args:
        is_init: bool, true at the first step of a trajectory.
        dtype: the compute dtype of the cells that multiply by it.

    Returns:
        ``is_init``'s shape in ``dtype``.
    """
    return (~is_init).to(dtype)
