"""TensorStorage, PrioritizedReplayBuffer and TorchRL's replay module paths."""

from __future__ import annotations

import pytest
import rl_replay
import rl_replay.replay_buffers as rb_paths
import torch
from rl_replay import (
    LazyTensorStorage,
    PrioritizedReplayBuffer,
    ReplayBuffer,
    TensorDictReplayBuffer,
    TensorStorage,
)
from rl_replay.replay_buffers import samplers, storages, writers
from tensordict import TensorDict


def test_tensor_storage_holds_the_given_rows_and_keeps_its_layout() -> None:
    data = TensorDict(obs=torch.randn(10, 11), batch_size=[10, 11])
    s = TensorStorage(data, max_size=12)
    assert len(s) == 10 and s.max_size == 12
    assert torch.equal(s.get(torch.tensor([3]))["obs"][0], data["obs"][3])
    buffer = TensorDictReplayBuffer(storage=s, batch_size=4)
    assert len(buffer) == 10 and buffer.sample()["obs"].shape == (4, 11)
    with pytest.raises(ValueError, match="max_size"):
        TensorStorage(torch.zeros(5), max_size=3)
    with pytest.raises(TypeError, match="storage"):
        TensorStorage([1, 2, 3])


def test_prioritized_buffer_weights_follow_the_priorities() -> None:
    torch.manual_seed(0)
    rb = PrioritizedReplayBuffer(alpha=1.0, beta=1.0, storage=LazyTensorStorage(8))
    rb.extend(torch.arange(4.0))
    rb.update_priority(torch.arange(4), torch.tensor([1.0, 1.0, 1.0, 3.0]))
    sample, info = rb.sample(4000, return_info=True)
    share = (sample == 3).float().mean().item()
    assert abs(share - 0.5) < 0.05  # p = 3 / 6
    w = info["priority_weight"]
    # (q_i / q_min) ** -beta: 1 for the lowest priority, 1/3 for the highest
    assert torch.allclose(w[sample == 3], torch.full_like(w[sample == 3], 1 / 3), atol=1e-5)
    assert isinstance(PrioritizedReplayBuffer(alpha=0.5, beta=0.5).storage,
                      rl_replay.ListStorage)
    with pytest.raises(ValueError, match="sampler"):
        PrioritizedReplayBuffer(alpha=0.5, beta=0.5, sampler=rl_replay.RandomSampler())


def test_module_paths_reexport_the_package_objects() -> None:
    for module in (rb_paths, samplers, storages, writers):
        assert module.__all__ == sorted(module.__all__)
        for name in module.__all__:
            assert getattr(module, name) is getattr(rl_replay, name), name
    assert rb_paths.ReplayBuffer is ReplayBuffer


