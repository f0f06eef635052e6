"""gymnasium spaces -> specs (Box, Discrete, MultiDiscrete, MultiBinary, Dict).

gymnasium is an optional extra: nothing here imports it at module level; spaces are
recognised by class name so this module imports without it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rl_envs._composite import Composite
from rl_envs._specs import Bounded, TensorSpec, Unbounded
from rl_envs._specs_discrete import Binary, Categorical, MultiCategorical, OneHot

__all__ = ["obs_encoder", "space_to_spec", "torch_dtype"]


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
            True, ``OneHot`` when False; TorchRL applies the flag to observation spaces
            too (see :func:`obs_encoder` for the values).
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


def _onehot(n: int) -> Callable[[Any], np.ndarray]:
    arange = np.arange(n)

    def encode(value: Any) -> np.ndarray:
        return (np.asarray(value)[..., None] == arange).astype(np.int64)

    return encode


def _leaf_encoders(space: Any, path: tuple) -> list[tuple[tuple, Callable]]:
    kind = _kind(space)
    if kind == "Discrete":
        return [(path, _onehot(int(space.n)))]
    if kind == "Dict":
        return [
            enc for k, s in space.spaces.items() for enc in _leaf_encoders(s, (*path, k))
        ]
    return []


def obs_encoder(
    space: Any, *, categorical_action_encoding: bool
) -> Callable[[Any], Any] | None:
    """What turns the simulator's observation into the values of ``space_to_spec``'s spec.

    TorchRL reads a ``Discrete`` observation space with the same flag as actions: a
    ``OneHot`` spec by default (``categorical_action_encoding=False``), whose values are
    the one-hot encoding (int64, ``n`` along a new last dim) of the integers gymnasium
    returns; ``True`` keeps the integers. Any leading dims (``[num_envs]``, none for a
    single finished sub-env's observation) are kept.

    Args:
        space: a single env's gymnasium observation space.
        categorical_action_encoding: the env's flag.

    Returns:
        A function mapping an observation (array, or nested dict for a ``Dict`` space) to
        the encoded one (a new dict; the input is not changed), or ``None`` when nothing
        needs encoding.

    Examples:
        >>> import gymnasium as gym
        >>> enc = obs_encoder(gym.spaces.Discrete(3), categorical_action_encoding=False)
        >>> enc(np.array([2, 0])).tolist()
        [[0, 0, 1], [1, 0, 0]]
        >>> obs_encoder(gym.spaces.Discrete(3), categorical_action_encoding=True) is None
        True
    """
    if categorical_action_encoding:
        return None
    leaves = _leaf_encoders(space, ())
    if not leaves:
        return None
    if leaves[0][0] == ():
        return leaves[0][1]

    def encode(obs: Any) -> Any:
        out = _copy_dicts(obs)
        for path, enc in leaves:
            node = out
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = enc(node[path[-1]])
        return out

    return encode


def _copy_dicts(obs: Any) -> Any:
    if isinstance(obs, dict):
        return {k: _copy_dicts(v) for k, v in obs.items()}
    return obs
