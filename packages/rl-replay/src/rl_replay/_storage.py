"""Storages: where a replay buffer's rows live.

A storage is written by a writer along its *extend dim* (dim 0 for ``ndim=1``; the time
dim for ``ndim=2``, whose data is ``[num_envs, T]`` as collectors produce it) and read by
a sampler through *flat* indices: the position of a row when the storage's batch dims
are flattened (``env * capacity_t + t`` for ``ndim=2``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from rl_profiling import profiled_methods
from tensordict import TensorDict, TensorDictBase

from rl_replay._layout import Layout, batch_rows
from rl_replay._snapshot import WriteTracker, load_chunks
from rl_replay.exceptions import StorageLayoutError

__all__ = ["LazyTensorStorage", "ListStorage", "Storage"]


def _check_size(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: expected a positive int, got {value!r}")
    return value


class Storage:
    """Base class of storages: a fixed capacity of rows addressed by flat indices.

    Subclasses implement ``_write``, ``get``, ``state_dict`` and ``load_state_dict``.
    """

    ndim: int = 1
    takes_extra: bool = False
    """Whether ``get(index, extra)`` adds ``extra`` root keys to a TensorDict sample."""
    compilable: bool = False
    """Whether the row count is a tensor and writes need no host sync (see ``docs/replay.md``)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        profiled_methods(cls, "set")  # a range per storage class: "LazyMemmapStorage.set"

    def __init__(self, max_size: int) -> None:
        self.max_size = _check_size("max_size", max_size)
        self._filled = 0

    def __len__(self) -> int:
        return int(self._filled) * self._width

    def _make_compilable(self) -> None:
        """Switch to the traceable mode (``compilable=True``); base storages cannot."""
        raise ValueError(
            f"storage: expected a LazyTensorStorage for a compilable buffer, got "
            f"{type(self).__name__}, which torch.compile cannot trace"
        )

    def _set_filled(self, filled: int) -> None:
        if self.compilable:
            self._filled.fill_(filled)
        else:
            self._filled = filled

    def count(self) -> torch.Tensor:
        """``len(self)`` as a 0-d int64 tensor on the storage's device (compilable only).

        No host sync: the number of stored rows as traced code reads it (a new tensor).

        Raises:
            ValueError: the storage is not compilable.
        """
        if not self.compilable:
            raise ValueError("count: expected a compilable storage (compilable=True)")
        return self._filled * self._width

    @property
    def _width(self) -> int:
        return 1

    @property
    def extend_capacity(self) -> int:
        """Number of slots along the extend dim (``max_size`` when ``ndim=1``)."""
        return self.max_size

    @property
    def capacity(self) -> int:
        """Number of flat slots (the size of the priority tree over this storage)."""
        return self.extend_capacity * self._width

    def rows(self, data: Any) -> int:
        """Number of rows ``data`` holds along the extend dim."""
        return len(data)

    def prepare(self, data: Any) -> None:
        """Allocate from ``data``'s layout if nothing was written yet (no write)."""

    def set(self, index: torch.Tensor, data: Any) -> None:
        """Write ``data`` at positions ``index`` along the extend dim (validated first).

        Raises:
            StorageLayoutError: ``data`` does not match what the storage holds.
        """
        self._write(index, data)
        if not len(index):
            return
        if self.compilable:  # no host sync: the count stays a tensor
            self._filled.copy_(torch.maximum(self._filled, index.max().to(self._filled) + 1))
        else:
            self._filled = max(self._filled, int(index.max()) + 1)

    def _write(self, index: torch.Tensor, data: Any) -> None:
        raise NotImplementedError

    def get(self, index: torch.Tensor) -> Any:
        """Rows at flat indices ``index``."""
        raise NotImplementedError

    def flat_index(self, index: torch.Tensor) -> torch.Tensor:
        """Flat indices of the rows written at extend-dim positions ``index``."""
        return index

    def valid_flat(self, rank: torch.Tensor) -> torch.Tensor:
        """Map ``rank`` in ``[0, len(self))`` to the flat index of a stored row."""
        return rank

    def empty(self) -> None:
        """Forget every row (the allocation is kept)."""
        self._set_filled(0)

    def state_dict(self) -> dict:
        raise NotImplementedError

    def load_state_dict(self, state: dict) -> None:
        raise NotImplementedError


