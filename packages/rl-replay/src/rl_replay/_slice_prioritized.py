"""``PrioritizedSliceSampler``: slices whose starts are drawn by priority."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rl_replay._keys import IS_INIT, PRIORITY_WEIGHT
from rl_replay._prioritized import PrioritizedSampler
from rl_replay._samplers import _require_data
from rl_replay._slice import _SLICE_END, SliceSampler
from rl_replay._storage import Storage
from rl_replay.exceptions import EmptyBufferError

__all__ = ["PrioritizedSliceSampler"]


class PrioritizedSliceSampler(SliceSampler):
    """A :class:`SliceSampler` whose slice starts are drawn by priority (TorchRL's
    ``PrioritizedSliceSampler``).

    Each stored step has a priority, kept as ``q_i = (p_i + eps) ** alpha`` as in
    :class:`PrioritizedSampler` (new steps get the largest priority seen so far). A slice
    starts at step ``i`` with probability ``q_i / sum(q)`` over the steps a slice can start
    from (with ``strict_length``: the steps at least ``slice_len - 1`` steps before their
    episode's end). The sample's ``"priority_weight"`` is the importance weight of each
    slice's start, ``(q_i / q_min) ** -beta`` with ``q_min`` the smallest priority of every
    stored step, a possible start or not (TorchRL's rule: its min-tree covers the whole
    storage, so the largest weight is 1 only when that step can start a slice), repeated
    on the slice's steps. ``update_priority(index, priority)`` sets the
    priorities of stored steps (e.g. a slice's TD errors, as TorchRL).

    Args:
        max_capacity: number of rows the priorities cover (the storage's capacity).
        alpha: priority exponent (0: uniform starts).
        beta: importance-sampling exponent.
        eps: added to every priority.
        num_slices: slices per batch.
        slice_len: steps per slice.
        traj_key: key of trajectory ids.
        end_key: key marking episode ends.
        strict_length: only slices of ``slice_len`` steps.
        cache_values: as :class:`SliceSampler`'s (accepted; boundaries are always cached).

    Raises:
        ValueError: as :class:`PrioritizedSampler` and :class:`SliceSampler`.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(40), batch_size=40,
        ...     sampler=PrioritizedSliceSampler(40, alpha=1.0, beta=1.0, slice_len=4,
        ...                                     traj_key="traj"))
        >>> _ = rb.extend(TensorDict({"traj": torch.arange(40) // 10}, [40]))
        >>> rb.update_priority(torch.arange(40), (torch.arange(40) == 23).float() * 1e6)
        >>> s = rb.sample().reshape(10, 4)
        >>> bool((s["traj"][:, 0] == 2).float().mean() > 0.9), s["priority_weight"].shape
        (True, torch.Size([10, 4]))
    """

    def __init__(
        self,
        max_capacity: int,
        alpha: float,
        beta: float,
        eps: float = 1e-8,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key: Any = None,
        end_key: Any = None,
        strict_length: bool = True,
        cache_values: bool = False,
    ) -> None:
        super().__init__(num_slices=num_slices, slice_len=slice_len, traj_key=traj_key,
                         end_key=end_key, strict_length=strict_length,
                         cache_values=cache_values)
        self._priorities = PrioritizedSampler(max_capacity, alpha, beta, eps)
        self.max_capacity, self.alpha, self.beta, self.eps = max_capacity, alpha, beta, eps

    def attach(self, storage: Storage) -> None:
        self._priorities.attach(storage)

    def extend(self, index: torch.Tensor) -> None:
        super().extend(index)
        self._priorities.extend(index)

    def empty(self) -> None:
        super().empty()
        self._priorities.empty()

    def update_priority(self, index: torch.Tensor, priority: torch.Tensor | float) -> None:
        """Set the priorities of stored steps ``index`` (all or nothing, as
        :meth:`PrioritizedSampler.update_priority`)."""
        self._priorities.update_priority(index, priority)

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict]:
        _require_data(storage)
        length, count = self._shape(batch_size)
        first, seg_len = self._segments(storage)
        last = first + seg_len - 1
        # which compact positions may start a slice, and how many steps it then has
        ranks = torch.arange(int(last[-1]) + 1)
        seg_of = torch.repeat_interleave(torch.arange(len(first)), seg_len)
        room = last[seg_of] - ranks + 1
        can_start = room >= length if self.strict_length else torch.ones_like(room, dtype=bool)
        if not bool(can_start.any()):
            raise EmptyBufferError(
                f"sample: no stored episode has at least slice_len={length} steps "
                "(pass strict_length=False to allow shorter slices)"
            )
        tree = self._priorities.tree
        flat = storage.valid_flat(ranks)
        stored = tree[flat.to(tree.device)].to(torch.float64).cpu()
        q = stored * can_start
        start = torch.multinomial(q, count, replacement=True, generator=generator)
        # TorchRL: (P_i / P_min) ** -beta, P_min over every stored step (starts or not)
        weight = (stored[start] / stored.min()).pow(-self.beta).to(torch.float32)
        steps = torch.arange(length)
        n = room[start].clamp(max=length)
        keep = steps < n.unsqueeze(1)
        compact = (start.unsqueeze(1) + steps)[keep]
        info = {
            IS_INIT: (steps == 0).expand(count, length)[keep],
            _SLICE_END: (steps == (n - 1).unsqueeze(1))[keep],
            PRIORITY_WEIGHT: weight.unsqueeze(1).expand(count, length)[keep],
        }
        return storage.valid_flat(compact), info

    def _shape(self, batch_size: int) -> tuple[int, int]:
        length = self.slice_len or batch_size // self.num_slices
        count = self.num_slices or batch_size // self.slice_len
        if length * count != batch_size:
            given = "slice_len" if self.slice_len else "num_slices"
            raise ValueError(
                f"batch_size: expected a multiple of {given}={self.slice_len or self.num_slices}, "
                f"got {batch_size}"
            )
        return length, count

    def annotate(self, sample: TensorDictBase, info: dict) -> None:
        """As :meth:`SliceSampler.annotate`, and ``"priority_weight"`` on each step."""
        super().annotate(sample, info)
        weight = info[PRIORITY_WEIGHT]
        sample.set(PRIORITY_WEIGHT, weight.to(sample.device) if sample.device else weight)

    def state_dict(self) -> dict:
        return {"priorities": self._priorities.state_dict()}

    def load_state_dict(self, state: dict) -> None:
        self._version += 1
        self._priorities.load_state_dict(state["priorities"])
