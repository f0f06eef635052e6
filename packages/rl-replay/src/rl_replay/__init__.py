"""rl-replay: replay buffers, storages (tensor, memmap, compressed) and samplers.

TorchRL's names and semantics (``TensorDictReplayBuffer``, ``LazyMemmapStorage``,
``PrioritizedSampler``, ``SliceSampler``, ...) with a fast, small core; see
``docs/replay.md``.
"""

from __future__ import annotations

from rl_replay._buffer import ReplayBuffer
from rl_replay._compressed import CompressedStorage
from rl_replay._keys import INDEX, IS_INIT, PRIORITY_WEIGHT, TD_ERROR
from rl_replay._memmap import LazyMemmapStorage
from rl_replay._minari import MinariExperienceReplay
from rl_replay._minari_writer import write_minari_dataset
from rl_replay._multistep import MultiStep
from rl_replay._prioritized import PrioritizedSampler
from rl_replay._samplers import RandomSampler, Sampler, SamplerWithoutReplacement
from rl_replay._slice import SliceSampler
from rl_replay._slice_prioritized import PrioritizedSliceSampler
from rl_replay._slice_wor import SliceSamplerWithoutReplacement
from rl_replay._storage import LazyTensorStorage, ListStorage, Storage
from rl_replay._td_buffers import TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
from rl_replay._torchrl_buffers import PrioritizedReplayBuffer, TensorStorage
from rl_replay._tree import PriorityTree
from rl_replay._tree_choice import make_priority_tree
from rl_replay._tree_numba import NumbaPriorityTree
from rl_replay._tree_triton import TritonPriorityTree, triton_tree_available
from rl_replay._writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    Writer,
)
from rl_replay.exceptions import (
    CheckpointError,
    DatasetError,
    EmptyBufferError,
    InvalidPriorityError,
    ReplayBufferError,
    StorageError,
    StorageLayoutError,
)

__version__ = "0.1.0"

__all__ = [
    "CheckpointError",
    "CompressedStorage",
    "DatasetError",
    "EmptyBufferError",
    "INDEX",
    "IS_INIT",
    "ImmutableDatasetWriter",
    "InvalidPriorityError",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "MinariExperienceReplay",
    "MultiStep",
    "NumbaPriorityTree",
    "PRIORITY_WEIGHT",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "PriorityTree",
    "RandomSampler",
    "ReplayBuffer",
    "ReplayBufferError",
    "RoundRobinWriter",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "Storage",
    "StorageError",
    "StorageLayoutError",
    "TD_ERROR",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorStorage",
    "TritonPriorityTree",
    "Writer",
    "__version__",
    "make_priority_tree",
    "triton_tree_available",
    "write_minari_dataset",
]
