"""Leaf tensor specs: shape (batch included), dtype, device and the set of valid values.

Names and meaning follow TorchRL. This module holds the base ``TensorSpec`` and the
continuous specs (``Unbounded``, ``Bounded``); the discrete ones (``Categorical``,
``MultiCategorical``, ``OneHot``, ``Binary``) live in :mod:`rl_envs._specs_discrete`,
``Composite`` in :mod:`rl_envs._composite`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rl_envs.exceptions import SpecError

__all__ = ["Bounded", "ContinuousBox", "TensorSpec", "Unbounded"]

ShapeLike = int | Sequence[int] | torch.Size


def _size(shape: ShapeLike | None) -> torch.Size:
    if shape is None:
        return torch.Size([])
    if isinstance(shape, int):
        return torch.Size([shape])
    return torch.Size(shape)


def _device(device: Any) -> torch.device:
    return torch.device("cpu") if device is None else torch.device(device)


class TensorSpec:
    """Base class of the leaf specs.

    Args:
        shape: full shape of the value, batch dimensions included.
        device: device of the values (default CPU).
        dtype: dtype of the values.

    Examples:
        >>> spec = Unbounded(shape=(2, 3))
        >>> spec.zero().shape
        torch.Size([2, 3])
        >>> spec.is_in(torch.zeros(2, 3))
        True
    """

    def __init__(self, shape: ShapeLike = (), device: Any = None, dtype: Any = torch.float32):
        self.shape = _size(shape)
        self.device = _device(device)
        self.dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype))

    # -- values -------------------------------------------------------------------------
    def zero(self, shape: ShapeLike | None = None) -> torch.Tensor:
        """A zero-filled value, with ``shape`` prepended to the spec's shape."""
        return torch.zeros((*_size(shape), *self.shape), dtype=self.dtype, device=self.device)

    def rand(
        self, shape: ShapeLike | None = None, *, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """A random valid value, with ``shape`` prepended to the spec's shape."""
        raise NotImplementedError

    def _value_error(self, value: torch.Tensor) -> str | None:
        """Why ``value`` (right shape and dtype) is outside the spec, or ``None``."""
        return None

    def project(self, value: torch.Tensor) -> torch.Tensor:
        """Map ``value`` to the closest valid value (same shape and dtype)."""
        return value

    # -- checks -------------------------------------------------------------------------
    def mismatch(self, value: Any) -> str | None:
        """Describe how ``value`` fails the spec (shape, dtype, range), or ``None``."""
        if not isinstance(value, torch.Tensor):
            return f"expected a torch.Tensor, received {type(value).__name__}"
        if value.dtype != self.dtype:
            return f"expected dtype {self.dtype}, received {value.dtype}"
        if value.shape != self.shape:
            return f"expected shape {tuple(self.shape)}, received {tuple(value.shape)}"
        return self._value_error(value)

    def is_in(self, value: Any) -> bool:
        """Whether ``value`` has the spec's shape and dtype and lies in its range."""
        return self.mismatch(value) is None

    def assert_is_in(self, value: Any, key: Any = "value", error: type = SpecError) -> None:
        """Raise ``error`` naming ``key`` when ``value`` is outside the spec."""
        msg = self.mismatch(value)
        if msg is not None:
            raise error(f"{key!r}: {msg} (spec: {self!r})")

    # -- transforms of the spec ---------------------------------------------------------
    def _kwargs(self) -> dict[str, Any]:
        return {}

    def _rebuild(self, shape: ShapeLike, device: Any = None, dtype: Any = None) -> TensorSpec:
        return type(self)(
            shape=shape,
            device=self.device if device is None else device,
            dtype=self.dtype if dtype is None else dtype,
            **self._kwargs(),
        )

    def expand(self, *shape: Any) -> TensorSpec:
        """Prepend batch dimensions: the new shape must end with the current one."""
        new = _size(shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape)
        tail = new[len(new) - len(self.shape) :] if self.shape else torch.Size([])
        if len(new) < len(self.shape) or tail != self.shape:
            raise SpecError(
                f"expand: the new shape must end with the spec's shape {tuple(self.shape)}, "
                f"received {tuple(new)}"
            )
        return self._rebuild(new)

    def to(self, device: Any) -> TensorSpec:
        """The same spec on another device."""
        return self._rebuild(self.shape, device=device)

    def clone(self) -> TensorSpec:
        return self._rebuild(self.shape)

    def __eq__(self, other: object) -> bool:
        return (
            type(self) is type(other)
            and self.shape == other.shape  # type: ignore[attr-defined]
            and self.dtype == other.dtype  # type: ignore[attr-defined]
            and self.device == other.device  # type: ignore[attr-defined]
            and self._eq_extra(other)
        )

    def _eq_extra(self, other: Any) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        extra = "".join(f", {k}={v}" for k, v in self._kwargs().items() if k not in ("low", "high"))
        return f"{type(self).__name__}(shape={tuple(self.shape)}, dtype={self.dtype}{extra})"


def _rand_float(
    shape: torch.Size, dtype: torch.dtype, device: torch.device, gen: Any
) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device=device, generator=gen)


