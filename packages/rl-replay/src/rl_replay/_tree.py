"""A vectorised sum/min priority tree in torch (CPU or GPU, no Python loop over a batch).

The tree has a wide fanout ``F`` (32 by default) and a small top level (at most
``top_size`` = 4096 nodes), so a 100k-slot tree has one level of fanout under its top
and a 1M-slot tree two. Every operation is a handful of large tensor ops:

* **sample**: one ``cumsum`` + ``searchsorted`` over the top level picks a top node for
  every query at once; each level below gathers the ``[B, F]`` children of the chosen
  nodes, takes their running sum and counts the children whose running sum is ``<=`` the
  remaining mass. A query ``u * total`` thus lands on leaf ``i`` with probability
  ``p_i / sum(p)``; zero-priority leaves are never chosen.
* **update**: write the leaves, then recompute each touched parent as the sum (min) of its
  ``F`` children, level by level (``L`` levels: 1 at 100k, 2 at 1M). Recomputing rather
  than adding deltas keeps the tree exact under repeated updates and duplicate indices.

Sums are float64, so round-off stays far below any priority that matters.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["PriorityTree"]


class PriorityTree:
    """Sum and min trees over ``capacity`` non-negative leaves.

    Args:
        capacity: number of leaves.
        fanout: children per node below the top level.
        top_size: largest top level; the top is scanned whole by each ``sample``.
        device: where the tree lives.

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
        self, capacity: int, *, fanout: int = 32, top_size: int = 4096, device: Any = "cpu"
    ) -> None:
        if capacity <= 0:
            raise ValueError(f"capacity: expected a positive int, got {capacity!r}")
        if fanout < 2:
            raise ValueError(f"fanout: expected an int >= 2, got {fanout!r}")
        self.capacity, self.fanout = capacity, fanout
        self.device = torch.device(device)
        depth = 0
        while -(-capacity // fanout**depth) > top_size:
            depth += 1
        self.depth = depth
        self._padded = -(-capacity // fanout**depth) * fanout**depth
        self.clear()

    def clear(self) -> None:
        """Set every leaf to zero."""
        leaves = torch.zeros(self._padded, dtype=torch.float64, device=self.device)
        self._rebuild(leaves)

    def _rebuild(self, leaves: torch.Tensor) -> None:
        # min leaves: +inf where nothing was written, so the min is over written leaves
        mins = torch.where(leaves > 0, leaves, torch.inf)
        self._sum, self._min = [leaves], [mins]
        for _ in range(self.depth):
            self._sum.append(self._sum[-1].view(-1, self.fanout).sum(1))
            self._min.append(self._min[-1].view(-1, self.fanout).amin(1))

    def __getitem__(self, index: torch.Tensor) -> torch.Tensor:
        return torch.index_select(self._sum[0], 0, index)

    @property
    def leaves(self) -> torch.Tensor:
        """The leaf values, ``[capacity]`` (a view)."""
        return self._sum[0][: self.capacity]

    def total(self) -> float:
        """Sum of all leaves."""
        return float(self._sum[-1].sum())

    def min(self) -> float:
        """Smallest leaf written since the last :meth:`clear` (``inf`` if none)."""
        return float(self._min[-1].amin())

    def min_tensor(self) -> torch.Tensor:
        """:meth:`min` as a 0-d tensor on the tree's device (no host sync)."""
        return self._min[-1].amin()

    def update(self, index: torch.Tensor, value: torch.Tensor) -> None:
        """Set ``leaves[index] = value`` (float64, > 0) and refresh the parents.

        With duplicate indices one of the values wins; the sums stay consistent.
        """
        self._sum[0].index_put_((index,), value)
        self._min[0].index_put_((index,), value)
        parent = index
        for level in range(1, self.depth + 1):
            parent = parent // self.fanout
            rows = torch.index_select(self._sum[level - 1].view(-1, self.fanout), 0, parent)
            self._sum[level].index_put_((parent,), rows.sum(1))
            rows = torch.index_select(self._min[level - 1].view(-1, self.fanout), 0, parent)
            self._min[level].index_put_((parent,), rows.amin(1))

    def sample(self, u: torch.Tensor) -> torch.Tensor:
        """Leaves for uniform draws ``u`` in ``[0, 1)``: leaf ``i`` w.p. ``p_i / sum(p)``."""
        top = self._sum[-1]
        cum = top.cumsum(0)
        target = u.to(self.device, torch.float64) * cum[-1]
        node = torch.searchsorted(cum, target, right=True).clamp_(max=top.numel() - 1)
        if self.depth:
            target = target - torch.index_select(cum - top, 0, node)
        for level in range(self.depth - 1, -1, -1):
            children = torch.index_select(self._sum[level].view(-1, self.fanout), 0, node)
            cum = children.cumsum(1)
            k = torch.searchsorted(cum, target.view(-1, 1), right=True).view(-1)
            k = k.clamp_(max=self.fanout - 1)
            if level:
                excl = cum - children
                target = target - excl.gather(1, k.unsqueeze(1)).squeeze(1)
            node = torch.add(k, node, alpha=self.fanout)
        return node

    def state_dict(self) -> dict:
        return {"leaves": self._sum[0].cpu(), "capacity": self.capacity}

    def load_state_dict(self, state: dict) -> None:
        leaves = state["leaves"].to(self.device, torch.float64)
        if leaves.numel() != self._padded:
            raise ValueError(
                f"state['leaves']: expected {self._padded} leaves, got {leaves.numel()}"
            )
        self._rebuild(leaves.clone())
