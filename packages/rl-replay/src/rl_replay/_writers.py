"""Writers: decide where new rows go in a storage.

``extend(data)`` returns the *flat* indices written, which the buffer hands to the
sampler (a prioritized sampler gives them the current maximum priority).
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rl_replay._storage import Storage
from rl_replay.exceptions import ReplayBufferError, StorageLayoutError

__all__ = ["ImmutableDatasetWriter", "RoundRobinWriter", "TensorDictMaxValueWriter", "Writer"]


class Writer:
    """Base class of writers. Bind a storage with :meth:`register_storage`."""

    compilable: bool = False

    def __init__(self) -> None:
        self._storage: Storage | None = None

    def register_storage(self, storage: Storage) -> None:
        """Attach the storage this writer writes to."""
        self._storage = storage

    def _make_compilable(self) -> None:
        """Switch to the traceable mode (``compilable=True``); base writers cannot."""
        raise ValueError(
            f"writer: expected a RoundRobinWriter or ImmutableDatasetWriter for a "
            f"compilable buffer, got {type(self).__name__}, which torch.compile cannot trace"
        )

    def extend(self, data: Any) -> torch.Tensor:
        """Write a block of rows; return the flat indices written."""
        raise NotImplementedError

    def empty(self) -> None:
        """Reset the cursor."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        """Restore the cursor (nothing by default)."""


class RoundRobinWriter(Writer):
    """Write rows at a cursor that wraps around: the oldest rows are overwritten first.

    A block larger than the capacity keeps only its last ``capacity`` rows.

    Args:
        compilable: keep the cursor in a 0-d tensor on the storage's device, so that
            ``extend`` traces under ``torch.compile`` with no host sync (the indices it
            returns are then on the storage's device).

    Examples:
        >>> import torch
        >>> from rl_replay import LazyTensorStorage, ReplayBuffer, RoundRobinWriter
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(4), writer=RoundRobinWriter())
        >>> rb.extend(torch.arange(6)).tolist()
        [2, 3, 0, 1]
        >>> rb.storage.get(torch.arange(4)).tolist()
        [4, 5, 2, 3]
    """

    def __init__(self, compilable: bool = False) -> None:
        super().__init__()
        self._cursor: int | torch.Tensor = 0
        if compilable:
            self._make_compilable()

    def _make_compilable(self) -> None:
        self.compilable = True
        self._place_cursor()

    def register_storage(self, storage: Storage) -> None:
        super().register_storage(storage)
        self._place_cursor()

    def _place_cursor(self) -> None:
        """The compilable cursor: a 0-d int64 tensor on the storage's device."""
        if self.compilable:
            device = getattr(self._storage, "device", "cpu")
            self._cursor = torch.tensor(int(self._cursor), dtype=torch.int64, device=device)

    def extend(self, data: Any) -> torch.Tensor:
        storage = self._storage
        storage.prepare(data)
        if self.compilable:
            return self._extend_traceable(data)
        n, cap = storage.rows(data), storage.extend_capacity
        start, end = self._cursor, self._cursor + n
        if n > cap:  # only the last `cap` rows survive, where a row-by-row write puts them
            data, start = _tail(data, storage, cap), end - cap
        index = torch.arange(start, end)
        if end > cap:  # the block wraps around the end of the storage
            index %= cap
        storage.set(index, data)
        self._cursor = end % cap
        return storage.flat_index(index)

    def _extend_traceable(self, data: Any) -> torch.Tensor:
        """``extend`` with the cursor a tensor: no host sync, only shapes are static."""
        storage, cursor = self._storage, self._cursor
        n, cap = storage.rows(data), storage.extend_capacity
        skip = max(n - cap, 0)  # rows of a block larger than the storage that are dropped
        if skip:
            data = _tail(data, storage, cap)
        index = (torch.arange(skip, n, device=cursor.device) + cursor) % cap
        storage.set(index, data)
        cursor.copy_((cursor + n) % cap)
        return storage.flat_index(index)

    def empty(self) -> None:
        if self.compilable:
            self._cursor.zero_()
        else:
            self._cursor = 0

    def state_dict(self) -> dict:
        return {"cursor": int(self._cursor)}

    def load_state_dict(self, state: dict) -> None:
        if self.compilable:
            self._cursor.fill_(int(state["cursor"]))
        else:
            self._cursor = int(state["cursor"])