class ListStorage(Storage):
    """A Python list of arbitrary objects (no layout check, no preallocation).

    Use it for data that is not a TensorDict or a Tensor of fixed shape. Sampled items
    are returned as a list, or stacked when they are all Tensors or TensorDicts.

    Args:
        max_size: number of items kept.

    Examples:
        >>> from rl_replay import ListStorage, ReplayBuffer
        >>> rb = ReplayBuffer(storage=ListStorage(10))
        >>> rb.extend(["a", "b", "c"]).tolist()
        [0, 1, 2]
        >>> len(rb)
        3
    """

    def __init__(self, max_size: int) -> None:
        super().__init__(max_size)
        self._items: list[Any] = [None] * self.max_size

    def _write(self, index: torch.Tensor, data: Any) -> None:
        items = list(data)
        if len(items) != len(index):
            raise StorageLayoutError(f"data: expected {len(index)} items, got {len(items)}")
        for i, item in zip(index.tolist(), items, strict=False):
            self._items[i] = item

    def get(self, index: torch.Tensor) -> Any:
        items = [self._items[i] for i in index.tolist()]
        if items and all(isinstance(x, torch.Tensor) for x in items):
            return torch.stack(items)
        if items and all(isinstance(x, TensorDictBase) for x in items):
            return torch.stack(items)
        return items

    def empty(self) -> None:
        super().empty()
        self._items = [None] * self.max_size

    def state_dict(self) -> dict:
        return {"items": list(self._items), "filled": self._filled}

    def load_state_dict(self, state: dict) -> None:
        self._items = list(state["items"])
        self._filled = int(state["filled"])


