"""Slices of trajectories: contiguous sub-sequences that never cross an episode boundary.

Episode boundaries come from a trajectory-id key (a change of id ends an episode) or
from an end key (``True`` on an episode's last step). The write seam of a full circular
buffer (newest row next to the oldest) and the end of each env's row of an ``ndim=2``
storage are boundaries too. The episode segments are computed once per write and
cached, so repeated ``sample()`` calls between writes cost a few small tensor ops.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rl_replay._keys import DONE, IS_INIT, TRUNCATED
from rl_replay._samplers import Sampler, _require_data
from rl_replay._storage import Storage
from rl_replay.exceptions import EmptyBufferError

__all__ = ["SliceSampler"]

_SLICE_END = "_slice_end"


class SliceSampler(Sampler):
    """Sample ``num_slices`` slices of ``slice_len`` consecutive steps of one episode.

    The batch is flat, ``[num_slices * slice_len]`` (reshape it to
    ``[num_slices, slice_len]``), slice by slice. In a TensorDict sample, ``"is_init"`` is
    set on the first step of each slice (so a recurrent module resets its state there),
    and where the data holds ``("next", "truncated")`` it is set on each slice's last
    step, with ``("next", "done")``, so that value targets do not bootstrap across slices.

    Give exactly one of ``num_slices`` and ``slice_len``; the other is
    ``batch_size // given``. Episodes are chosen uniformly among those long enough, then a
    start uniformly within the episode.

    Args:
        num_slices: slices per batch.
        slice_len: steps per slice.
        traj_key: key of trajectory ids (e.g. ``("collector", "traj_ids")``).
        end_key: key marking episode ends; ``("next", "done")`` when neither key is given.
        strict_length: only sample episodes of at least ``slice_len`` steps; if
            ``False``, shorter episodes give shorter slices and a smaller batch.
        cache_values: TorchRL's switch for caching episode boundaries between writes;
            accepted, and a no-op here: boundaries are always cached and recomputed after
            each write, TorchRL's ``cache_values=True`` behaviour.

    Raises:
        ValueError: both or neither of ``num_slices``/``slice_len``, or both keys.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import LazyTensorStorage, SliceSampler, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100),
        ...     sampler=SliceSampler(slice_len=4, traj_key="traj"), batch_size=8)
        >>> traj = torch.arange(40) // 10  # four episodes of 10 steps
        >>> _ = rb.extend(TensorDict({"traj": traj, "t": torch.arange(40)}, [40]))
        >>> s = rb.sample().reshape(2, 4)
        >>> bool((s["traj"] == s["traj"][:, :1]).all()), s["is_init"][:, 0].all().item()
        (True, True)
    """

    def __init__(
        self,
        *,
        num_slices: int | None = None,
        slice_len: int | None = None,
        traj_key: Any = None,
        end_key: Any = None,
        strict_length: bool = True,
        cache_values: bool = False,
    ) -> None:
        if (num_slices is None) == (slice_len is None):
            raise ValueError(
                f"num_slices, slice_len: expected exactly one, got num_slices={num_slices!r}, "
                f"slice_len={slice_len!r}"
            )
        for name, v in (("num_slices", num_slices), ("slice_len", slice_len)):
            if v is not None and (not isinstance(v, int) or v <= 0):
                raise ValueError(f"{name}: expected a positive int, got {v!r}")
        if traj_key is not None and end_key is not None:
            raise ValueError("traj_key, end_key: expected at most one, got both")
        self.num_slices, self.slice_len = num_slices, slice_len
        self.traj_key = traj_key
        self.end_key = end_key if (end_key is not None or traj_key is not None) else DONE
        self.strict_length = bool(strict_length)
        self.cache_values = bool(cache_values)
        self._version = 0
        self._seam = -1
        self._cache: tuple | None = None

    def extend(self, index: torch.Tensor) -> None:
        self._version += 1
        if len(index):
            self._seam = int(index[-1])

    def empty(self) -> None:
        self._version += 1
        self._seam, self._cache = -1, None

    def _ends(self, storage: Storage) -> torch.Tensor:
        """``[rows, filled]`` bool: True on the last step of each segment."""
        rows, filled = storage._width, storage._filled
        key = self.traj_key if self.traj_key is not None else self.end_key
        leaf = storage.leaf(key)
        if leaf[(0,) * storage.ndim].numel() != 1:
            raise ValueError(
                f"{key!r}: expected one value per stored step, got per-row shape "
                f"{list(leaf.shape[storage.ndim :])}; extend with data.reshape(-1), or use "
                "an ndim=2 storage for [num_envs, T] batches"
            )
        values = leaf.reshape(rows, storage.extend_capacity)[:, :filled]
        if self.traj_key is not None:
            ends = torch.ones(rows, filled, dtype=torch.bool, device=values.device)
            ends[:, :-1] = values[:, 1:] != values[:, :-1]
        else:
            ends = values.to(torch.bool).clone()
            ends[:, -1] = True
        if self._seam >= 0:
            ends[:, self._seam % storage.extend_capacity] = True
        return ends.cpu()

    def _segments(self, storage: Storage) -> tuple[torch.Tensor, torch.Tensor]:
        if self._cache is None or self._cache[0] != self._version:
            last = self._ends(storage).reshape(-1).nonzero().squeeze(1)
            first = torch.cat([last.new_zeros(1), last[:-1] + 1])
            self._cache = (self._version, first, last - first + 1)
        return self._cache[1], self._cache[2]

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict]:
        _require_data(storage)
        length = self.slice_len or batch_size // self.num_slices
        count = self.num_slices or batch_size // self.slice_len
        if length * count != batch_size:
            given = "slice_len" if self.slice_len else "num_slices"
            raise ValueError(
                f"batch_size: expected a multiple of {given}={self.slice_len or self.num_slices}, "
                f"got {batch_size}"
            )
        first, seg_len = self._segments(storage)
        eligible = (seg_len >= length).nonzero().squeeze(1) if self.strict_length else None
        n = len(first) if eligible is None else len(eligible)
        if n == 0:
            raise EmptyBufferError(
                f"sample: no stored episode has at least slice_len={length} steps "
                "(pass strict_length=False to allow shorter slices)"
            )
        pick = self._pick(n, count, generator)
        seg = pick if eligible is None else eligible[pick]
        seg_first, seg_n = first[seg], seg_len[seg]
        span = (seg_n - length).clamp_(min=0) + 1
        start = seg_first + (torch.rand(count, generator=generator) * span).long()
        steps = torch.arange(length)
        compact = start.unsqueeze(1) + steps
        keep = steps < seg_n.clamp(max=length).unsqueeze(1)
        is_first = (steps == 0).expand(count, length)
        is_last = steps == (seg_n.clamp(max=length) - 1).unsqueeze(1)
        if self.strict_length:
            compact, is_first, is_last = (
                compact.reshape(-1),
                is_first.reshape(-1),
                is_last.reshape(-1),
            )
        else:
            compact, is_first, is_last = compact[keep], is_first[keep], is_last[keep]
        return storage.valid_flat(compact), {IS_INIT: is_first, _SLICE_END: is_last}

    def _pick(self, n: int, count: int, generator: torch.Generator | None) -> torch.Tensor:
        """Which of the ``n`` eligible episodes the ``count`` slices come from: uniform,
        with replacement (``SliceSamplerWithoutReplacement`` overrides it)."""
        return torch.randint(n, (count,), generator=generator)

    def annotate(self, sample: TensorDictBase, info: dict) -> None:
        """Mark slice ends in truncated/done; add ``"is_init"`` at slice starts if absent.

        A stored ``"is_init"`` is left as it is: a slice that starts mid-trajectory must
        keep its stored recurrent state, which a recurrent module would zero where
        ``is_init`` is set. Data without ``"is_init"`` gets it on each slice's first step.
        """
        if IS_INIT not in sample.keys(True):
            _or_into(sample, IS_INIT, info[IS_INIT], create=True)
        if TRUNCATED in sample.keys(True):
            _or_into(sample, TRUNCATED, info[_SLICE_END], create=False)
            _or_into(sample, DONE, info[_SLICE_END], create=False)


def _or_into(sample: TensorDictBase, key: Any, mask: torch.Tensor, *, create: bool) -> None:
    mask = mask.to(sample.device) if sample.device is not None else mask
    if key in sample.keys(True):
        old = sample.get(key)
        sample.set(key, old | mask.reshape(mask.shape + (1,) * (old.ndim - 1)))
    elif create:
        sample.set(key, mask.unsqueeze(-1))
