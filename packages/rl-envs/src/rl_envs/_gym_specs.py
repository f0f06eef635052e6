"""gymnasium spaces -> specs (Box, Discrete, MultiDiscrete, MultiBinary, Dict).

gymnasium is an optional extra: nothing here imports it at module level; spaces are
recognised by class name so this module imports without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl_envs._composite import Composite
from rl_envs._specs import Bounded, TensorSpec, Unbounded
from rl_envs._specs_discrete import Binary, Categorical, MultiCategorical, OneHot

__all__ = ["space_to_spec", "torch_dtype"]


def torch_dtype(np_dtype: Any) -> torch.dtype:
    """The torch dtype of a numpy dtype (no silent widening or narrowing)."""
    return torch.from_numpy(np.zeros((), dtype=np_dtype)).dtype


def _kind(space: Any) -> str:
    for cls in type(space).__mro__:
        if cls.__module__.startswith("gymnasium.spaces"):
            return cls.__name__
    return type(space).__name__


def space_to_spec(
    space: Any,
    batch_size: torch.Size,
    *,
    categorical_action_encoding: bool = True,
    device: Any = None,
) -> TensorSpec | Composite:
    """Convert a *single-env* gymnasium space to a spec with ``batch_size`` in front.

    Args:
        space: a gymnasium space (``Box``, ``Discrete``, ``MultiDiscrete``, ``MultiBinary``
            or ``Dict`` of those).
        batch_size: the env's batch shape, prepended to every spec's shape.
        categorical_action_encoding: ``Discrete`` -> ``Categorical`` (integers) when
            True, ``OneHot`` when False.
        device: device of the specs.

    Raises:
        TypeError: for a space this wrapper does not support (the message names it).
    """
    b = tuple(batch_size)
    kind = _kind(space)
    if kind == "Box":
        dtype = torch_dtype(space.dtype)
        shape = (*b, *space.shape)
        low, high = np.asarray(space.low), np.asarray(space.high)
        if np.all(np.isneginf(low)) and np.all(np.isposinf(high)):
            return Unbounded(shape, device, dtype)
        return Bounded(
            torch.as_tensor(low).to(dtype), torch.as_tensor(high).to(dtype), shape, device, dtype
        )
    if kind == "Discrete":
        if int(space.start) != 0:
            raise TypeError(
                f"Discrete spaces with start != 0 are not supported (start={space.start})"
            )
        n = int(space.n)
        if categorical_action_encoding:
            return Categorical(n, b, device, torch.int64)
        return OneHot(n, (*b, n), device, torch.int64)
    if kind == "MultiDiscrete":
        if np.any(np.asarray(space.start) != 0):
            raise TypeError("MultiDiscrete spaces with start != 0 are not supported")
        nvec = torch.as_tensor(np.asarray(space.nvec), dtype=torch.int64)
        return MultiCategorical(nvec, (*b, *nvec.shape), device, torch_dtype(space.dtype))
    if kind == "MultiBinary":
        shape = (*b, *np.atleast_1d(space.n).tolist())
        return Binary(shape[-1], shape, device, torch_dtype(space.dtype))
    if kind == "Dict":
        return Composite(
            {
                k: space_to_spec(
                    s,
                    batch_size,
                    categorical_action_encoding=categorical_action_encoding,
                    device=device,
                )
                for k, s in space.spaces.items()
            },
            shape=batch_size,
            device=device,
        )
    raise TypeError(
        f"unsupported gymnasium space {kind} ({space!r}); "
        "supported: Box, Discrete, MultiDiscrete, MultiBinary, Dict"
    )
