"""Shape and dtype transforms: UnsqueezeTransform, PermuteTransform, FlattenObservation and
DTypeCastTransform (TorchRL names and arguments), on observation and reward keys.

The first three are views of their input: the out leaf is bound once as a view of the
input leaf and the transform does no work per step. Dims are counted from the end (``-1``
is the last event dim), so one transform fits an env of any batch shape; a non-negative
dim (``allow_positive_dim=True``) counts from the first *event* dim.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rl_envs._keys import PIXELS
from rl_envs._specs import Bounded, TensorSpec
from rl_envs._transforms_map import MapTransform, event_shape, key_list

__all__ = ["DTypeCastTransform", "FlattenObservation", "PermuteTransform", "UnsqueezeTransform"]


def _mapped_spec(spec: TensorSpec, batch_ndim: int, fn: Callable[[torch.Tensor], Any]) -> Any:
    """``spec`` with ``fn`` applied to its (batch + event) shape and, if Bounded, bounds."""
    probe = fn(torch.empty(spec.shape, device="meta"))
    if isinstance(spec, Bounded):
        low, high = (fn(b.expand(spec.shape)) for b in (spec.low, spec.high))
        return Bounded(low, high, probe.shape, spec.device, spec.dtype)
    return spec._rebuild(probe.shape)


def _check_dim(name: str, dim: int, allow_positive_dim: bool) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{name}: dim must be an int, received {dim!r}")
    if dim >= 0 and not allow_positive_dim:
        raise ValueError(
            f"{name}: dim must be negative (counted from the last event dim), received {dim}; "
            "pass allow_positive_dim=True to count from the first event dim"
        )
    return dim


class _ViewTransform(MapTransform):
    """A map that is a view of its input, given event dims counted from the end."""

    def __init__(self, in_keys: Any, out_keys: Any) -> None:
        keys = key_list(in_keys, [])
        if not keys:
            raise ValueError(f"{type(self).__name__}: in_keys must name at least one key")
        super().__init__(keys, key_list(out_keys, keys))
        self._event_ndim: dict[Any, int] = {}

    def _view(self, x: torch.Tensor, event_ndim: int) -> torch.Tensor:
        raise NotImplementedError

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        self._event_ndim[key] = n = len(event_shape(spec, batch_ndim))
        return _mapped_spec(spec, batch_ndim, lambda x: self._view(x, n))

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        return self._view(x, self._event_ndim[key])

    def _alias(self, src: torch.Tensor, key: Any) -> torch.Tensor | None:
        return self._view(src, self._event_ndim[key])


class UnsqueezeTransform(_ViewTransform):
    """Insert a dim of size 1 into observation (or reward) keys (TorchRL's
    ``UnsqueezeTransform``).

    Args:
        dim: where the new dim goes; negative counts from the end (``-1``: last).
        allow_positive_dim: accept ``dim >= 0``, counted from the first event dim.
        in_keys: keys read.
        out_keys: keys written (default: ``in_keys``).

    Raises:
        ValueError: ``dim >= 0`` without ``allow_positive_dim``, or no in_keys.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2),
        ...                      UnsqueezeTransform(-2, in_keys=["observation"]))
        >>> env.reset()["observation"].shape
        torch.Size([2, 1, 4])
        >>> env.close()
    """

    def __init__(
        self,
        dim: int = -1,
        allow_positive_dim: bool = False,
        *,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
    ) -> None:
        self.dim = _check_dim("UnsqueezeTransform", dim, allow_positive_dim)
        super().__init__(in_keys, out_keys)

    def _view(self, x: torch.Tensor, event_ndim: int) -> torch.Tensor:
        lead = x.ndim - event_ndim
        return x.unsqueeze(lead + self.dim if self.dim >= 0 else self.dim)


class PermuteTransform(_ViewTransform):
    """Permute the event dims of observation keys (TorchRL's ``PermuteTransform``).

    Args:
        dims: the new order of the event dims, as negative indices (TorchRL's convention,
            e.g. ``(-1, -3, -2)`` turns ``[H, W, C]`` into ``[C, H, W]``).
        in_keys: keys read.
        out_keys: keys written (default: ``in_keys``).

    Raises:
        ValueError: ``dims`` is not a permutation of ``-len(dims) .. -1``.

    Examples:
        >>> import torch
        >>> from rl_envs import Composite, Unbounded
        >>> t = PermuteTransform((-1, -3, -2), in_keys=["pixels"])
        >>> spec = Composite(pixels=Unbounded((2, 8, 6, 3)), shape=(2,))
        >>> t.transform_observation_spec(spec)["pixels"].shape
        torch.Size([2, 3, 8, 6])
    """

    def __init__(
        self,
        dims: Sequence[int],
        *,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
    ) -> None:
        dims = list(dims)
        if sorted(dims) != list(range(-len(dims), 0)):
            raise ValueError(
                f"PermuteTransform: dims must be a permutation of {list(range(-len(dims), 0))}, "
                f"received {dims}"
            )
        self.dims = dims
        super().__init__(in_keys, out_keys)

    def _view(self, x: torch.Tensor, event_ndim: int) -> torch.Tensor:
        lead = list(range(x.ndim - len(self.dims)))
        return x.permute(*lead, *(x.ndim + d for d in self.dims))


class FlattenObservation(_ViewTransform):
    """Flatten the event dims ``first_dim .. last_dim`` of observation keys into one
    (TorchRL's ``FlattenObservation``).

    Args:
        first_dim: first dim flattened (negative: counted from the end).
        last_dim: last dim flattened.
        in_keys: keys read (default ``["pixels"]``, TorchRL's ``IMAGE_KEYS``).
        out_keys: keys written (default: ``in_keys``).
        allow_positive_dim: accept dims ``>= 0``, counted from the first event dim.

    Raises:
        ValueError: a dim ``>= 0`` without ``allow_positive_dim``, or empty in_keys.

    Examples:
        >>> from rl_envs import Composite, Unbounded
        >>> t = FlattenObservation(-3, -1)
        >>> spec = Composite(pixels=Unbounded((2, 3, 8, 6)), shape=(2,))
        >>> t.transform_observation_spec(spec)["pixels"].shape
        torch.Size([2, 144])
    """

    def __init__(
        self,
        first_dim: int,
        last_dim: int,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        allow_positive_dim: bool = False,
    ) -> None:
        self.first_dim = _check_dim("FlattenObservation", first_dim, allow_positive_dim)
        self.last_dim = _check_dim("FlattenObservation", last_dim, allow_positive_dim)
        super().__init__([PIXELS] if in_keys is None else in_keys, out_keys)

    def _view(self, x: torch.Tensor, event_ndim: int) -> torch.Tensor:
        lead = x.ndim - event_ndim
        first, last = (d if d < 0 else lead + d for d in (self.first_dim, self.last_dim))
        return x.flatten(first % x.ndim, last % x.ndim)


class DTypeCastTransform(MapTransform):
    """Cast observation (or reward) keys from ``dtype_in`` to ``dtype_out`` (TorchRL's
    ``DTypeCastTransform``; by default every key of dtype ``dtype_in``).

    Args:
        dtype_in: the dtype read.
        dtype_out: the dtype written.
        in_keys: keys cast (default: every observation key of dtype ``dtype_in``).
        out_keys: keys written (default: ``in_keys``).

    Raises:
        TypeError: an in-key's spec is not of dtype ``dtype_in``.

    Examples:
        >>> import torch
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2),
        ...                      DTypeCastTransform(torch.float32, torch.float64))
        >>> env.rollout(3)["next", "observation"].dtype
        torch.float64
        >>> env.close()
    """

    def __init__(
        self,
        dtype_in: torch.dtype,
        dtype_out: torch.dtype,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
    ) -> None:
        self.dtype_in, self.dtype_out = dtype_in, dtype_out
        self._auto = in_keys is None
        keys = key_list(in_keys, [])
        super().__init__(keys, key_list(out_keys, keys))

    def transform_observation_spec(self, spec: Any) -> Any:
        if self._auto:
            self.in_keys = [k for k, s in spec.items(True, True) if s.dtype == self.dtype_in]
            self.out_keys = list(self.in_keys)
        return super().transform_observation_spec(spec)

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        if spec.dtype != self.dtype_in:
            raise TypeError(
                f"DTypeCastTransform: {key!r} is {spec.dtype}, expected dtype_in={self.dtype_in}"
            )
        if isinstance(spec, Bounded):
            low, high = spec.low.to(self.dtype_out), spec.high.to(self.dtype_out)
            return Bounded(low, high, spec.shape, spec.device, self.dtype_out)
        return spec._rebuild(spec.shape, dtype=self.dtype_out)

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        return x.to(self.dtype_out)
