"""Uniform, without-replacement and slice samplers."""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    EmptyBufferError,
    LazyTensorStorage,
    RandomSampler,
    ReplayBuffer,
    SamplerWithoutReplacement,
    SliceSampler,
    TensorDictReplayBuffer,
)
from tensordict import TensorDict


def test_sampling_an_empty_buffer_is_a_clear_error():
    for sampler in (RandomSampler(), SamplerWithoutReplacement(), SliceSampler(slice_len=2)):
        rb = ReplayBuffer(storage=LazyTensorStorage(10), sampler=sampler)
        with pytest.raises(EmptyBufferError, match="empty"):
            rb.sample(2)


def test_without_replacement_covers_each_row_once_per_epoch():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100), sampler=SamplerWithoutReplacement(), batch_size=7
    )
    rb.extend(torch.arange(30))
    batches = list(rb)
    assert [len(b) for b in batches] == [7, 7, 7, 7, 2]
    assert sorted(torch.cat(batches).tolist()) == list(range(30))
    again = torch.cat(list(rb))  # a second epoch
    assert sorted(again.tolist()) == list(range(30))


def test_without_replacement_drop_last_and_no_shuffle():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SamplerWithoutReplacement(drop_last=True, shuffle=False),
        batch_size=4,
    )
    rb.extend(torch.arange(10))
    assert [b.tolist() for b in rb] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(EmptyBufferError, match="batch_size"):
        rb.sample(11)


def _episodes(lengths, traj_offset=0):
    traj = torch.cat([torch.full((n,), i + traj_offset) for i, n in enumerate(lengths)])
    step = torch.cat([torch.arange(n) for n in lengths])
    done = torch.cat([torch.arange(n) == n - 1 for n in lengths]).unsqueeze(-1)
    n = len(traj)
    return TensorDict(
        {
            "step": step,
            "obs": torch.randn(n, 3),
            ("collector", "traj_ids"): traj,
            ("next", "done"): done,
            ("next", "truncated"): torch.zeros(n, 1, dtype=torch.bool),
        },
        [n],
    )


def _check_slices(batch, num_slices, slice_len):
    s = batch.reshape(num_slices, slice_len)
    traj = s["collector", "traj_ids"]
    assert (traj == traj[:, :1]).all(), "a slice crossed an episode boundary"
    assert (s["step"][:, 1:] - s["step"][:, :-1] == 1).all(), "a slice is not contiguous"
    assert s["is_init"][:, 0].all() and not s["is_init"][:, 1:].any()
    assert s["next", "truncated"][:, -1].all() and s["next", "done"][:, -1].all()
    return s


@pytest.mark.parametrize("key", ["traj", "end"])
def test_slices_never_cross_episode_boundaries(key):
    torch.manual_seed(0)
    kwargs = {"traj_key": ("collector", "traj_ids")} if key == "traj" else {}
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(1000),
        sampler=SliceSampler(num_slices=16, **kwargs),
        batch_size=16 * 5,
    )
    rb.extend(_episodes([3, 12, 5, 40, 7, 9, 2, 30]))
    for _ in range(20):
        _check_slices(rb.sample(), 16, 5)


def test_slices_respect_the_write_seam_of_a_full_buffer():
    torch.manual_seed(1)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(50), sampler=SliceSampler(slice_len=4), batch_size=40
    )
    rb.extend(_episodes([30, 30]))  # second episode wraps; done=False at the seam
    rb.extend(_episodes([5], traj_offset=7)[:3])  # cut mid-episode: the seam is at 13
    for _ in range(20):
        s = rb.sample().reshape(10, 4)
        assert (s["step"][:, 1:] - s["step"][:, :-1] == 1).all()


def test_slices_in_an_ndim2_storage_stay_within_one_env_row():
    torch.manual_seed(2)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(4 * 20, ndim=2),
        sampler=SliceSampler(slice_len=3, traj_key="traj"),
        batch_size=30,
    )
    env = torch.arange(4).unsqueeze(1).expand(4, 12)
    traj = env * 100 + torch.arange(12) // 6  # two 6-step episodes per env
    t = torch.arange(12).expand(4, 12)
    rb.extend(TensorDict({"env": env, "traj": traj, "t": t}, [4, 12]))
    for _ in range(10):
        s = rb.sample().reshape(10, 3)
        assert (s["env"] == s["env"][:, :1]).all() and (s["traj"] == s["traj"][:, :1]).all()
        assert (s["t"][:, 1:] - s["t"][:, :-1] == 1).all()


def test_slice_sampler_short_episodes():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(slice_len=8, traj_key=("collector", "traj_ids")),
        batch_size=16,
    )
    rb.extend(_episodes([3, 4, 5]))
    with pytest.raises(EmptyBufferError, match="strict_length"):
        rb.sample()
    loose = TensorDictReplayBuffer(
        storage=rb.storage,
        sampler=SliceSampler(slice_len=8, traj_key=("collector", "traj_ids"), strict_length=False),
        batch_size=16,
    )
    s = loose.sample()
    assert len(s) <= 10 and int(s["is_init"].sum()) == 2


def test_slice_sampler_validates_arguments():
    with pytest.raises(ValueError, match="exactly one"):
        SliceSampler(num_slices=2, slice_len=3)
    with pytest.raises(ValueError, match="at most one"):
        SliceSampler(slice_len=3, traj_key="a", end_key="b")


def test_slice_sampler_rejects_unflattened_env_time_batches():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100),
        sampler=SliceSampler(slice_len=2, traj_key="traj"),
        batch_size=4,
    )
    rb.extend(TensorDict({"traj": torch.zeros(4, 5, dtype=torch.long)}, [4, 5]))
    with pytest.raises(ValueError, match="reshape"):
        rb.sample()


def test_random_ranks_are_pooled_only_while_the_row_count_holds():
    storage = LazyTensorStorage(1000)
    storage.set(torch.arange(100), torch.arange(100.0))
    sampler, gen = RandomSampler(), torch.Generator().manual_seed(0)
    for _ in range(40):  # a full buffer: the pool grows to POOL batches
        sampler.sample(storage, 8, gen)
    assert sampler._pool_size == RandomSampler.POOL
    storage.set(torch.arange(100, 110), torch.arange(10.0))  # the buffer grows: the pool is dropped
    index, _ = sampler.sample(storage, 8, gen)
    assert sampler._pool_size == 1 and index.max() < 110
    ranks = [sampler.sample(storage, 8, gen)[0] for _ in range(2000)]
    counts = torch.bincount(torch.cat(ranks), minlength=110).double()
    # uniform over 110
    assert counts.min() > 0.6 * counts.mean() and counts.max() < 1.4 * counts.mean()
