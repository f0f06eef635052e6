"""``torchrl.data.replay_buffers.storages``'s path."""

from __future__ import annotations

from rl_replay._compressed import CompressedStorage
from rl_replay._memmap import LazyMemmapStorage
from rl_replay._storage import LazyTensorStorage, ListStorage, Storage
from rl_replay._torchrl_buffers import TensorStorage

__all__ = [
    "CompressedStorage",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "Storage",
    "TensorStorage",
]
