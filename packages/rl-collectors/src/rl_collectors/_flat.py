"""``FlatLayout``: a TensorDict of fixed keys, dtypes and shapes as one flat byte buffer.

The torch.distributed collectors move a batch (or a set of weights) as a single
``uint8`` tensor: one ``send``/``recv`` per batch instead of one per key. Both sides
build the same layout from a picklable description, so only the bytes travel. The time
dim (the last batch dim) may be shortened with :meth:`FlatLayout.with_steps` for the last,
shorter batch of a run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["FlatLayout"]

_ALIGN = 16  # bytes: every leaf starts on an address any dtype can be viewed from


@dataclass(frozen=True)
class FlatLayout:
    """Keys, dtypes and shapes of a TensorDict's leaves, with their byte offsets.

    Attributes:
        batch_size: the TensorDict's batch size.
        keys: the leaf keys (tuples), in a fixed order.
        dtypes: one dtype per key.
        shapes: one full shape per key (batch dims first).

    Examples:
        >>> td = TensorDict(
        ...     {
        ...         "a": torch.arange(6.).reshape(2, 3),
        ...         "b": {"c": torch.ones(2, 3, dtype=torch.int64)},
        ...     },
        ...     batch_size=[2, 3],
        ... )
        >>> layout = FlatLayout.of(td)
        >>> flat = layout.pack(td)
        >>> flat.dtype, layout.nbytes >= 2 * 3 * (4 + 8)
        (torch.uint8, True)
        >>> bool((layout.unpack(flat) == td).all())
        True
        >>> layout.with_steps(1).unpack(layout.with_steps(1).pack(td[:, :1]))["a"]
        tensor([[0.],
                [3.]])
    """

    batch_size: tuple[int, ...]
    keys: tuple[tuple[str, ...], ...]
    dtypes: tuple[torch.dtype, ...]
    shapes: tuple[tuple[int, ...], ...]

    @classmethod
    def of(cls, td: TensorDictBase) -> FlatLayout:
        """The layout of ``td`` (its leaves, in ``keys(True, True)`` order)."""
        keys = tuple(k if isinstance(k, tuple) else (k,) for k in td.keys(True, True))
        leaves = [td.get(k) for k in keys]
        return cls(
            tuple(td.batch_size),
            keys,
            tuple(x.dtype for x in leaves),
            tuple(tuple(x.shape) for x in leaves),
        )

    def with_steps(self, steps: int) -> FlatLayout:
        """The same layout with the time dim (the last batch dim) of length ``steps``."""
        t = len(self.batch_size) - 1
        shapes = tuple((*s[:t], steps, *s[t + 1:]) for s in self.shapes)
        return replace(self, batch_size=(*self.batch_size[:t], steps), shapes=shapes)

    @property
    def steps(self) -> int:
        """Length of the time dim."""
        return self.batch_size[-1]

    def _offsets(self) -> list[tuple[int, int]]:
        out, offset = [], 0
        for dtype, shape in zip(self.dtypes, self.shapes, strict=True):
            size = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            out.append((offset, size))
            offset += -(-size // _ALIGN) * _ALIGN
        return out

    @property
    def nbytes(self) -> int:
        """Size of the flat buffer in bytes."""
        if not self.keys:
            return 0
        offset, size = self._offsets()[-1]
        return offset + -(-size // _ALIGN) * _ALIGN

    def empty(self) -> torch.Tensor:
        """A new uninitialised flat buffer of :attr:`nbytes` bytes."""
        return torch.empty(self.nbytes, dtype=torch.uint8)

    def unpack(self, flat: torch.Tensor) -> TensorDict:
        """A TensorDict whose leaves are views into ``flat`` (no copy)."""
        if flat.numel() != self.nbytes:
            raise ValueError(
                f"flat: expected {self.nbytes} bytes for this layout, got {flat.numel()}"
            )
        leaves = {}
        for key, dtype, shape, (offset, size) in zip(
            self.keys, self.dtypes, self.shapes, self._offsets(), strict=True
        ):
            leaves[key] = flat[offset:offset + size].view(dtype).view(shape)
        td = TensorDict(batch_size=self.batch_size)
        for key, value in leaves.items():
            td.set(key, value)
        return td

    def pack(self, td: TensorDictBase, out: torch.Tensor | None = None) -> torch.Tensor:
        """Copy the leaves of ``td`` into ``out`` (a new buffer when ``None``); returns it."""
        out = self.empty() if out is None else out
        views = self.unpack(out)
        for key in self.keys:
            views.get(key).copy_(td.get(key))
        return out
