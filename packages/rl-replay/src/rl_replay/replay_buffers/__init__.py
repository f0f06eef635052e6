"""``torchrl.data.replay_buffers``'s path: the buffers, storages, samplers and writers.

Its submodules ``samplers``, ``storages`` and ``writers`` mirror TorchRL's.
"""

from __future__ import annotations

from rl_replay._buffer import ReplayBuffer
from rl_replay._td_buffers import TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
from rl_replay._torchrl_buffers import PrioritizedReplayBuffer
from rl_replay.replay_buffers.samplers import (
    PrioritizedSampler,
    PrioritizedSliceSampler,
    RandomSampler,
    Sampler,
    SamplerWithoutReplacement,
    SliceSampler,
    SliceSamplerWithoutReplacement,
)
from rl_replay.replay_buffers.storages import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    Storage,
    TensorStorage,
)
from rl_replay.replay_buffers.writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    Writer,
)

__all__ = [
    "ImmutableDatasetWriter",
    "LazyMemmapStorage",
    "LazyTensorStorage",
    "ListStorage",
    "PrioritizedReplayBuffer",
    "PrioritizedSampler",
    "PrioritizedSliceSampler",
    "RandomSampler",
    "ReplayBuffer",
    "RoundRobinWriter",
    "Sampler",
    "SamplerWithoutReplacement",
    "SliceSampler",
    "SliceSamplerWithoutReplacement",
    "Storage",
    "TensorDictMaxValueWriter",
    "TensorDictPrioritizedReplayBuffer",
    "TensorDictReplayBuffer",
    "TensorStorage",
    "Writer",
]
