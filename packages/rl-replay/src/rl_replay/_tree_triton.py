"""The priority tree with Triton kernels for the batched update and descent (CUDA).

:class:`TritonPriorityTree` keeps :class:`~rl_replay._tree.PriorityTree`'s layout and
state, and replaces its two batched paths by kernels from
:mod:`rl_replay._tree_kernels`:

* **update**: the leaves are scattered by two torch ``scatter_`` calls, then one kernel
  launch per level recomputes the touched parents (sum and min of their ``F`` children);
* **sample**: one torch ``cumsum`` of the top level, then one kernel launch does the
  whole descent (binary search in the top prefix sums, then per level a running sum of
  the chosen node's children) for every draw.

:func:`~rl_replay._tree_choice.make_priority_tree` picks it when the tree lives on a CUDA
device and triton is installed (the ``[cuda]`` extra); with ``TRITON_INTERPRET=1`` it also
runs on the CPU through Triton's interpreter, which is how it is tested against the torch
tree.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import torch

from rl_replay._tree import PriorityTree
from rl_replay._tree_kernels import kernels

__all__ = ["TritonPriorityTree", "triton_tree_available"]

BLOCK = 64
"""Draws (or updated indices) per program."""


def _interpreting() -> bool:
    import triton

    return bool(triton.knobs.runtime.interpret)


def triton_tree_available(device: Any) -> bool:
    """Whether :class:`TritonPriorityTree` can run on ``device``.

    True when triton is installed and ``device`` is a CUDA device, or when triton's
    interpreter is on (``TRITON_INTERPRET=1``, any device).
    """
    if importlib.util.find_spec("triton") is None:
        return False
    return torch.device(device).type == "cuda" or _interpreting()


class TritonPriorityTree(PriorityTree):
    """A :class:`PriorityTree` whose ``update`` and ``sample`` are Triton kernels.

    Same arguments, state and results as :class:`PriorityTree` (up to float rounding in
    the sums). Needs triton and a CUDA device, or ``TRITON_INTERPRET=1`` (slow; tests).

    Raises:
        RuntimeError: triton is missing, or the device is not CUDA and the interpreter
            is off.

    Examples:
        >>> import torch
        >>> from rl_replay import TritonPriorityTree, triton_tree_available
        >>> device = "cuda" if torch.cuda.is_available() else "cpu"
        >>> if triton_tree_available(device):
        ...     tree = TritonPriorityTree(8, device=device)
        ...     tree.update(torch.tensor([1, 3], device=device),
        ...                 torch.tensor([1.0, 3.0], dtype=torch.float64, device=device))
        ...     assert tree.total() == 4.0
    """

    def __init__(self, capacity: int, **kwargs: Any) -> None:
        super().__init__(capacity, **kwargs)
        if not triton_tree_available(self.device):
            raise RuntimeError(
                f"device: TritonPriorityTree needs triton and a CUDA device (or "
                f"TRITON_INTERPRET=1), got {self.device} (triton installed: "
                f"{importlib.util.find_spec('triton') is not None}); use PriorityTree"
            )
        self._fanout_p2 = 1 << (self.fanout - 1).bit_length()
        self._search_steps = max(1, math.ceil(math.log2(self._top.numel() + 1)))

    def _rebuild(self, leaves: torch.Tensor, mins: torch.Tensor | None = None) -> None:
        super()._rebuild(leaves, mins)
        self._offsets = torch.tensor(self.level_offsets, dtype=torch.int64, device=self.device)

    def update(self, index: torch.Tensor, value: torch.Tensor) -> None:
        """Set ``leaves[index] = value``; one kernel launch per level above the leaves."""
        if index.dtype != torch.int64:
            index = index.long()
        self._sums[0].scatter_(0, index, value)
        self._mins[0].scatter_(0, index, value)
        if self.tracker is not None:
            self.tracker.mark(index)
        n = index.numel()
        if not self.depth or not n:
            return
        kern = kernels(_interpreting())
        index = index.contiguous()
        grid = (-(-n // BLOCK),)
        for level in range(self.depth):
            kern.refresh[grid](
                self._sum_buf, self._min_buf, index, n,
                self.level_offsets[level], self.level_offsets[level + 1],
                self.fanout ** (level + 1),
                FANOUT=self.fanout, FANOUT_P2=self._fanout_p2, BLOCK=BLOCK,
            )  # fmt: skip

    def sample(self, u: torch.Tensor) -> torch.Tensor:
        """Leaves for draws ``u`` in ``[0, 1)``: one ``cumsum``, one kernel launch."""
        u = u.to(self.device, torch.float64).contiguous()
        torch.cumsum(self._top, 0, out=self._cum_incl)
        out = torch.empty(u.shape, dtype=torch.int64, device=self.device)
        n = u.numel()
        if not n:
            return out
        kernels(_interpreting()).descend[(-(-n // BLOCK),)](
            self._sum_buf, self._offsets, self._cum, u, out, n, self._top.numel(),
            DEPTH=self.depth, SEARCH_STEPS=self._search_steps,
            FANOUT=self.fanout, FANOUT_P2=self._fanout_p2, BLOCK=BLOCK,
        )  # fmt: skip
        return out
