"""What the snapshot tests share: a prioritized buffer over four storage chunks, its rows."""

from __future__ import annotations

from pathlib import Path

import torch
from rl_replay import LazyMemmapStorage, LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from rl_replay._snapshot import CHUNK_ROWS
from tensordict import TensorDict

CAPACITY = 3 * CHUNK_ROWS + 100  # four chunks, the last one short


def numbered_rows(n: int, start: int = 0) -> TensorDict:
    """Rows ``start .. start + n - 1``: ``obs`` ``[n, 3]`` holds the number, ``done`` every 7th."""
    x = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict(
        {"obs": x.unsqueeze(1).expand(n, 3).clone(), "done": (x % 7 == 0).unsqueeze(1)}, [n]
    )


def prioritized_buffer(scratch_dir: Path | None = None) -> TensorDictPrioritizedReplayBuffer:
    """``CAPACITY`` rows in a memmap storage in ``scratch_dir``, or in memory without one."""
    storage = (
        LazyTensorStorage(CAPACITY)
        if scratch_dir is None
        else LazyMemmapStorage(CAPACITY, scratch_dir=scratch_dir)
    )
    return TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=storage, batch_size=16)


def content(rb: TensorDictPrioritizedReplayBuffer) -> tuple[torch.Tensor, ...]:
    """Copies of the stored ``obs`` and ``done`` and of the priority tree's leaves."""
    data = rb[:]
    return data.get("obs").clone(), data.get("done").clone(), rb.sampler.tree.leaves.clone()


def assert_same_content(got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...]) -> None:
    for g, w in zip(got, want, strict=True):
        assert torch.equal(g, w)