def _tail(data: Any, storage: Storage, n: int) -> Any:
    if isinstance(data, (torch.Tensor, TensorDictBase)):
        return data[..., -n:] if storage.ndim == 2 else data[-n:]
    return list(data)[-n:]


class TensorDictMaxValueWriter(Writer):
    """Keep the rows with the largest ``rank_key`` (a top-k buffer).

    When the storage is full, a new row replaces the stored row of lowest rank if its
    own rank is higher; otherwise it is dropped. Only ``ndim=1`` storages.

    Args:
        rank_key: key whose value ranks rows; a multi-element value is reduced.
        reduction: ``"sum"``, ``"mean"``, ``"max"`` or ``"min"`` over a row's value.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import LazyTensorStorage, ReplayBuffer, TensorDictMaxValueWriter
        >>> rb = ReplayBuffer(storage=LazyTensorStorage(2), writer=TensorDictMaxValueWriter())
        >>> _ = rb.extend(TensorDict({"reward": torch.tensor([1.0, 5.0, 3.0])}, [3]))
        >>> sorted(rb.storage.get(torch.arange(2))["reward"].tolist())
        [3.0, 5.0]
    """

    def __init__(self, rank_key: Any = "reward", reduction: str = "sum") -> None:
        super().__init__()
        if reduction not in ("sum", "mean", "max", "min"):
            raise ValueError(
                f"reduction: expected 'sum', 'mean', 'max' or 'min', got {reduction!r}"
            )
        self.rank_key, self.reduction = rank_key, reduction
        self._ranks: torch.Tensor | None = None

    def _rank(self, data: Any) -> torch.Tensor:
        if not isinstance(data, TensorDictBase) or self.rank_key not in data.keys(True):
            raise StorageLayoutError(
                f"data: expected a TensorDict holding rank_key={self.rank_key!r}"
            )
        value = data.get(self.rank_key).reshape(data.batch_size[0], -1).double()
        return (
            getattr(value, self.reduction)(dim=1)
            if self.reduction in ("sum", "mean")
            else getattr(value, "amax" if self.reduction == "max" else "amin")(dim=1)
        )

    def extend(self, data: Any) -> torch.Tensor:
        storage = self._storage
        storage.prepare(data)
        if storage.ndim != 1:
            raise ReplayBufferError("TensorDictMaxValueWriter: expected an ndim=1 storage")
        cap = storage.max_size
        ranks = self._rank(data)
        current = (
            self._ranks
            if self._ranks is not None
            else torch.full((cap,), -torch.inf, dtype=torch.float64)
        )
        filled = len(storage)
        pool = torch.cat([current[:filled], ranks])
        keep = torch.topk(pool, min(cap, len(pool))).indices
        new_rows = keep[keep >= filled] - filled
        kept_old = torch.zeros(cap, dtype=torch.bool)
        kept_old[keep[keep < filled]] = True
        free = (~kept_old).nonzero().squeeze(1)[: len(new_rows)]
        if len(new_rows) == 0:
            return torch.empty(0, dtype=torch.long)
        new_rows = new_rows.sort().values
        storage.set(free, data[new_rows])
        current = current.clone()
        current[free] = ranks[new_rows]
        self._ranks = current
        return free

    def empty(self) -> None:
        self._ranks = None

    def state_dict(self) -> dict:
        return {"ranks": self._ranks}

    def load_state_dict(self, state: dict) -> None:
        self._ranks = state["ranks"]


class ImmutableDatasetWriter(Writer):
    """A writer that refuses every write: for datasets loaded into the storage once.

    It has no state, so it serves compilable buffers as they are.

    Examples:
        >>> import torch
        >>> from rl_replay import ImmutableDatasetWriter, LazyTensorStorage, ReplayBuffer
        >>> storage = LazyTensorStorage(3)
        >>> storage.set(torch.arange(3), torch.zeros(3))
        >>> rb = ReplayBuffer(storage=storage, writer=ImmutableDatasetWriter())
        >>> len(rb)
        3
    """

    def _make_compilable(self) -> None:
        self.compilable = True

    def extend(self, data: Any) -> torch.Tensor:
        raise ReplayBufferError(
            "extend: this buffer uses ImmutableDatasetWriter, which refuses writes; "
            "use RoundRobinWriter to add data"
        )
