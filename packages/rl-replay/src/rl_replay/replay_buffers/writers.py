"""``torchrl.data.replay_buffers.writers``'s path."""

from __future__ import annotations

from rl_replay._writers import (
    ImmutableDatasetWriter,
    RoundRobinWriter,
    TensorDictMaxValueWriter,
    Writer,
)

__all__ = ["ImmutableDatasetWriter", "RoundRobinWriter", "TensorDictMaxValueWriter", "Writer"]
