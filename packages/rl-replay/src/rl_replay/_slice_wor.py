"""``SliceSamplerWithoutReplacement``: slices whose episodes are drawn without replacement."""

from __future__ import annotations

from typing import Any

import torch

from rl_replay._slice import SliceSampler

__all__ = ["SliceSamplerWithoutReplacement"]


class SliceSamplerWithoutReplacement(SliceSampler):
    """A :class:`SliceSampler` that draws each eligible episode once per epoch (TorchRL's
    ``SliceSamplerWithoutReplacement``).

    An epoch is one pass over the stored episodes long enough for a slice, in a random
    order (``shuffle=True``) or in storage order; a batch's slices come from distinct
    episodes. When fewer episodes are left in the epoch than a batch needs, a new epoch
    starts: the leftover episodes are skipped (TorchRL's ``drop_last=True``; its default,
    a shorter last batch, is not offered: batches keep their size). Extending the buffer
    starts a new epoch, as in TorchRL.

    Args:
        num_slices: slices per batch.
        slice_len: steps per slice.
        traj_key: key of trajectory ids.
        end_key: key marking episode ends.
        strict_length: only episodes of at least ``slice_len`` steps.
        cache_values: as :class:`SliceSampler`'s (accepted; boundaries are always cached).
        shuffle: a random order per epoch (else storage order).

    Raises:
        ValueError: as :class:`SliceSampler`; on ``sample``, a batch needs more slices than
            there are eligible episodes.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
        >>> rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=8,
        ...     sampler=SliceSamplerWithoutReplacement(slice_len=4, traj_key="traj"))
        >>> _ = rb.extend(TensorDict({"traj": torch.arange(40) // 10}, [40]))
        >>> seen = torch.cat([rb.sample()["traj"].reshape(2, 4)[:, 0] for _ in range(2)])
        >>> sorted(seen.tolist())
        [0, 1, 2, 3]
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
        shuffle: bool = True,
    ) -> None:
        super().__init__(num_slices=num_slices, slice_len=slice_len, traj_key=traj_key,
                         end_key=end_key, strict_length=strict_length,
                         cache_values=cache_values)
        self.shuffle = bool(shuffle)
        self._order: torch.Tensor | None = None
        self._epoch_of: tuple[int, int] | None = None
        self._pos = 0

    def _new_epoch(self, n: int, generator: torch.Generator | None) -> None:
        self._order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
        self._pos = 0

    def _pick(self, n: int, count: int, generator: torch.Generator | None) -> torch.Tensor:
        if count > n:
            raise ValueError(
                f"num_slices: {count} slices without replacement need as many episodes; the "
                f"storage holds {n} long enough"
            )
        if self._epoch_of != (self._version, n) or self._pos + count > n:
            self._new_epoch(n, generator)
            self._epoch_of = (self._version, n)
        pick = self._order[self._pos : self._pos + count]  # type: ignore[index]
        self._pos += count
        return pick
