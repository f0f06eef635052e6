"""RolloutWriter: both layouts filled from a real env's buffers, keyed pairs, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rl_envs import GymEnv, RolloutWriter
from tensordict import TensorDict


@pytest.mark.parametrize("time_dim", [0, 1])
def test_pairs_store_each_step_of_the_env_in_either_layout(time_dim):
    env = GymEnv("CartPole-v1", num_envs=3, categorical_action_encoding=True)
    try:
        env.set_seed(0)
        env.fast_reset()
        _, nxt = env.buffers()
        writer = RolloutWriter(nxt, 5, time_dim=time_dim, zeros=True)
        expected_batch = (5, 3) if time_dim == 0 else (3, 5)
        assert tuple(writer.storage.batch_size) == expected_batch
        pairs = writer.pairs(nxt)
        assert all(isinstance(d, np.ndarray) for d, _ in pairs)  # CPU: numpy views
        seen = []
        for t in range(5):
            env.fast_step(torch.ones(3, dtype=torch.int64))
            seen.append(nxt.get("observation").clone())
            for dst, src in pairs:
                dst[t] = src
        stored = writer.storage.get("observation")
        expected = torch.stack(seen, dim=time_dim)
        assert torch.equal(stored, expected)
    finally:
        env.close()


def test_keyed_pairs_read_new_tensors_by_key():
    template = TensorDict({"action": torch.zeros(2, 1), ("next", "obs"): torch.zeros(2, 4)}, [2])
    writer = RolloutWriter(template, 3, time_dim=1, zeros=True)
    outs = writer.keyed(["action"])
    assert outs[0][1] == "action"  # a one-element key as its string
    for t in range(3):
        td = TensorDict(action=torch.full((2, 1), float(t)), batch_size=[2])
        for slot, key in outs:
            slot[t].copy_(td.get(key))
    assert writer.storage.get("action")[:, :, 0].tolist() == [[0.0, 1.0, 2.0]] * 2
    assert writer.storage.get(("next", "obs")).abs().sum() == 0  # zeros: never written


def test_bad_time_dim_is_refused_naming_it():
    template = TensorDict(obs=torch.zeros(2, 4), batch_size=[2])
    with pytest.raises(ValueError, match=r"expected 0 <= time_dim <= 1 .*received time_dim=2"):
        RolloutWriter(template, 3, time_dim=2)
    with pytest.raises(ValueError, match="received time_dim=-1"):
        RolloutWriter(template, 3, time_dim=-1)


@pytest.mark.parametrize("num_envs", [None, 3])
def test_rollouts_name_their_time_dim_as_torchrl_does(num_envs):
    # TorchRL's mark (refine_names(..., "time")), which the estimators read: on the writer's
    # storage in either layout, and on EnvBase.rollout's [*B, T] view of a [T, *B] storage
    kwargs = {} if num_envs is None else {"num_envs": num_envs}
    env = GymEnv("CartPole-v1", **kwargs)
    try:
        env.set_seed(0)
        out = env.rollout(4)
        lead = [] if num_envs is None else [None]
        assert out.names == [*lead, "time"] and out["next"].names == [*lead, "time"]
        assert out.batch_size[-1] == 4
        _, nxt = env.buffers()
        for time_dim in range(len(lead) + 1):
            writer = RolloutWriter(nxt, 5, time_dim=time_dim)
            names = writer.storage.names
            assert names[time_dim] == "time" and names.count("time") == 1
    finally:
        env.close()


@pytest.mark.parametrize("zeros", [True, False])
def test_renew_lays_out_a_new_storage_as_the_last_one(zeros):
    template = TensorDict({"obs": torch.zeros(2, 4), ("next", "obs"): torch.zeros(2, 4),
                           ("next", "done"): torch.zeros(2, 1, dtype=torch.bool)}, [2])
    writer = RolloutWriter(template, 3, time_dim=1, zeros=zeros)
    writer.storage.set("ids", torch.zeros(2, 3, dtype=torch.int64))  # set after construction
    writer.storage.get("obs").fill_(7.0)
    fresh = writer.renew()
    old, new = writer.storage, fresh.storage
    assert new.batch_size == old.batch_size and new.names == old.names == [None, "time"]
    assert new.get("next").names == [None, "time"]
    assert sorted(map(str, new.keys(True, True))) == sorted(map(str, old.keys(True, True)))
    for key in old.keys(True, True):
        assert new.get(key).dtype == old.get(key).dtype
        assert new.get(key).shape == old.get(key).shape
        assert new.get(key).data_ptr() != old.get(key).data_ptr()  # its own memory
    if zeros:
        assert all(bool((x == 0).all()) for x in new.values(True, True))
    # the pairs bind to the new storage; the old one keeps what it holds
    obs = torch.arange(8.0).reshape(2, 4)
    pairs = fresh.bind(RolloutWriter.sources(TensorDict(obs=obs, batch_size=[2])))
    for t in range(3):
        for dst, src in pairs:
            dst[t] = src
    assert torch.equal(new.get("obs"), obs[:, None].expand(2, 3, 4))
    assert bool((old.get("obs") == 7.0).all())
    assert fresh.renew().storage.get("obs").data_ptr() != new.get("obs").data_ptr()


def test_small_batches_share_a_slab_and_each_keeps_what_it_held():
    from rl_envs import _writer

    template = TensorDict({"obs": torch.zeros(3), ("next", "obs"): torch.zeros(3)}, [])
    writer = RolloutWriter(template, 1, time_dim=0, zeros=True)
    per_slab = _writer.SLAB_BYTES // 24  # two float32 [1, 3] leaves a batch
    storages, fresh = [], writer
    for i in range(per_slab + 3):  # into a second slab
        fresh = fresh.renew()
        obs = TensorDict(obs=torch.full((3,), float(i)), batch_size=[])
        for dst, src in fresh.bind(RolloutWriter.sources(obs)):
            dst[0] = src
        storages.append(fresh.storage)
    for i, storage in enumerate(storages):
        assert storage.batch_size == (1,) and storage.names == ["time"]
        assert storage.get("next").names == ["time"]
        assert bool((storage["obs"] == i).all()) and bool((storage["next", "obs"] == 0).all())
    assert len({s["obs"].data_ptr() for s in storages}) == len(storages)  # disjoint rows
    assert len({s["obs"].untyped_storage().data_ptr() for s in storages}) == 2  # two slabs
    big = RolloutWriter(TensorDict({"obs": torch.zeros(2048)}, []), 1, time_dim=0)
    leaf = big.renew().storage["obs"]  # over SLAB_MAX_BATCH_BYTES: allocated alone
    assert leaf.untyped_storage().nbytes() == leaf.numel() * 4
