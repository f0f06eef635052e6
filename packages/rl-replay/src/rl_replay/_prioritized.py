"""Prioritized experience replay (Schaul et al., 2016, arXiv:1511.05952).

Row ``i`` with priority ``p_i`` is stored as ``q_i = (p_i + eps) ** alpha`` in a
:class:`~rl_replay._tree.PriorityTree` and drawn with probability ``q_i / sum(q)``. The
importance weight of a drawn row is ``w_i = (q_i / q_min) ** -beta``, where ``q_min`` is the
smallest stored ``q``: weights are normalised so that the largest is 1.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from rl_replay._keys import PRIORITY_WEIGHT
from rl_replay._samplers import Sampler, _require_count, _require_data
from rl_replay._snapshot import WriteTracker
from rl_replay._storage import Storage
from rl_replay._tree import PriorityTree
from rl_replay._tree_choice import make_priority_tree
from rl_replay.exceptions import InvalidPriorityError

__all__ = ["PrioritizedSampler"]


class PrioritizedSampler(Sampler):
    """Sample rows proportionally to ``(priority + eps) ** alpha``.

    New rows get the largest priority seen so far (1.0 at first), so each is likely to be
    replayed once before its priority is known. The info dict of a sample holds
    ``"priority_weight"``, the importance weights ``(q_i / q_min) ** -beta``.

    In a compilable buffer (``ReplayBuffer(compilable=True)``) the tree is always the
    torch :class:`~rl_replay.PriorityTree`, the largest priority is a tensor, and
    priorities and indices are checked with ``torch._assert_async`` (see
    ``docs/replay.md``), so ``sample`` and ``update_priority`` trace with no host sync.

    Args:
        max_capacity: number of rows the tree covers (the storage's capacity).
        alpha: priority exponent (0: uniform; 1: fully proportional).
        beta: importance-sampling exponent (0: no correction; 1: full correction).
        eps: added to every priority so that no row has probability zero.
        device: where the tree lives (the storage's device by default, chosen at the
            first write).

    Raises:
        ValueError: an argument is out of range.

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage, PrioritizedSampler, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(8),
        ...                   sampler=PrioritizedSampler(8, alpha=1.0, beta=1.0))
        >>> _ = rb.extend(torch.arange(8))
        >>> rb.update_priority(torch.arange(8), torch.tensor([0., 0, 0, 0, 0, 0, 0, 1e3]))
        >>> data, info = rb.sample(16, return_info=True)
        >>> bool((data == 7).float().mean() > 0.9), info["priority_weight"].shape
        (True, torch.Size([16]))
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        *,
        device: Any = None,
    ) -> None:
        if isinstance(max_capacity, bool) or not isinstance(max_capacity, int) or max_capacity <= 0:
            raise ValueError(f"max_capacity: expected a positive int, got {max_capacity!r}")
        if not (alpha >= 0 and math.isfinite(alpha)):
            raise ValueError(f"alpha: expected a finite float >= 0, got {alpha!r}")
        if not (beta >= 0 and math.isfinite(beta)):
            raise ValueError(f"beta: expected a finite float >= 0, got {beta!r}")
        if not (eps >= 0 and math.isfinite(eps)):
            raise ValueError(f"eps: expected a finite float >= 0, got {eps!r}")
        self.max_capacity, self.alpha, self.beta, self.eps = max_capacity, alpha, beta, eps
        self._device = device
        self._tree: PriorityTree | None = None
        self._max_priority = 1.0
        self._trusted: tuple[torch.Tensor | None, int] = (None, 0)
        self._storage: Storage | None = None  # for the row count in error messages
        self._draws: list[torch.Tensor] = []  # uniform draws of the next samples

    POOL = 16
    """Batches of uniform draws made by one ``torch.rand`` (a call costs microseconds of
    dispatch whatever its size); the pool is dropped when the batch size changes."""

    def _make_compilable(self) -> None:
        self.compilable = True
        if self._tree is not None:
            self._tree.tracker = None
        if self._tree is not None and type(self._tree) is not PriorityTree:
            state = self._tree.state_dict()
            self._tree = None
            self.tree.load_state_dict(state)

    @property
    def tree(self) -> PriorityTree:
        """The priority tree (created at the first write).

        A :class:`~rl_replay.TritonPriorityTree` on a CUDA device when triton is
        installed (the ``[cuda]`` extra), else the torch :class:`~rl_replay.PriorityTree`;
        always the torch tree in a compilable buffer.
        """
        if self._tree is None:
            kind = "torch" if self.compilable else None  # numba cannot be traced
            device = self._device or "cpu"
            self._tree = make_priority_tree(self.max_capacity, device=device, kind=kind)
            if not self.compilable:  # which leaves a checkpoint writes again (traced: all)
                self._tree.tracker = WriteTracker(self.max_capacity, 1, device=device)
        return self._tree

    def attach(self, storage: Storage) -> None:
        """Check the capacity against ``storage`` and take its device.

        A compilable sampler builds its tree and its tensor state here, not at the
        first (possibly traced) write.
        """
        if self._device is None:
            self._device = getattr(storage, "device", "cpu")
        self._storage = storage
        if self.compilable:
            tree = self.tree
            self._max_priority = torch.tensor(
                float(self._max_priority), dtype=torch.float64, device=tree.device
            )

    def extend(self, index: torch.Tensor) -> None:
        if len(index) == 0:
            return
        if self.compilable:
            self._extend_traceable(index)
            return
        if int(index.max()) >= self.max_capacity:
            raise InvalidPriorityError(
                f"index: expected flat indices below max_capacity={self.max_capacity}, "
                f"got {int(index.max())}; give PrioritizedSampler the storage's capacity"
            )
        tree = self.tree
        value = torch.full((len(index),), self._q(self._max_priority), dtype=torch.float64)
        tree.update(index.to(tree.device), value.to(tree.device))

    def _extend_traceable(self, index: torch.Tensor) -> None:
        tree = self.tree
        index = index.to(tree.device)
        torch._assert_async(
            index.max() < self.max_capacity,
            f"index: expected flat indices below max_capacity={self.max_capacity}; "
            "give PrioritizedSampler the storage's capacity",
        )
        value = ((self._max_priority + self.eps) ** self.alpha).expand(index.shape)
        tree.update(index, value)

    def _q(self, p: float) -> float:
        return (p + self.eps) ** self.alpha

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict]:
        if self.compilable:
            return self._sample_traceable(storage, batch_size, generator)
        _require_data(storage)
        tree = self.tree
        draws = self._draws
        if not draws or draws[-1].shape[0] != batch_size:
            draws = torch.rand((self.POOL, batch_size), dtype=torch.float64, generator=generator)
            self._draws = draws = list(draws.unbind(0))
        # weights (q_i / q_min) ** -beta
        index, weight = tree.sample_weighted(draws.pop(), self.beta)
        self._trusted = (index, index._version)
        return index, {PRIORITY_WEIGHT: weight}

    def _sample_traceable(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, dict]:
        _require_count(storage)
        tree = self.tree
        u = torch.rand(batch_size, dtype=torch.float64, device=tree.device, generator=generator)
        index = tree.sample(u)
        weight = torch.pow(tree[index] / tree.min_tensor(), -self.beta).to(torch.float32)
        return index, {PRIORITY_WEIGHT: weight}

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor | float) -> None:
        """Set the priorities of rows ``index`` (validated before anything changes).

        All or nothing: if one index or priority is bad, no priority changes.

        Raises:
            InvalidPriorityError: a priority is negative, NaN or infinite, the shapes do
                not match, an index is outside ``[0, max_capacity)``, or an index holds
                no data (never written, dropped by ``empty()``, or not in the state a
                ``load_state_dict``/``loads`` restored).
        """
        tree = self.tree
        index, priority = _as_flat(index, tree.device), _as_flat(priority, tree.device)
        if not priority.is_floating_point():
            priority = priority.double()
        if priority.numel() == 1 and index.numel() != 1:
            priority = priority.reshape(1).expand(index.numel())
        if priority.shape != index.shape:
            raise InvalidPriorityError(
                f"priority: expected {index.numel()} values (one per index) or one, "
                f"got shape {tuple(priority.shape)}"
            )
        if index.numel() == 0:
            return
        if index.is_floating_point() or index.dtype == torch.bool:
            raise InvalidPriorityError(f"index: expected an integer tensor, got {index.dtype}")
        if self.compilable:
            self._update_traceable(index, priority)
            return
        check_index = not self._is_trusted(index)
        status, hi = tree.set_priorities(index, priority, self.eps, self.alpha, check_index)
        if status:  # nothing was written: say what was wrong
            self._check_priority(priority)
            self._check_index(index)
        self._max_priority = max(self._max_priority, hi)

    def _update_traceable(self, index: torch.Tensor, priority: torch.Tensor) -> None:
        """``update_priority`` with device-side checks: no host sync, no branch on data."""
        lo, hi = torch.aminmax(priority)
        ilo, ihi = torch.aminmax(index)
        torch._assert_async(
            (lo >= 0) & (hi < math.inf),  # NaN fails both comparisons
            "priority: expected finite values >= 0 (got a negative, NaN or infinite one)",
        )
        torch._assert_async(
            (ilo >= 0) & (ihi < self.max_capacity),
            f"index: expected values in [0, {self.max_capacity})",
        )
        torch._assert_async(
            self.tree.written(index).all(),
            "index: expected rows that hold data (an index was never written, dropped by "
            "empty(), or is not in the restored state)",
        )
        q = (priority.to(torch.float64) + self.eps).pow_(self.alpha)
        self.tree.update(index, q)
        self._max_priority.copy_(torch.maximum(self._max_priority, hi.to(torch.float64)))

    @staticmethod
    def _check_priority(priority: torch.Tensor) -> None:
        """Raise if a priority is negative, NaN or infinite."""
        lo, hi = (float(v) for v in torch.aminmax(priority))
        if not (lo >= 0 and hi < math.inf):  # NaN fails both comparisons
            raise InvalidPriorityError(
                f"priority: expected finite values >= 0, got min {lo}, max {hi} "
                f"(NaN present: {bool(priority.isnan().any())})"
            )

    def _is_trusted(self, index: torch.Tensor) -> bool:
        """Whether ``index`` is (a flat view of) the last sample's, unmodified.

        Indices this sampler drew are in range by construction, so their check is
        skipped; ``_trusted`` holds that tensor (its memory cannot be reused) and its
        version counter, which any in-place write to it or a view of it increments.
        """
        trusted, version = self._trusted
        if index is trusted:  # the sample's own tensor (e.g. from ``td["index"]``)
            return index._version == version
        return (
            trusted is not None
            and index.data_ptr() == trusted.data_ptr()
            and index.shape == trusted.shape
            and index.stride() == trusted.stride()
            and index.dtype == trusted.dtype
            and index.device == trusted.device
            and index._version == version
        )

    def _check_index(self, index: torch.Tensor) -> None:
        ilo, ihi = (int(v) for v in torch.aminmax(index))
        if ilo < 0 or ihi >= self.max_capacity:
            raise InvalidPriorityError(
                f"index: expected values in [0, {self.max_capacity}), got [{ilo}, {ihi}]"
            )
        empty = ~self.tree.written(index)
        if bool(empty.any()):
            rows = "?" if self._storage is None else len(self._storage)
            raise InvalidPriorityError(
                f"index: expected rows that hold data, got index {int(index[empty][0])} "
                f"({int(empty.sum())} of {index.numel()} indices hold no data: never "
                f"written, dropped by empty(), or not in the state restored by loads); "
                f"the buffer holds {rows} rows; no priority was changed"
            )

    def empty(self) -> None:
        if self._tree is not None:
            self._tree.clear()
        self._set_max_priority(1.0)
        self._trusted = (None, 0)  # the last sample's rows hold no data any more

    def _set_max_priority(self, value: float) -> None:
        if self.compilable and isinstance(self._max_priority, torch.Tensor):
            self._max_priority.fill_(value)
        else:
            self._max_priority = value

    def state_dict(self) -> dict:
        return {
            "tree": None if self._tree is None else self._tree.state_dict(),
            "max_priority": float(self._max_priority),
            "draws": list(self._draws),
        }

    def load_state_dict(self, state: dict) -> None:
        # the draws come from the buffer's generator, whose state is restored with it
        self._draws = list(state.get("draws", []))
        self._trusted = (None, 0)  # the last sample's rows may hold no data in this state
        self._set_max_priority(float(state["max_priority"]))
        if state["tree"] is None:
            self._tree = None
        else:
            self.tree.load_state_dict(state["tree"])


def _as_flat(value: Any, device: torch.device) -> torch.Tensor:
    """``value`` as a 1-d tensor on ``device`` (no op for one already there)."""
    if not isinstance(value, torch.Tensor) or value.device != device:
        value = torch.as_tensor(value, device=device)
    return value if value.dim() == 1 else value.reshape(-1)