class LazyTensorStorage(Storage):
    """Preallocated tensors, allocated at the first write from the data's layout.

    Holds a TensorDict (any nesting) or a single Tensor. Later writes must have the same
    keys, per-row shapes and dtypes (checked before anything is written). With
    ``ndim=2`` the data is ``[num_envs, T]`` (time last, as collectors produce it) and the
    storage keeps ``max_size // num_envs`` steps per env, written round-robin along time.

    Args:
        max_size: capacity in rows (``ndim=1``) or in env-steps (``ndim=2``).
        device: device of the stored tensors; data is moved there on write.
        ndim: number of leading batch dims of a row-block (1 or 2).
        compilable: keep the row count in a 0-d tensor on ``device`` (see
            :meth:`count`), so that writes and samples trace under ``torch.compile``
            with no host sync; ``len()`` then syncs. Use it in a
            ``ReplayBuffer(compilable=True)``.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_replay import LazyTensorStorage
        >>> s = LazyTensorStorage(100)
        >>> s.set(torch.arange(3), TensorDict({"obs": torch.ones(3, 4)}, [3]))
        >>> len(s), s.get(torch.tensor([0, 2]))["obs"].shape
        (3, torch.Size([2, 4]))
        >>> c = LazyTensorStorage(100, compilable=True)
        >>> c.set(torch.arange(3), torch.zeros(3))
        >>> c.count()
        tensor(3)
    """

    def __init__(
        self, max_size: int, *, device: Any = "cpu", ndim: int = 1, compilable: bool = False
    ) -> None:
        super().__init__(max_size)
        if ndim not in (1, 2):
            raise ValueError(f"ndim: expected 1 or 2, got {ndim!r}")
        self.ndim = ndim
        self.device = torch.device(device)
        self.layout: Layout | None = None
        self._envs = 1
        self._leaves: list[torch.Tensor] = []  # full leaves, [cap] or [envs, cap_t]
        self._tracker: WriteTracker | None = None  # chunks written since each snapshot
        self._flat: list[torch.Tensor] = []  # the same, viewed flat [envs * cap_t, ...]
        if compilable:
            self._make_compilable()

    def _make_compilable(self) -> None:
        if not self.compilable:
            self.compilable = True
            self._filled = torch.tensor(self._filled, dtype=torch.int64, device=self.device)

    @property
    def _width(self) -> int:
        return self._envs

    @property
    def extend_capacity(self) -> int:
        return self.max_size // self._envs

    @property
    def initialized(self) -> bool:
        """Whether the first write has allocated the tensors."""
        return self.layout is not None

    def rows(self, data: Any) -> int:
        return batch_rows(data, self.ndim)[-1]

    def _alloc(self, key: Any, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(tuple(shape), dtype=dtype, device=self.device)

    def _initialize(self, data: Any) -> None:
        layout = Layout.of(data, self.ndim)
        if self.ndim == 2:
            envs = batch_rows(data, 2)[0]
            if envs > self.max_size:
                raise StorageLayoutError(
                    f"data: {envs} envs do not fit a storage of max_size={self.max_size}"
                )
            self._envs = envs
        lead = (self._envs, self.extend_capacity) if self.ndim == 2 else (self.max_size,)
        leaves = [
            self._alloc(k, lead + shp, dt)
            for k, shp, dt in zip(layout.keys, layout.shapes, layout.dtypes, strict=False)
        ]
        self._attach(layout, leaves)

    def _attach(self, layout: Layout, leaves: list[torch.Tensor]) -> None:
        self.layout = layout
        self._leaves = leaves
        self._flat = [t.view(self.capacity, *t.shape[self.ndim :]) for t in leaves]
        # a compilable storage's writes are traced: no tracker, its dumps copy everything
        self._tracker = None if self.compilable else WriteTracker(self.capacity, device=self.device)

    def _check(self, data: Any) -> list[torch.Tensor]:
        leaves = self.layout.check(data, self.ndim)
        if self.ndim == 2 and batch_rows(data, 2)[0] != self._envs:
            raise StorageLayoutError(
                f"data: expected {self._envs} envs (dim 0) like the stored data, "
                f"got {batch_rows(data, 2)[0]}"
            )
        return leaves

    def prepare(self, data: Any) -> None:
        if self.layout is None:
            self._initialize(data)

    def _write(self, index: torch.Tensor, data: Any) -> None:
        self.prepare(data)
        leaves = self._check(data)
        if self.rows(data) != len(index):
            raise StorageLayoutError(f"data: expected {len(index)} rows, got {self.rows(data)}")
        device, dim = self.device, self.ndim - 1
        index = index if index.device == device else index.to(device)
        # src.to(device) costs an op even when it returns src: only off the storage's device
        for dst, src in zip(self._leaves, leaves, strict=False):
            dst.index_copy_(dim, index, src if src.device == device else src.to(device))
        if self._tracker is not None:
            self._tracker.mark(self.flat_index(index))

    takes_extra = True

    def get(self, index: torch.Tensor, extra: dict | None = None) -> Any:
        """Rows at flat indices ``index``; ``extra`` root keys join a TensorDict sample."""
        layout = self.layout
        if layout is None:
            raise IndexError("get: the storage is empty (nothing was written yet)")
        if index.device != self.device:
            index = index.to(self.device)
        out = [torch.index_select(t, 0, index) for t in self._flat]
        return layout.build(out, index.shape, self.device, extra)

    @property
    def _storage(self) -> Any:
        """TorchRL's attribute, read-only: the full stored TensorDict (``[cap]`` or ``[envs,
        cap_t]``; a memory-mapped storage's leaves keep their ``filename``) or tensor;
        ``None`` before the first write. The same memory as :meth:`leaf`."""
        layout = self.layout
        if layout is None or not layout.is_td:
            return self._leaves[0] if layout is not None else None
        lead = self._leaves[0].shape[: self.ndim] if self._leaves else ()
        return TensorDict(dict(zip(layout.keys, self._leaves, strict=True)), lead, self.device)

    def leaf(self, key: Any) -> torch.Tensor:
        """The full stored tensor under ``key`` (``[cap]`` or ``[envs, cap_t]`` leading)."""
        if self.layout is None or key not in self.layout.keys:
            raise KeyError(
                f"key: {key!r} is not stored (stored: {self.layout and self.layout.keys})"
            )
        return self._leaves[self.layout.keys.index(key)]

    def flat_index(self, index: torch.Tensor) -> torch.Tensor:
        if self.ndim == 1:
            return index
        envs = torch.arange(self._envs, device=index.device).unsqueeze(1)
        return (envs * self.extend_capacity + index.unsqueeze(0)).reshape(-1)

    def valid_flat(self, rank: torch.Tensor) -> torch.Tensor:
        if self.ndim == 1:
            return rank
        return (rank // self._filled) * self.extend_capacity + rank % self._filled

    def state_dict(self) -> dict:
        if self.layout is None:
            return {"layout": None, "filled": 0}
        return {
            "layout": self.layout.state(),
            "envs": self._envs,
            "filled": int(self._filled),
            "leaves": list(self._leaves),
        }

    def load_state_dict(self, state: dict) -> None:
        if state.get("chunked"):  # a snapshot's chunk files (see rl_replay._snapshot)
            load_chunks(self, Path(state["folder"]), state)
            return
        if state["layout"] is None:
            self.layout, self._leaves, self._flat = None, [], []
            self._set_filled(0)
            return
        layout = Layout.from_state(state["layout"])
        self._envs = int(state["envs"])
        leaves = [
            self._alloc(k, t.shape, t.dtype)
            for k, t in zip(layout.keys, state["leaves"], strict=False)
        ]
        for dst, src in zip(leaves, state["leaves"], strict=False):
            dst.copy_(src)
        self._attach(layout, leaves)
        self._set_filled(int(state["filled"]))
