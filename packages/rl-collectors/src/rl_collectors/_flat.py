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
from rl_profiling.layout import BatchLayout
from tensordict import TensorDict, TensorDictBase

__all__ = ["FlatLayout"]

_ALIGN = 16  # bytes: every leaf starts on an address any dtype can be viewed from


@dataclass(frozen=True)
class FlatLayout:
    """A batch's layout (:class:`rl_profiling.layout.BatchLayout`, the one description of
    it) with each leaf's byte offset in the flat buffer.

    Attributes:
        layout: the keys, dtypes, event shapes and batch size, time last.

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

    layout: BatchLayout

    @classmethod
    def of(cls, td: TensorDictBase) -> FlatLayout:
        """The layout of ``td`` (its leaves, in :meth:`BatchLayout.of`'s order); its last
        batch dim is time."""
        dims = td.batch_dims
        return cls(BatchLayout.of(td, time_dim=dims - 1 if dims else None))

    @property
    def keys(self) -> tuple[tuple[str, ...], ...]:
        """The leaf keys (tuples), in a fixed order."""
        return self.layout.keys

    def with_steps(self, steps: int) -> FlatLayout:
        """The same layout with the time dim (the last batch dim) of length ``steps``."""
        batch = self.layout.batch_size
        return FlatLayout(replace(self.layout, batch_size=(*batch[:-1], steps)))

    @property
    def steps(self) -> int:
        """Length of the time dim."""
        return self.layout.steps

    def _offsets(self) -> list[tuple[int, int]]:
        out, offset = [], 0
        for dtype, shape in zip(self.layout.dtypes, self.layout.full_shapes(), strict=True):
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
        layout = self.layout
        for key, dtype, shape, (offset, size) in zip(
            layout.keys, layout.dtypes, layout.full_shapes(), self._offsets(), strict=True
        ):
            leaves[key] = flat[offset:offset + size].view(dtype).view(shape)
        td = TensorDict(batch_size=layout.batch_size)
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
