"""Uniform samplers: with replacement, and epoch-wise without replacement.

A sampler returns ``(index, info)``: flat storage indices and a dict of extra per-sample
tensors (e.g. importance weights) that a TensorDict buffer writes into the sample.
"""

from __future__ import annotations

import torch

from rl_replay._storage import Storage
from rl_replay.exceptions import EmptyBufferError

__all__ = ["RandomSampler", "Sampler", "SamplerWithoutReplacement"]


_EMPTY = "sample: the buffer is empty; extend it before sampling"


def _require_data(storage: Storage) -> int:
    n = len(storage)
    if n == 0:
        raise EmptyBufferError(_EMPTY)
    return n


def _require_count(storage: Storage) -> torch.Tensor:
    """The compilable form of :func:`_require_data`: a traceable check, no host sync.

    An empty buffer fails ``torch._assert_async`` (a ``RuntimeError`` on the CPU, a
    device-side assertion on CUDA); a storage never written raises ``IndexError`` when
    the rows are gathered.
    """
    n = storage.count()
    torch._assert_async(n > 0, _EMPTY)
    return n


def _uniform_ranks(
    n: torch.Tensor, batch_size: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """``batch_size`` ranks uniform in ``[0, n)`` for a tensor ``n``, with no host sync.

    ``randint(2**62) % n``: the modulo bias is below ``n / 2**62``.
    """
    draws = torch.randint(2**62, (batch_size,), device=n.device, generator=generator)
    return draws % n


class Sampler:
    """Base class of samplers.

    ``ran_out`` is ``True`` after a sample that ended an epoch (iteration stops there).
    """

    ran_out: bool = False
    compilable: bool = False

    def _make_compilable(self) -> None:
        """Switch to the traceable mode (``compilable=True``); base samplers cannot."""
        raise ValueError(
            f"sampler: expected a RandomSampler or PrioritizedSampler for a compilable "
            f"buffer, got {type(self).__name__}, which torch.compile cannot trace"
        )

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict]:
        """Draw ``batch_size`` flat indices from ``storage``."""
        raise NotImplementedError

    def extend(self, index: torch.Tensor) -> None:
        """Hook: rows were written at flat ``index``."""

    def empty(self) -> None:
        """Hook: the buffer was emptied."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore the sampler's state (nothing by default)."""


class RandomSampler(Sampler):
    """Uniform sampling with replacement over the stored rows.

    Ranks are drawn up to ``POOL`` batches at a time (one ``randint`` of ``[k, B]``, handed
    out one row per ``sample``): a ``randint`` costs microseconds of dispatch whatever its
    size. The pool is dropped when the number of stored rows or the batch size changes;
    ``k`` doubles each time a pool is used up and falls back to 1 when one is dropped
    unused (a buffer still filling up). The pool is part of the state, so a restored buffer
    draws what the original would have (the pool belongs to the generator of the buffer that
    samples).
    In a compilable buffer the ranks are drawn on the storage's device, from
    ``randint(2**62) % len(storage)`` with the length a tensor (no host sync).

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage, RandomSampler, ReplayBuffer
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=RandomSampler())
        >>> _ = rb.extend(torch.arange(10))
        >>> rb.sample(4).shape
        torch.Size([4])
    """

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict]:
        if self.compilable:
            rank = _uniform_ranks(_require_count(storage), batch_size, generator)
            return storage.valid_flat(rank), {}
        n = _require_data(storage)
        if not self._pool or self._pool_key != (n, batch_size):
            # a pool dropped unused means the buffer grows between samples: draw one batch
            size = 1 if self._pool else min(2 * self._pool_size, self.POOL)
            ranks = torch.randint(n, (size, batch_size), generator=generator)
            self._pool, self._pool_key, self._pool_size = (
                list(ranks.unbind(0)), (n, batch_size), size
            )
        return storage.valid_flat(self._pool.pop()), {}

    POOL = 16
    """Batches of ranks drawn by one ``randint``."""

    def __init__(self) -> None:
        self.empty()

    def empty(self) -> None:
        self._pool: list[torch.Tensor] = []
        self._pool_key: tuple[int, int] | None = None
        self._pool_size = 1

    def state_dict(self) -> dict:
        return {"pool": list(self._pool), "pool_key": self._pool_key, "pool_size": self._pool_size}

    def load_state_dict(self, state: dict) -> None:
        # drawn from the buffer's generator, whose state is restored with it
        self._pool, self._pool_key = list(state.get("pool", [])), state.get("pool_key")
        self._pool_size = int(state.get("pool_size", 1))

    def _make_compilable(self) -> None:
        self.compilable = True


class SamplerWithoutReplacement(Sampler):
    """Each stored row once per epoch (a permutation, or in order with ``shuffle=False``).

    A new epoch starts when the current one is used up, or when the number of stored
    rows changed since it started.

    Not available in a compilable buffer: the size of an epoch's last batch and the start
    of a new epoch depend on the row count, which traced code holds as a tensor.

    Args:
        drop_last: drop the last, incomplete batch of an epoch (else return it smaller).
        shuffle: draw a random permutation per epoch (else storage order).

    Raises:
        EmptyBufferError: (from ``sample``) the buffer is empty, or ``batch_size`` exceeds
            the rows stored.

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage, ReplayBuffer, SamplerWithoutReplacement
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(6),
        ...                   sampler=SamplerWithoutReplacement(), batch_size=3)
        >>> _ = rb.extend(torch.arange(6))
        >>> sorted(torch.cat(list(rb)).tolist())
        [0, 1, 2, 3, 4, 5]
    """

    def __init__(self, drop_last: bool = False, shuffle: bool = True) -> None:
        self.drop_last, self.shuffle = bool(drop_last), bool(shuffle)
        self._order: torch.Tensor | None = None
        self._pos = 0
        self._len = -1
        self.ran_out = False

    def _new_epoch(self, n: int, generator: torch.Generator | None) -> None:
        self._order = torch.randperm(n, generator=generator) if self.shuffle else torch.arange(n)
        self._pos, self._len = 0, n

    def sample(
        self, storage: Storage, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[torch.Tensor, dict]:
        n = _require_data(storage)
        if batch_size > n:
            raise EmptyBufferError(
                f"batch_size: expected at most the {n} stored rows when sampling without "
                f"replacement, got {batch_size}"
            )
        if (
            self._order is None
            or n != self._len
            or self._pos >= n
            or (self.drop_last and n - self._pos < batch_size)
        ):
            self._new_epoch(n, generator)
        rank = self._order[self._pos : self._pos + batch_size]
        self._pos += len(rank)
        left = n - self._pos
        self.ran_out = left == 0 or (self.drop_last and left < batch_size)
        return storage.valid_flat(rank), {}

    def empty(self) -> None:
        self._order, self._pos, self._len, self.ran_out = None, 0, -1, False

    def state_dict(self) -> dict:
        return {"order": self._order, "pos": self._pos, "len": self._len}

    def load_state_dict(self, state: dict) -> None:
        self._order, self._pos, self._len = state["order"], int(state["pos"]), int(state["len"])
