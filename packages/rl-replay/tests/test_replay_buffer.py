"""ReplayBuffer: API, writers, threads, prefetch and checkpoints."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest
import rl_replay
import torch
from rl_replay import (
    CheckpointError,
    ImmutableDatasetWriter,
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    ReplayBufferError,
    SamplerWithoutReplacement,
    TensorDictMaxValueWriter,
    TensorDictPrioritizedReplayBuffer,
    TensorDictReplayBuffer,
)
from tensordict import TensorDict


def _rows(n: int, start: int = 0) -> TensorDict:
    x = torch.arange(start, start + n)
    return TensorDict({"obs": x.float().unsqueeze(1).expand(n, 4).clone(), "x": x}, [n])


def test_every_exported_name_imports():
    assert sorted(rl_replay.__all__) == rl_replay.__all__
    for name in rl_replay.__all__:
        assert getattr(rl_replay, name) is not None


def test_ppo_style_buffer_yields_each_row_once():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(64), sampler=SamplerWithoutReplacement(), batch_size=16
    )
    rb.extend(_rows(64))
    seen = torch.cat([b["x"] for b in rb])
    assert sorted(seen.tolist()) == list(range(64))
    rb.empty()
    assert len(rb) == 0


def test_add_and_transform_and_collate():
    rb = ReplayBuffer(
        storage=LazyTensorStorage(10), transform=lambda t: t * 2, collate_fn=lambda t: t + 1
    )
    assert rb.add(torch.tensor(5)) == 0
    assert rb.sample(3).tolist() == [12, 12, 12]


def test_constructor_validates_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        ReplayBuffer(batch_size=0)
    with pytest.raises(ValueError, match="storage"):
        ReplayBuffer(storage="big")
    with pytest.raises(ValueError, match="prefetch"):
        ReplayBuffer(prefetch=2)


def test_max_value_writer_keeps_the_best_rows():
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(3), writer=TensorDictMaxValueWriter(rank_key="reward")
    )
    for chunk in torch.tensor([1.0, 9.0, 4.0, 7.0, 2.0, 8.0]).split(2):
        rb.extend(TensorDict({"reward": chunk}, [len(chunk)]))
    assert sorted(rb.storage.get(torch.arange(3))["reward"].tolist()) == [7.0, 8.0, 9.0]


def test_immutable_writer_refuses_writes():
    storage = LazyTensorStorage(4)
    storage.set(torch.arange(4), torch.arange(4))
    rb = ReplayBuffer(storage=storage, writer=ImmutableDatasetWriter())
    with pytest.raises(ReplayBufferError, match="ImmutableDatasetWriter"):
        rb.extend(torch.arange(2))
    assert len(rb) == 4


@pytest.mark.timeout(60)
def test_one_writer_and_concurrent_samplers_see_whole_rows():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(500), batch_size=64)
    rb.extend(_rows(100))
    errors: list[BaseException] = []
    stop = threading.Event()

    def sampler():
        try:
            while not stop.is_set():
                s = rb.sample()
                # every row is whole: its obs columns all equal its x
                assert (s["obs"] == s["x"].float().unsqueeze(1)).all()
        except BaseException as err:  # reported below
            errors.append(err)

    threads = [threading.Thread(target=sampler) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(200):
        rb.extend(_rows(37, start=1000 + 37 * i))
    stop.set()
    for t in threads:
        t.join(timeout=30)
    assert not errors and len(rb) == 500


@pytest.mark.timeout(60)
def test_prefetch_hands_out_samples_from_a_background_thread():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(100), batch_size=8, prefetch=3)
    rb.extend(_rows(50))
    for _ in range(10):
        s = rb.sample()
        assert s.batch_size == (8,) and (s["x"] < 50).all()
    rb.close()
    assert all(t.name != "rl-replay-prefetch" for t in threading.enumerate())


def _filled_prioritized(storage):
    torch.manual_seed(0)
    rb = TensorDictPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=storage, batch_size=16)
    rb.extend(_rows(40))
    td = rb.sample()
    td["td_error"] = torch.rand(16)
    rb.update_tensordict_priority(td)
    return rb


@pytest.mark.parametrize("kind", ["tensor", "memmap", "memmap-in-place"])
def test_checkpoint_round_trip(tmp_path, kind):
    ckpt = tmp_path / "ckpt"
    make = {
        "tensor": lambda: LazyTensorStorage(64),
        "memmap": lambda: LazyMemmapStorage(64, scratch_dir=tmp_path / "scratch", existsok=True),
        "memmap-in-place": lambda: LazyMemmapStorage(64, scratch_dir=ckpt, existsok=True),
    }[kind]
    rb = _filled_prioritized(make())
    rb.dumps(ckpt)
    if kind == "memmap-in-place":  # no copy of the data in the snapshot
        assert (ckpt / "x.memmap").exists()
        assert sum(f.stat().st_size for f in (ckpt / "ckpt-000000").iterdir()) < 20_000
    restored = TensorDictPrioritizedReplayBuffer(alpha=0.6, beta=0.4, storage=make(), batch_size=16)
    restored.loads(ckpt)
    assert len(restored) == len(rb) == 40
    assert torch.equal(restored.sampler.tree.leaves, rb.sampler.tree.leaves)
    assert restored.writer.state_dict() == rb.writer.state_dict()
    assert (restored.sample() == rb.sample()).all()  # same RNG state, same data


def test_loading_a_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="LATEST"):
        TensorDictReplayBuffer().loads(tmp_path)


_KILLED_DUMP = """
import os, signal, sys, torch
from tensordict import TensorDict
from rl_replay import LazyTensorStorage, TensorDictReplayBuffer
import rl_replay._checkpoint as ck
rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
rb.extend(TensorDict({"x": torch.full((1000,), 2)}, [1000]))
real_save = ck.torch.save
def save_then_die(obj, f):
    real_save(obj, f)
    f.flush()
    os.kill(os.getpid(), signal.SIGKILL)  # half-way: snapshot written, LATEST not updated
