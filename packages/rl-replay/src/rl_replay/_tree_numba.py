"""The CPU priority tree with numba kernels: one compiled call per sample or update.

:class:`NumbaPriorityTree` keeps :class:`~rl_replay._tree.PriorityTree`'s layout and
state, with a narrower fanout (8 children: one 64-byte cache line of float64) and a
small top (at most 64 nodes, scanned whole), and replaces the batched tensor ops by
kernels from :mod:`rl_replay._tree_numba_kernels` that loop over the batch:

* **sample**: one kernel call descends from the top for every draw and writes the
  drawn leaves and their importance weights;
* **update**: one kernel call writes the leaves and recomputes their ancestors;
  ``set_priorities`` (what the sampler calls) also checks the priorities and indices and
  computes ``(p + eps) ** alpha`` in the same call, writing nothing if one is bad.

The torch tree costs about five tensor ops per level (a few microseconds of dispatch
each); here the whole batch costs one call. :func:`~rl_replay.make_priority_tree` picks
this tree on the CPU.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rl_replay._tree import PriorityTree
from rl_replay._tree_numba_kernels import BAD_INDEX, BAD_PRIORITY, kernels

__all__ = ["BAD_INDEX", "BAD_PRIORITY", "NumbaPriorityTree"]


class NumbaPriorityTree(PriorityTree):
    """A CPU :class:`PriorityTree` whose ``update`` and ``sample`` are numba kernels.

    Same methods, state and draws as :class:`PriorityTree` (up to float rounding in the
    sums). The kernels compile on first use (about a second each, then cached on disk).

    Args:
        capacity: number of leaves.
        fanout: children per node (8 by default: one cache line of float64).
        top_size: largest top level, scanned whole by each draw.
        device: must be the CPU.

    Raises:
        ValueError: an argument is out of range, or ``device`` is not the CPU.

    Examples:
        >>> import torch
        >>> from rl_replay import NumbaPriorityTree
        >>> tree = NumbaPriorityTree(1000)
        >>> tree.update(torch.tensor([7, 42]), torch.ones(2, dtype=torch.float64))  # written
        >>> tree.set_priorities(torch.tensor([7, 42]), torch.tensor([1.0, 3.0]), eps=0.0, alpha=1.0)
        (0, 3.0)
        >>> index, weight = tree.sample_weighted(torch.tensor([0.2, 0.9], dtype=torch.float64),
        ...                                      beta=1.0)
        >>> index.tolist(), weight.tolist()
        ([7, 42], [1.0, 0.3333333432674408])
    """

    def __init__(
        self, capacity: int, *, fanout: int = 8, top_size: int = 64, device: Any = "cpu"
    ) -> None:
        if torch.device(device).type != "cpu":
            raise ValueError(f"device: NumbaPriorityTree runs on the CPU, got {device!r}")
        super().__init__(capacity, fanout=fanout, top_size=top_size, device=device)
        self._kernels = kernels()
        # rows of preallocated outputs, each as (index, weight, their numpy views): a
        # tensor-numpy conversion costs about a microsecond, so one is made per pool
        self._outputs: list[tuple[torch.Tensor, torch.Tensor, np.ndarray, np.ndarray]] = []
        self._last_index: tuple[torch.Tensor | None, np.ndarray | None] = (None, None)

    OUTPUT_POOL = 16
    """Samples whose outputs are allocated (and viewed from numpy) at once."""

    def _rebuild(self, leaves: torch.Tensor, mins: torch.Tensor | None = None) -> None:
        super()._rebuild(leaves, mins)
        self._sum_np, self._min_np = self._sum_buf.numpy(), self._min_buf.numpy()
        offsets = np.asarray(self.level_offsets, dtype=np.int64)
        self._args = (self._sum_np, self._min_np, offsets, self.depth, self.fanout)
        # the levels again, in the update kernel's order of summation: a loaded tree
        # holds the bits of the tree that was saved (torch.sum adds in another order)
        kernels().build(*self._args)

    def update(self, index: torch.Tensor, value: torch.Tensor) -> None:
        """Set ``leaves[index] = value`` (float64, >= 0) and refresh the ancestors.

        ``index`` must hold valid leaf indices in ``[0, capacity)``.
        """
        index = _np(index, np.int64)
        self._kernels.update(*self._args, index, _np(value, np.float64), *self._marks())

    def set_priorities(
        self, index: torch.Tensor, priority: torch.Tensor, eps: float, alpha: float,
        check_index: bool = True,
    ) -> tuple[int, float]:  # fmt: skip
        """:meth:`PriorityTree.set_priorities` (checks, ``(p + eps) ** alpha``, the
        write and the ancestors) in one compiled call; same returns."""
        last, last_np = self._last_index  # the last sample's index: its view is at hand
        index_np = last_np if index is last else _np(index, np.int64)
        status, high = self._kernels.set_priorities(
            *self._args, index_np, _np(priority, np.float64),
            float(eps), float(alpha), self.capacity, bool(check_index), *self._marks(),
        )  # fmt: skip
        return int(status), float(high)

    _NO_MARKS = np.zeros(0, dtype=np.uint8)

    def _marks(self) -> tuple[np.ndarray, int]:
        """The tracker's dirty flags (set inside the kernels) and the value to set."""
        tracker = self.tracker
        if tracker is None:
            return self._NO_MARKS, 1
        return tracker.dirty.numpy(), 1

    def sample(self, u: torch.Tensor) -> torch.Tensor:
        """Leaves for uniform draws ``u`` in ``[0, 1)``: leaf ``i`` w.p. ``p_i / sum(p)``."""
        return self.sample_weighted(u, 0.0)[0]

    def sample_weighted(self, u: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`PriorityTree.sample_weighted` (draws and weights) in one compiled call."""
        u = _np(u, np.float64)
        n = u.shape[0]
        if not self._outputs or self._outputs[-1][2].shape[0] != n:  # (not Tensor.__len__: slow)
            index = torch.empty((self.OUTPUT_POOL, n), dtype=torch.int64)
            weight = torch.empty((self.OUTPUT_POOL, n), dtype=torch.float32)
            rows = zip(
                index.unbind(0), weight.unbind(0), index.numpy(), weight.numpy(), strict=True
            )
            self._outputs = list(rows)
        index, weight, index_np, weight_np = self._outputs.pop()
        self._kernels.descend(*self._args, self._top.shape[0], u, float(beta), index_np, weight_np)
        self._last_index = (index, index_np)
        return index, weight


_KERNEL_DTYPES = {np.int64: (torch.int64, torch.int32), np.float64: (torch.float64, torch.float32)}
"""Per kernel argument kind, the dtypes passed as they are (numba compiles one variant
each); any other is converted to the first."""


def _np(t: torch.Tensor, kind: type) -> np.ndarray:
    """``t`` as a 1-d contiguous CPU numpy array the kernels take (no copy when it is one)."""
    accepted = _KERNEL_DTYPES[kind]
    if (
        t.is_cpu
        and t.dtype in accepted
        and t.dim() == 1
        and t.is_contiguous()
        and not t.requires_grad
    ):
        return t.numpy()  # the usual case: a view, without the conversions below
    t = t.detach()
    if t.dtype not in accepted or t.device.type != "cpu":
        t = t.to("cpu", accepted[0])  # also the dtypes numpy lacks (bfloat16)
    return np.ascontiguousarray(t.numpy().reshape(-1))
