"""Pixels stay uint8 through every storage: written, stored and sampled as bytes."""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    CompressedStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    RandomSampler,
    TensorDictReplayBuffer,
)
from tensordict import TensorDict

FRAMES = (4, 84, 84)


def _batch(n: int, seed: int) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (n, *FRAMES), dtype=torch.uint8, generator=g)
    nxt = torch.randint(0, 256, (n, *FRAMES), dtype=torch.uint8, generator=g)
    return TensorDict(observation=obs, action=torch.arange(n),
                      next=TensorDict(observation=nxt, reward=torch.ones(n, 1), batch_size=[n]),
                      batch_size=[n])


STORAGES = {
    "tensor": lambda tmp: LazyTensorStorage(64),
    "memmap": lambda tmp: LazyMemmapStorage(64, scratch_dir=tmp),
    "compressed": lambda tmp: CompressedStorage(64),
    "list": lambda tmp: ListStorage(64),
}


@pytest.mark.parametrize("kind", sorted(STORAGES))
def test_uint8_round_trip(kind, tmp_path):
    buffer = TensorDictReplayBuffer(storage=STORAGES[kind](tmp_path), sampler=RandomSampler(),
                                    batch_size=16)
    data = _batch(40, seed=1)
    buffer.extend(data)
    sample = buffer.sample()
    for key in ("observation", ("next", "observation")):
        assert sample[key].dtype == torch.uint8, (kind, key)
        rows = sample["action"]  # the action is the row's index in `data`
        assert torch.equal(sample[key], data[key][rows]), (kind, key)
    if kind == "memmap":  # on disk: one byte per pixel (float32 would be four)
        on_disk = sum(f.stat().st_size for f in tmp_path.rglob("*") if f.is_file())
        pixels = 2 * 64 * torch.Size(FRAMES).numel()
        assert pixels <= on_disk < pixels + 64 * 1024, on_disk