def _rand_int(
    shape: torch.Size, low: Any, high: Any, dtype: torch.dtype, device: torch.device, gen: Any
) -> torch.Tensor:
    """Uniform integers in ``[low, high]`` (broadcastable tensors or ints)."""
    span = (
        torch.as_tensor(high, device=device, dtype=torch.int64)
        - torch.as_tensor(low, device=device, dtype=torch.int64)
        + 1
    )
    r = torch.randint(0, 2**62, shape, device=device, generator=gen)
    return (r % span + torch.as_tensor(low, device=device, dtype=torch.int64)).to(dtype)


class Unbounded(TensorSpec):
    """Any value of the given shape and dtype.

    Examples:
        >>> Unbounded(shape=(4,)).rand().shape
        torch.Size([4])
    """

    def rand(self, shape: ShapeLike | None = None, *, generator: Any = None) -> torch.Tensor:
        full = torch.Size((*_size(shape), *self.shape))
        if self.dtype == torch.bool:
            return torch.randint(0, 2, full, device=self.device, generator=generator).bool()
        if self.dtype.is_floating_point:
            return _rand_float(full, self.dtype, self.device, generator)
        return torch.randint(-100, 100, full, device=self.device, generator=generator).to(
            self.dtype
        )


@dataclass(frozen=True, eq=False)
class ContinuousBox:
    """The set of values of a :class:`Bounded` spec (TorchRL's ``spec.space``).

    Attributes:
        low: the lower bounds, shaped like the spec (the spec's own tensor).
        high: the upper bounds, likewise.

    Examples:
        >>> box = Bounded(-1.0, 2.0, shape=(2,)).space
        >>> box.low, box.high
        (tensor([-1., -1.]), tensor([2., 2.]))
    """

    low: torch.Tensor
    high: torch.Tensor


class Bounded(TensorSpec):
    """Values in ``[low, high]`` (element-wise, bounds broadcast to the shape).

    Args:
        low: lower bound (scalar or tensor broadcastable to ``shape``).
        high: upper bound.
        shape: full shape, batch included.
        device: device.
        dtype: dtype (float32 by default).

    Examples:
        >>> spec = Bounded(-1.0, 1.0, shape=(3,))
        >>> spec.is_in(torch.full((3,), 2.0))
        False
        >>> spec.project(torch.full((3,), 2.0))
        tensor([1., 1., 1.])
    """

    def __init__(
        self,
        low: Any,
        high: Any,
        shape: ShapeLike | None = None,
        device: Any = None,
        dtype: Any = torch.float32,
    ):
        low_t, high_t = torch.as_tensor(low), torch.as_tensor(high)
        if shape is None:
            shape = torch.broadcast_shapes(low_t.shape, high_t.shape)
        super().__init__(shape, device, dtype)
        self.low = low_t.to(self.device, self.dtype).expand(self.shape).clone()
        self.high = high_t.to(self.device, self.dtype).expand(self.shape).clone()
        if (self.low > self.high).any():
            raise SpecError(f"Bounded: low must be <= high, received low={low}, high={high}")

    @property
    def space(self) -> ContinuousBox:
        """``low`` and ``high`` as TorchRL's ``spec.space.low`` / ``spec.space.high``."""
        return ContinuousBox(self.low, self.high)

    def _kwargs(self) -> dict[str, Any]:
        return {"low": self.low, "high": self.high}

    def _rebuild(self, shape: ShapeLike, device: Any = None, dtype: Any = None) -> TensorSpec:
        shape = _size(shape)
        return Bounded(
            self.low.expand(shape),
            self.high.expand(shape),
            shape=shape,
            device=self.device if device is None else device,
            dtype=self.dtype if dtype is None else dtype,
        )

    def _eq_extra(self, other: Any) -> bool:
        return bool(torch.equal(self.low, other.low) and torch.equal(self.high, other.high))

    def rand(self, shape: ShapeLike | None = None, *, generator: Any = None) -> torch.Tensor:
        full = torch.Size((*_size(shape), *self.shape))
        if not self.dtype.is_floating_point:
            return _rand_int(full, self.low, self.high, self.dtype, self.device, generator)
        low = torch.where(torch.isfinite(self.low), self.low, -1e6)
        high = torch.where(torch.isfinite(self.high), self.high, 1e6)
        u = torch.rand(full, dtype=self.dtype, device=self.device, generator=generator)
        return (low + (high - low) * u).clamp(self.low, self.high)

    def _value_error(self, value: torch.Tensor) -> str | None:
        bad = (value < self.low) | (value > self.high)
        if value.dtype.is_floating_point:
            bad = bad | torch.isnan(value)
        if bad.any():
            idx = tuple(bad.nonzero()[0].tolist())
            return (
                f"value out of bounds at index {idx}: {value[idx].item()} not in "
                f"[{self.low[idx].item()}, {self.high[idx].item()}]"
            )
        return None

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return torch.maximum(torch.minimum(value, self.high), self.low)