ck.torch.save = save_then_die
rb.dumps(sys.argv[1])
"""


@pytest.mark.timeout(240)
def test_a_dump_killed_half_way_leaves_the_previous_checkpoint(tmp_path):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
    rb.extend(TensorDict({"x": torch.full((10,), 1)}, [10]))
    rb.dumps(tmp_path)
    proc = subprocess.run([sys.executable, "-c", _KILLED_DUMP, str(tmp_path)], timeout=230)
    assert proc.returncode == -signal.SIGKILL
    restored = TensorDictReplayBuffer(storage=LazyTensorStorage(1000))
    restored.loads(tmp_path)
    assert len(restored) == 10 and (restored.storage.get(torch.arange(10))["x"] == 1).all()
    rb.dumps(tmp_path)  # the next dump cleans the leftovers up
    kept = ["LATEST", "ckpt-000000", "ckpt-000001"]  # keep=2: the newest and its fallback
    assert sorted(p.name for p in tmp_path.iterdir()) == kept
    assert os.path.exists(tmp_path / "LATEST")


def test_samples_carry_index_and_keep_stored_keys_nested_or_flat():
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=1.0, beta=1.0, storage=LazyTensorStorage(8), batch_size=5
    )
    rows = TensorDict({"obs": torch.arange(8.0).unsqueeze(1), ("next", "r"): torch.arange(8)}, [8])
    rb.extend(rows)
    td = rb.sample()
    assert set(td.keys(True, True)) == {"obs", ("next", "r"), "index", "priority_weight"}
    assert torch.equal(td["obs"].squeeze(1).long(), td["index"])
    assert torch.equal(td["next", "r"], td["index"])
    flat = TensorDictReplayBuffer(storage=LazyTensorStorage(8), batch_size=5)
    flat.extend(rows.exclude("next"))
    td = flat.sample()
    assert set(td.keys()) == {"obs", "index"} and td.batch_size == (5,)
    assert torch.equal(td["obs"].squeeze(1).long(), td["index"])
