"""A blocked sum/min priority tree in torch (CPU or GPU, no Python loop over a batch).

Leaves are grouped in blocks of ``F`` (the fanout, 32 by default), and blocks in blocks
of ``F`` again until at most ``top_size`` (32768) nodes remain: one level under the top
up to 1M leaves, two up to 32M. Each level costs about five tensor ops per sample and
per update, more than a ``cumsum`` over a 32k-node top does (at 1M leaves, 32768 beat
4096 with two levels by about 10% per sample + update). All levels' sums are stored in
one flat float64 buffer and all minima in another (level 0, the leaves, first), so a
kernel can walk them from one pointer (see :mod:`rl_replay._tree_triton`). Every
operation is a handful of large tensor ops, whatever the batch:

* **sample** (``B`` draws ``u`` in ``[0, 1)``): one ``cumsum`` of the top level into a
  buffer that starts with 0, one ``searchsorted`` of ``u * total`` in it; then per level
  one gather of the chosen blocks' ``[B, F]`` children, their running sum, one batched
  ``searchsorted`` of the mass left and (above the leaves) the mass of the skipped
  children subtracted. Leaf ``i`` is drawn with probability ``p_i / sum(p)``; a zero
  leaf never is (up to float ties at a block's last leaf).
* **update**: two ``scatter_`` of the leaves (sums and minima), then per level one
  gather of the touched blocks' children, their ``sum`` and ``amin``, and two
  ``scatter_`` into the level above. Touched blocks are recomputed from their children
  rather than patched with deltas, so the tree is exact (no float drift) under any
  sequence of updates, with duplicate indices too.

The minimum (for importance weights) is over the leaves written since the last
:meth:`PriorityTree.clear` (unwritten leaves hold ``+inf`` in the min leaves).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rl_replay._snapshot import WriteTracker
from rl_replay._tree_numba_kernels import BAD_INDEX, BAD_PRIORITY, UNWRITTEN

__all__ = ["PriorityTree"]


class PriorityTree:
    """Sum and min trees over ``capacity`` non-negative leaves.

    Args:
        capacity: number of leaves.
        fanout: children per block below the top level.
        top_size: largest top level; the top is scanned whole (one ``cumsum``) by each
            ``sample``.
        device: where the tree lives.

    Raises:
        ValueError: ``capacity``, ``fanout`` or ``top_size`` is out of range.

    Examples:
        >>> import torch
        >>> tree = PriorityTree(10)
        >>> tree.update(torch.tensor([1, 3]), torch.tensor([1.0, 3.0], dtype=torch.float64))
        >>> tree.total(), tree.min()
        (4.0, 1.0)
        >>> tree.sample(torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
        [1, 3, 3]
    """

    def __init__(
        self, capacity: int, *, fanout: int = 32, top_size: int = 32768, device: Any = "cpu"
    ) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
            raise ValueError(f"capacity: expected a positive int, got {capacity!r}")
        if isinstance(fanout, bool) or not isinstance(fanout, int) or fanout < 2:
            raise ValueError(f"fanout: expected an int >= 2, got {fanout!r}")
        if isinstance(top_size, bool) or not isinstance(top_size, int) or top_size < 1:
            raise ValueError(f"top_size: expected a positive int, got {top_size!r}")
        self.capacity, self.fanout, self.top_size = capacity, fanout, top_size
        self.device = torch.device(device)
        depth = 0
        while -(-capacity // fanout**depth) > top_size:
            depth += 1
        self.depth = depth
        self._padded = -(-capacity // fanout**depth) * fanout**depth
        self.tracker: WriteTracker | None = None
        """Marks the leaves each update writes (set by a sampler that checkpoints them)."""
        self.clear()

    def clear(self) -> None:
        """Set every leaf to zero (and forget the written leaves for :meth:`min`)."""
        if self.tracker is not None:
            self.tracker.forget()  # every leaf changed
        self._rebuild(torch.zeros(self._padded, dtype=torch.float64, device=self.device))

    def _rebuild(self, leaves: torch.Tensor, mins: torch.Tensor | None = None) -> None:
        """Build every level from ``leaves`` (and min leaves, ``+inf`` where unwritten).

        All levels' sums live in one flat buffer (and all minima in another), level 0
        first, so that a kernel can walk them from one pointer and ``level_offsets``.
        """
        f = self.fanout
        sizes = [self._padded // f**level for level in range(self.depth + 1)]
        offsets = [sum(sizes[:level]) for level in range(self.depth + 1)]
        self.level_offsets = offsets
        kw = dict(dtype=torch.float64, device=self.device)
        self._sum_buf, self._min_buf = torch.empty(sum(sizes), **kw), torch.empty(sum(sizes), **kw)
        self._sums = [self._sum_buf[o : o + n] for o, n in zip(offsets, sizes, strict=True)]
        self._mins = [self._min_buf[o : o + n] for o, n in zip(offsets, sizes, strict=True)]
        self._sums[0].copy_(leaves)
        self._mins[0].copy_(torch.where(leaves > 0, leaves, torch.inf) if mins is None else mins)
        # level l's nodes grouped by parent, [n_{l+1}, F] (views)
        self._sum_blocks = [v.view(-1, f) for v in self._sums[:-1]]
        self._min_blocks = [v.view(-1, f) for v in self._mins[:-1]]
        for level in range(self.depth):
            torch.sum(self._sum_blocks[level], 1, out=self._sums[level + 1])
            torch.amin(self._min_blocks[level], 1, out=self._mins[level + 1])
        self._top, self._top_min = self._sums[-1], self._mins[-1]
        cum = torch.zeros(self._top.numel() + 1, **kw)
        self._cum, self._cum_incl, self._cum_total = cum, cum[1:], cum[-1:]

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return torch.index_select(self._sums[0], 0, index)

    @property
    def leaves(self) -> torch.Tensor:
        """The leaf values, ``[capacity]`` (a view)."""
        return self._sums[0][: self.capacity]

    @property
    def min_leaves(self) -> torch.Tensor:
        """The min leaves, ``[capacity]`` (a view): a leaf's value, ``+inf`` where unwritten."""
        return self._mins[0][: self.capacity]

    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._top.sum())

    def min(self) -> float:
        """Smallest leaf written since the last :meth:`clear` (``inf`` if none)."""
        return float(self._top_min.amin())

    def written(self, index: torch.Tensor) -> torch.Tensor:
        """Whether each leaf of ``index`` (in ``[0, capacity)``) was written since the
        last :meth:`clear` or load: a bool tensor of ``index``'s shape (no host sync)."""
        return torch.index_select(self._mins[0], 0, index).isfinite()

    def min_tensor(self) -> torch.Tensor:
        """:meth:`min` as a 0-d tensor on the tree's device (no host sync)."""
        return self._top_min.amin()

    def update(self, index: torch.Tensor, value: torch.Tensor) -> None:
        """Set ``leaves[index] = value`` (float64, >= 0) and refresh the touched blocks.

        ``index`` must hold valid leaf indices in ``[0, capacity)`` (the sampler checks
        them); with duplicate indices one of the values wins and the sums stay
        consistent with the leaves.
        """
        if index.dtype != torch.int64:
            index = index.long()
        self._sums[0].scatter_(0, index, value)
        self._mins[0].scatter_(0, index, value)
        block = index
        for level in range(self.depth):
            block = torch.div(block, self.fanout, rounding_mode="floor")
            sums = self._sum_blocks[level].index_select(0, block).sum(1)
            self._sums[level + 1].scatter_(0, block, sums)
            mins = self._min_blocks[level].index_select(0, block).amin(1)
            self._mins[level + 1].scatter_(0, block, mins)
        if self.tracker is not None:
            self.tracker.mark(index)

    def sample(self, u: torch.Tensor) -> torch.Tensor:
        """Leaves for uniform draws ``u`` in ``[0, 1)``: leaf ``i`` w.p. ``p_i / sum(p)``.

        ``u`` should be float64 on the tree's device (it is converted otherwise).
        """
        if u.dtype != torch.float64 or u.device != self.device:
            u = u.to(self.device, torch.float64)
        torch.cumsum(self._top, 0, out=self._cum_incl)
        target = u * self._cum_total
        node = torch.searchsorted(self._cum_incl, target, right=True)
        node.clamp_(max=self._top.numel() - 1)
        if not self.depth:
            return node
        target -= self._cum.index_select(0, node)  # mass left inside the chosen block
        for level in range(self.depth - 1, -1, -1):
            sums = self._sum_blocks[level].index_select(0, node)  # [B, F]
            cum = sums.cumsum(1)
            child = torch.searchsorted(cum, target.unsqueeze(1), right=True)
            child.clamp_(max=self.fanout - 1)
            if level:  # subtract the mass of the block's children before ``child``
                target -= cum.gather(1, child).sub_(sums.gather(1, child)).squeeze(1)
            node = torch.add(child.squeeze(1), node, alpha=self.fanout)
        return node

    def sample_weighted(self, u: torch.Tensor, beta: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Leaves for draws ``u`` (see :meth:`sample`) and their importance weights
        ``(p_i / p_min) ** -beta``, float32."""
        index = self.sample(u)
        weight = torch.empty(index.shape, dtype=torch.float32, device=self.device)
        torch.pow(self[index].div_(self.min_tensor()), -beta, out=weight)  # straight into float32
        return index, weight

    def set_priorities(
        self, index: torch.Tensor, priority: torch.Tensor, eps: float, alpha: float,
        check_index: bool = True,
    ) -> tuple[int, float]:  # fmt: skip
        """Check, then set ``leaves[index] = (priority + eps) ** alpha``.

        Returns:
            ``(status, largest priority)``: status 0 when written; ``BAD_PRIORITY`` (a
            priority is negative, NaN or infinite), ``BAD_INDEX`` (an index is outside
            ``[0, capacity)``) or ``UNWRITTEN`` (an index names a leaf not written since
            the last :meth:`clear` or load), with nothing written. Indices are checked
            when ``check_index``.
        """
        lo, high = (float(v) for v in torch.aminmax(priority))
        if not (lo >= 0 and high < math.inf):  # NaN fails both comparisons
            return BAD_PRIORITY, high
        if check_index:
            ilo, ihi = (int(v) for v in torch.aminmax(index))
            if ilo < 0 or ihi >= self.capacity:
                return BAD_INDEX, high
            if not bool(self.written(index).all()):
                return UNWRITTEN, high
        q = torch.empty(index.shape, dtype=torch.float64, device=self.device)
        self.update(index, torch.add(priority, eps, out=q).pow_(alpha))
        return 0, high

    def state_dict(self) -> dict:
        """The leaves (and which were written, as ``+inf`` min leaves), without padding.

        The state does not depend on the fanout or top size, so a tree of another
        layout (e.g. :class:`~rl_replay.NumbaPriorityTree`) loads it.
        """
        return {
            "leaves": self._sums[0][: self.capacity].cpu(),
            "min_leaves": self._mins[0][: self.capacity].cpu(),
            "capacity": self.capacity,
        }

    def load_state_dict(self, state: dict) -> None:
        """Restore :meth:`state_dict` (sums and minima are rebuilt exactly).

        Raises:
            ValueError: the state has a different number of leaves.
        """
        leaves = state["leaves"].to(self.device, torch.float64)
        n = leaves.numel()
        if n < self.capacity or int(state.get("capacity", n)) != self.capacity:
            raise ValueError(
                f"state: expected the leaves of a tree of capacity {self.capacity}, got "
                f"{n} leaves of a tree of capacity {state.get('capacity')}"
            )
        mins = state.get("min_leaves")
        mins = torch.where(leaves > 0, leaves, torch.inf) if mins is None else mins
        if self.tracker is not None:
            self.tracker.forget()  # every leaf changed
        self._rebuild(
            _padded(leaves[: self.capacity], self._padded, 0.0),
            _padded(mins.to(leaves)[: self.capacity], self._padded, torch.inf),
        )


def _padded(t: torch.Tensor, size: int, value: float) -> torch.Tensor:
    """``t`` followed by ``value`` up to ``size`` elements."""
    return torch.cat([t, t.new_full((size - t.numel(),), value)])
