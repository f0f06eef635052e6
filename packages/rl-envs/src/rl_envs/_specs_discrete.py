"""Discrete leaf specs (TorchRL names and meaning): ``Categorical``, ``MultiCategorical``,
``OneHot`` and ``Binary``. The base class and the continuous specs are in
:mod:`rl_envs._specs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from rl_envs._specs import ShapeLike, TensorSpec, _rand_int, _size
from rl_envs.exceptions import SpecError

__all__ = [
    "Binary",
    "BinaryBox",
    "BoxList",
    "Categorical",
    "CategoricalBox",
    "MultiCategorical",
    "OneHot",
]


@dataclass(frozen=True)
class CategoricalBox:
    """The set of values of a :class:`Categorical` or :class:`OneHot` spec (TorchRL's
    ``spec.space``).

    Attributes:
        n: the number of choices.

    Examples:
        >>> Categorical(4).space.n, OneHot(3).space.n
        (4, 3)
    """

    n: int


@dataclass(frozen=True)
class BinaryBox:
    """The set of values of a :class:`Binary` spec: ``n`` independent ``{0, 1}`` values
    (TorchRL's ``spec.space``).

    Examples:
        >>> Binary(4).space.n
        4
    """

    n: int


@dataclass(frozen=True)
class BoxList:
    """One box per categorical choice of a :class:`MultiCategorical` spec (TorchRL's
    ``spec.space``): ``space[i].n`` is ``nvec[i]``.

    Examples:
        >>> space = MultiCategorical([2, 3]).space
        >>> len(space), space[1].n
        (2, 3)
    """

    boxes: tuple[CategoricalBox, ...]

    def __getitem__(self, index: int) -> CategoricalBox:
        return self.boxes[index]

    def __len__(self) -> int:
        return len(self.boxes)

    def __iter__(self) -> Any:
        return iter(self.boxes)


class _NChoices(TensorSpec):
    """What :class:`Categorical` and :class:`OneHot` share: ``n`` choices, one per element."""

    n: int

    @property
    def space(self) -> CategoricalBox:
        """``n`` as TorchRL's ``spec.space.n``."""
        return CategoricalBox(self.n)

    def _kwargs(self) -> dict[str, Any]:
        return {"n": self.n}

    def _eq_extra(self, other: Any) -> bool:
        return self.n == other.n


class Categorical(_NChoices):
    """Integer values in ``[0, n)`` (one discrete choice per element; no trailing ``n`` dim).

    Examples:
        >>> spec = Categorical(3, shape=(8,))
        >>> spec.rand().shape
        torch.Size([8])
        >>> spec.is_in(torch.full((8,), 3))
        False
    """

    def __init__(self, n: int, shape: ShapeLike = (), device: Any = None, dtype: Any = torch.int64):
        super().__init__(shape, device, dtype)
        self.n = int(n)

    def rand(self, shape: ShapeLike | None = None, *, generator: Any = None) -> torch.Tensor:
        full = (*_size(shape), *self.shape)
        return torch.randint(
            0, self.n, full, device=self.device, generator=generator, dtype=self.dtype
        )

    def _value_error(self, value: torch.Tensor) -> str | None:
        bad = (value < 0) | (value >= self.n)
        if bad.any():
            idx = tuple(bad.nonzero()[0].tolist())
            return f"value out of range at index {idx}: {value[idx].item()} not in [0, {self.n})"
        return None

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return value.clamp(0, self.n - 1)


class MultiCategorical(TensorSpec):
    """Several categorical choices along the last dim: ``value[..., i]`` in ``[0, nvec[i])``.

    Examples:
        >>> spec = MultiCategorical([2, 3], shape=(4, 2))
        >>> spec.rand().shape
        torch.Size([4, 2])
    """

    def __init__(
        self,
        nvec: Any,
        shape: ShapeLike | None = None,
        device: Any = None,
        dtype: Any = torch.int64,
    ):
        nvec_t = torch.as_tensor(nvec, dtype=torch.int64)
        super().__init__(nvec_t.shape if shape is None else shape, device, dtype)
        self.nvec = nvec_t.to(self.device).expand(self.shape).clone()

    def _kwargs(self) -> dict[str, Any]:
        return {"nvec": self.nvec}

    @property
    def space(self) -> BoxList:
        """One :class:`CategoricalBox` per choice (the last dim), as TorchRL's ``spec.space``."""
        return BoxList(
            tuple(CategoricalBox(int(n)) for n in self.nvec.reshape(-1, self.shape[-1])[0])
        )

    def _rebuild(self, shape: ShapeLike, device: Any = None, dtype: Any = None) -> TensorSpec:
        shape = _size(shape)
        return MultiCategorical(
            self.nvec.expand(shape),
            shape=shape,
            device=self.device if device is None else device,
            dtype=self.dtype if dtype is None else dtype,
        )

    def _eq_extra(self, other: Any) -> bool:
        return bool(torch.equal(self.nvec, other.nvec))

    def rand(self, shape: ShapeLike | None = None, *, generator: Any = None) -> torch.Tensor:
        full = torch.Size((*_size(shape), *self.shape))
        return _rand_int(full, 0, self.nvec - 1, self.dtype, self.device, generator)

    def _value_error(self, value: torch.Tensor) -> str | None:
        bad = (value < 0) | (value >= self.nvec)
        if bad.any():
            idx = tuple(bad.nonzero()[0].tolist())
            return (f"value out of range at index {idx}: {value[idx].item()} "
                    f"not in [0, {self.nvec[idx].item()})")
        return None

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return torch.minimum(value.clamp_min(0), self.nvec - 1).to(value.dtype)

    def __repr__(self) -> str:
        return (f"MultiCategorical(shape={tuple(self.shape)}, dtype={self.dtype}, "
                f"""nvec={self.nvec.reshape(-1, self.shape[-1])[0].tolist()
                          if self.shape else self.nvec.tolist()})""")


class OneHot(_NChoices):
    """One-hot values: the last dim has size ``n`` and exactly one 1.

    Examples:
        >>> spec = OneHot(3, shape=(5, 3))
        >>> spec.rand().sum(-1).tolist()
        [1, 1, 1, 1, 1]
    """

    def __init__(
        self, n: int, shape: ShapeLike | None = None, device: Any = None, dtype: Any = torch.bool
    ):
        super().__init__((n,) if shape is None else shape, device, dtype)
        self.n = int(n)
        if not self.shape or self.shape[-1] != self.n:
            raise SpecError(
                f"OneHot: the last dim of shape must be n={n}, received shape {tuple(self.shape)}"
            )

    def rand(self, shape: ShapeLike | None = None, *, generator: Any = None) -> torch.Tensor:
        full = (*_size(shape), *self.shape[:-1])
        idx = torch.randint(0, self.n, full, device=self.device, generator=generator)
        return torch.nn.functional.one_hot(idx, self.n).to(self.dtype)

    def _value_error(self, value: torch.Tensor) -> str | None:
        v = value.to(torch.int64)
        if ((v != 0) & (v != 1)).any() or (v.sum(-1) != 1).any():
            return "expected one-hot values (a single 1 along the last dim)"
        return None

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.one_hot(value.argmax(-1), self.n).to(value.dtype)


class Binary(TensorSpec):
    """Values in ``{0, 1}``; the last dim has size ``n``.

    Examples:
        >>> Binary(4, shape=(2, 4)).rand().shape
        torch.Size([2, 4])
    """

    def __init__(
        self,
        n: int | None = None,
        shape: ShapeLike | None = None,
        device: Any = None,
        dtype: Any = torch.int8,
    ):
        if shape is None:
            if n is None:
                raise SpecError("Binary: give n or shape")
            shape = (n,)
        super().__init__(shape, device, dtype)
        self.n = self.shape[-1] if n is None else int(n)
        if not self.shape or self.shape[-1] != self.n:
            raise SpecError(
                f"Binary: the last dim of shape must be n={n}, received shape {tuple(self.shape)}"
            )

    def _kwargs(self) -> dict[str, Any]:
        return {"n": self.n}

    @property
    def space(self) -> BinaryBox:
        """``n`` as TorchRL's ``spec.space.n``."""
        return BinaryBox(self.n)

    def _eq_extra(self, other: Any) -> bool:
        return self.n == other.n

    def rand(self, shape: ShapeLike | None = None, *, generator: Any = None) -> torch.Tensor:
        full = (*_size(shape), *self.shape)
        return torch.randint(0, 2, full, device=self.device, generator=generator).to(self.dtype)

    def _value_error(self, value: torch.Tensor) -> str | None:
        if self.dtype != torch.bool and ((value != 0) & (value != 1)).any():
            return "expected values in {0, 1}"
        return None

    def project(self, value: torch.Tensor) -> torch.Tensor:
        return (
            (value > 0.5).to(value.dtype)
            if value.dtype.is_floating_point
            else (value != 0).to(value.dtype)
        )