def test_slice_sampler_without_replacement_draws_each_episode_once_per_epoch() -> None:
    from rl_replay import SliceSamplerWithoutReplacement

    torch.manual_seed(0)
    sampler = SliceSamplerWithoutReplacement(num_slices=2, traj_key="traj")
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), sampler=sampler, batch_size=8)
    rb.extend(TensorDict({"traj": torch.arange(60) // 10, "t": torch.arange(60)}, [60]))
    for _ in range(4):  # 6 episodes, 2 per batch: an epoch is 3 batches
        epoch = [rb.sample().reshape(2, 4) for _ in range(3)]
        firsts = torch.cat([s["traj"][:, 0] for s in epoch])
        assert sorted(firsts.tolist()) == [0, 1, 2, 3, 4, 5]
        for s in epoch:  # each slice is consecutive steps of one episode
            assert bool((s["traj"] == s["traj"][:, :1]).all())
            assert bool((s["t"].diff(dim=1) == 1).all())
    few = TensorDictReplayBuffer(
        storage=LazyTensorStorage(100), batch_size=28,
        sampler=SliceSamplerWithoutReplacement(num_slices=7, traj_key="traj"))
    few.extend(TensorDict({"traj": torch.arange(60) // 10}, [60]))
    with pytest.raises(ValueError, match="num_slices: 7 slices without replacement"):
        few.sample()


@pytest.mark.parametrize("cls", ["SliceSampler", "SliceSamplerWithoutReplacement",
                                 "PrioritizedSliceSampler"])
def test_slice_samplers_take_cache_values_and_see_every_write(cls: str) -> None:
    """TorchRL's ``cache_values=True`` (dqn_with_rnn.py passes it): the boundaries cached
    after one write are recomputed after the next, so new episodes are sampled."""
    extra = {"max_capacity": 40, "alpha": 0.7, "beta": 0.9} if cls.startswith("Prior") else {}
    sampler = getattr(samplers, cls)(slice_len=5, traj_key="traj", cache_values=True, **extra)
    assert sampler.cache_values is True
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(40), sampler=sampler, batch_size=10)
    rb.extend(TensorDict(traj=torch.arange(10) // 5 * 2, batch_size=[10]))  # episodes 0, 2
    assert set(rb.sample()["traj"].tolist()) <= {0, 2}
    rb.extend(TensorDict(traj=torch.ones(30, dtype=torch.long), batch_size=[30]))
    seen = set()
    for _ in range(20):
        seen |= set(rb.sample()["traj"].tolist())
    assert 1 in seen  # the second write's episode, found after the cache was renewed


def test_storage_private_alias_reads_the_stored_memory(tmp_path) -> None:
    """TorchRL's ``storage._storage`` (its replay tutorial reads a memmap leaf's filename)."""
    from rl_replay import LazyMemmapStorage

    storage = LazyMemmapStorage(8, scratch_dir=tmp_path)
    buffer = ReplayBuffer(storage=storage)
    assert storage._storage is None
    data = TensorDict({"a": torch.arange(3), ("b", "c"): torch.ones(3, 2)}, [3])
    buffer.extend(data)
    stored = buffer._storage._storage
    assert stored.batch_size == (8,) and stored["b", "c"].shape == (8, 2)
    assert stored["a"].filename.startswith(str(tmp_path))
    assert stored["b", "c"].filename != stored["a"].filename
    assert torch.equal(stored["a"][:3], data["a"])
    stored["a"][0] = 7  # the same memory as the storage's own tensors
    assert storage.leaf("a")[0] == 7
    tensors = LazyTensorStorage(4)
    tensors.set(torch.arange(2), torch.ones(2, 5))
    assert tensors._storage.shape == (4, 5) and tensors._storage[:2].sum() == 10


def test_a_tensorclass_comes_back_as_itself() -> None:
    """TorchRL's replay tutorial extends a ``@tensorclass`` and samples it back."""
    from rl_replay.exceptions import ReplayBufferError
    from tensordict import tensorclass

    @tensorclass
    class Frames:
        images: torch.Tensor
        labels: torch.Tensor

    @tensorclass
    class Other:
        images: torch.Tensor
        labels: torch.Tensor

    data = Frames(images=torch.arange(10 * 6).reshape(10, 2, 3), labels=torch.arange(10),
                  batch_size=[10])
    buffer = ReplayBuffer(storage=LazyTensorStorage(20), batch_size=4)
    buffer.extend(data)
    buffer.add(data[3])
    sample = buffer.sample()
    assert type(sample) is Frames and sample.images.shape == (4, 2, 3)
    assert torch.equal(sample.images[:, 0, 0], sample.labels * 6)  # rows kept whole
    assert type(buffer[0]) is Frames and int(buffer[10].labels) == 3
    with pytest.raises(ReplayBufferError, match="expected a Frames like the stored data"):
        buffer.extend(Other(images=torch.zeros(1, 2, 3, dtype=torch.int64),
                            labels=torch.zeros(1, dtype=torch.int64), batch_size=[1]))
    assert len(buffer) == 11


def test_append_and_insert_transform_apply_in_order_on_samples_only() -> None:
    """TorchRL's ``append_transform`` / ``insert_transform``: each returns the buffer, the
    transforms run in order on samples (and on ``rb[i]``), the stored rows stay as written;
    ``invert=True`` and a non-callable are refused by name."""
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(8), batch_size=3,
                                    transform=lambda td: td.set("x", td["x"] + 1))
    buffer.extend(TensorDict(x=torch.zeros(4), batch_size=[4]))
    assert buffer.append_transform(lambda td: td.set("x", td["x"] * 10)) is buffer
    assert buffer.insert_transform(0, lambda td: td.set("x", td["x"] - 5)) is buffer
    assert buffer.sample()["x"].tolist() == [-40.0] * 3  # ((0 - 5) + 1) * 10
    assert buffer[0]["x"].item() == -40.0
    assert buffer.storage.get(torch.arange(4))["x"].tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="append_transform: invert=True"):
        buffer.append_transform(lambda td: td, invert=True)
    with pytest.raises(TypeError, match="insert_transform: transform: expected a callable"):
        buffer.insert_transform(0, 3)
    assert buffer.sample()["x"].tolist() == [-40.0] * 3  # a refused call changed nothing


def test_pin_memory_false_is_accepted_and_true_needs_cuda() -> None:
    buffer = ReplayBuffer(storage=LazyTensorStorage(4), batch_size=2, pin_memory=False)
    buffer.extend(torch.arange(4.0))
    assert buffer.sample().shape == (2,)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="pin_memory: True pins each sample"):
            ReplayBuffer(storage=LazyTensorStorage(4), pin_memory=True)
    with pytest.raises(ValueError, match="pin_memory: expected a bool"):
        ReplayBuffer(storage=LazyTensorStorage(4), pin_memory="yes")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs a CUDA device")
def test_pin_memory_true_pins_samples() -> None:
    buffer = ReplayBuffer(storage=LazyTensorStorage(4), batch_size=2, pin_memory=True)
    buffer.extend(torch.arange(4.0))
    assert buffer.sample().is_pinned()
