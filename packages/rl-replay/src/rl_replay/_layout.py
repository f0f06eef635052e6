"""The layout of stored rows: leaf keys, dtypes and per-row shapes.

A :class:`Layout` is taken from the first batch written to a storage; every later write
is checked against it *before* anything is written, so bad input never corrupts data.
It also rebuilds a ``TensorDict`` from gathered leaves without the generic constructor's
checks, which is what keeps ``sample()`` close to the cost of indexing the tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from rl_profiling.layout import BatchLayout, key_str
from tensordict import TensorDict, TensorDictBase

from rl_replay.exceptions import StorageLayoutError

__all__ = ["Layout", "batch_rows"]


def batch_rows(data: Any, ndim: int) -> tuple[int, ...]:
    """Return the leading ``ndim`` batch dims of ``data`` (a TensorDict or a Tensor)."""
    shape = data.batch_size if isinstance(data, TensorDictBase) else data.shape
    if len(shape) < ndim:
        raise StorageLayoutError(
            f"data: expected at least {ndim} batch dim(s) for a storage with ndim={ndim}, "
            f"got shape {tuple(shape)}"
        )
    return tuple(shape[:ndim])


@dataclass(frozen=True)
class Layout:
    """Keys, dtypes and per-row shapes of what a storage holds.

    Attributes:
        keys: leaf keys (``None`` for plain tensor data), sorted.
        dtypes: dtype of each leaf.
        shapes: per-row shape (after the storage's batch dims) of each leaf.
        is_td: whether the data is a TensorDict (else a single Tensor).
        flat: whether every key is a plain string (derived from ``keys``).
    """

    keys: tuple
    dtypes: tuple
    shapes: tuple
    is_td: bool
    # computed once in __post_init__, not a cached_property, whose lock dynamo cannot trace
    flat: bool = field(init=False, repr=False, compare=False)
    # the leaf order of each key structure a write was checked with (see `check`)
    _orders: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        flat = self.is_td and all(isinstance(k, str) for k in self.keys)
        object.__setattr__(self, "flat", flat)
        object.__setattr__(self, "_orders", {})

    @classmethod
    def of(cls, data: Any, ndim: int) -> Layout:
        """Layout of ``data`` whose first ``ndim`` dims are batch dims: the one description
        of a batch (:meth:`rl_profiling.layout.BatchLayout.of`), a root key as its string."""
        if isinstance(data, TensorDictBase):
            try:
                desc = BatchLayout.of(data, ndim)
            except TypeError as err:
                raise StorageLayoutError(str(err)) from err
            keys = tuple(k[0] if len(k) == 1 else k for k in desc.keys)
            return cls(keys, desc.dtypes, desc.shapes, True)
        if isinstance(data, torch.Tensor):
            return cls((None,), (data.dtype,), (tuple(data.shape[ndim:]),), False)
        raise StorageLayoutError(
            f"data: expected a TensorDict or a Tensor, got {type(data).__name__}"
        )

    def state(self) -> dict:
        """Plain data for a checkpoint (dtypes by name); :meth:`from_state` reads it."""
        return {
            "keys": list(self.keys),
            "dtypes": [str(d).removeprefix("torch.") for d in self.dtypes],
            "shapes": [list(s) for s in self.shapes],
            "is_td": self.is_td,
        }

    @classmethod
    def from_state(cls, state: dict) -> Layout:
        """The layout :meth:`state` wrote."""
        return cls(
            tuple(tuple(k) if isinstance(k, list) else k for k in state["keys"]),
            tuple(getattr(torch, d) for d in state["dtypes"]),
            tuple(tuple(s) for s in state["shapes"]),
            bool(state["is_td"]),
        )

    def leaves(self, data: Any) -> list[torch.Tensor]:
        """Leaves of ``data`` in layout order (no check)."""
        if not self.is_td:
            return [data]
        return [data.get(k) for k in self.keys]

    def check(self, data: Any, ndim: int) -> list[torch.Tensor]:
        """Check ``data`` against this layout and return its leaves in layout order.

        A TensorDict whose keys come in an order already checked (a batch built the same
        way as the last one) is checked by comparing each leaf's dtype and per-row shape
        to the layout's; anything else takes the full check below, whose errors name the
        key, and a structure that passes it is remembered.

        Raises:
            StorageLayoutError: a key is missing or extra, or a shape or dtype differs.
        """
        cached = self.is_td and isinstance(data, TensorDictBase) and not _compiling()
        if cached:
            keys, found = _walk(data)
            leaves = self._known(keys, found, ndim)
            if leaves is not None:
                return leaves
        self._full_check(data, ndim)
        if cached and len(keys) == len(self.keys):
            if len(self._orders) >= _MAX_ORDERS:
                self._orders.clear()
            position = {k: i for i, k in enumerate(keys)}
            self._orders[tuple(keys)] = tuple(position[k] for k in self.keys)
        return self.leaves(data)

    def _known(self, keys: list, found: list, ndim: int) -> list[torch.Tensor] | None:
        """The leaves in layout order if ``keys`` is a checked structure and every leaf's
        dtype and per-row shape match; ``None`` otherwise (the full check decides)."""
        order = self._orders.get(tuple(keys))
        if order is None:
            return None
        leaves = [found[i] for i in order]
        for leaf, dt, shp in zip(leaves, self.dtypes, self.shapes, strict=True):
            if not isinstance(leaf, torch.Tensor) or leaf.dtype != dt or leaf.shape[ndim:] != shp:
                return None
        return leaves

    def _full_check(self, data: Any, ndim: int) -> None:
        other = Layout.of(data, ndim)
        if other.is_td != self.is_td:
            kind = "TensorDict" if self.is_td else "Tensor"
            raise StorageLayoutError(
                f"data: expected a {kind} like the stored data, got {type(data).__name__}"
            )
        if other.keys != self.keys:
            missing = sorted(map(key_str, set(self.keys) - set(other.keys)))
            extra = sorted(map(key_str, set(other.keys) - set(self.keys)))
            raise StorageLayoutError(
                f"data: keys differ from the stored keys; missing {missing}, unexpected {extra}"
            )
        for k, dt, shp, odt, oshp in zip(
            self.keys, self.dtypes, self.shapes, other.dtypes, other.shapes, strict=False
        ):
            name = "data" if k is None else f"data[{key_str(k)!r}]"
            if oshp != shp:
                raise StorageLayoutError(
                    f"{name}: expected per-row shape {list(shp)}, got {list(oshp)}"
                )
            if odt != dt:
                raise StorageLayoutError(f"{name}: expected dtype {dt}, got {odt}")

    def build(
        self,
        leaves: list[torch.Tensor],
        batch_size: torch.Size,
        device: Any,
        extra: dict | None = None,
    ) -> Any:
        """Assemble gathered leaves into a TensorDict (or return the single Tensor).

        ``extra`` maps root-level string keys to tensors of batch shape ``batch_size``
        (e.g. ``"index"``) that join the TensorDict, replacing stored entries of the same
        name; it is ignored for Tensor data.
        """
        if not self.is_td:
            return leaves[0]
        if self.flat:
            source = dict(zip(self.keys, leaves, strict=True))
            if extra:
                source.update(extra)
            return TensorDict._new_unsafe(
                source=source, batch_size=batch_size, device=device, nested=False
            )
        root: dict = {}
        for k, v in zip(self.keys, leaves, strict=False):
            if isinstance(k, tuple):
                node = root
                for part in k[:-1]:
                    node = node.setdefault(part, {})
                node[k[-1]] = v
            else:
                root[k] = v
        if extra:
            root.update(extra)
        return _assemble(root, batch_size, device)


_MAX_ORDERS = 8  # key structures remembered per layout (a buffer sees one or two)


def _compiling() -> bool:
    return torch.compiler.is_compiling()


def _walk(data: TensorDictBase) -> tuple[list, list]:
    """Every leaf key (a root key as its string) and value, in the TensorDict's own order."""
    keys: list = []
    found: list = []
    stack = [((), data)]
    while stack:
        prefix, node = stack.pop()
        for k, v in node.items():
            key = (*prefix, k)
            if isinstance(v, TensorDictBase):
                stack.append((key, v))
            else:
                keys.append(key if prefix else k)
                found.append(v)
    return keys, found


def _assemble(node: dict, batch_size: torch.Size, device: Any) -> TensorDict:
    source = {
        k: _assemble(v, batch_size, device) if isinstance(v, dict) else v for k, v in node.items()
    }
    return TensorDict._new_unsafe(source=source, batch_size=batch_size, device=device)
