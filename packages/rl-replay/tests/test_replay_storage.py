"""Storages: layouts, ndim=2, bad input leaves data unchanged, memmap across processes."""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    CompressedStorage,
    LazyMemmapStorage,
    LazyTensorStorage,
    ListStorage,
    ReplayBuffer,
    StorageLayoutError,
    TensorDictReplayBuffer,
)
from tensordict import TensorDict


def _rows(n: int, start: int = 0) -> TensorDict:
    x = torch.arange(start, start + n)
    return TensorDict(
        {
            "observation": x.float().unsqueeze(1).expand(n, 4).clone(),
            "action": x.unsqueeze(1),
            ("next", "reward"): x.float().unsqueeze(1),
            ("next", "done"): torch.zeros(n, 1, dtype=torch.bool),
        },
        [n],
    )


def test_round_robin_overwrites_oldest_and_keeps_nested_keys():
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(_rows(8))
    rb.extend(_rows(5, start=100))
    assert len(rb) == 10
    stored = rb.storage.get(torch.arange(10))
    assert stored["action"].squeeze(1).tolist() == [102, 103, 104, 3, 4, 5, 6, 7, 100, 101]
    assert stored["next", "reward"].shape == (10, 1)


@pytest.mark.parametrize(
    "bad, match",
    [
        (lambda td: td.exclude("action"), "missing"),
        (lambda td: td.set("observation", torch.zeros(3, 5)), "per-row shape"),
        (lambda td: td.set("action", td["action"].float()), "dtype"),
        (lambda td: td.set("extra", torch.zeros(3)), "unexpected"),
    ],
)
def test_failed_extend_leaves_buffer_unchanged(bad, match):
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10), batch_size=4)
    rb.extend(_rows(6))
    before = rb.storage.get(torch.arange(6)).clone()
    cursor = rb.writer.state_dict()
    with pytest.raises(StorageLayoutError, match=match):
        rb.extend(bad(_rows(3, start=50)))
    assert len(rb) == 6 and rb.writer.state_dict() == cursor
    assert (rb.storage.get(torch.arange(6)) == before).all()


def test_checked_key_structures_are_remembered_and_still_refuse_bad_leaves():
    # a write's leaves are matched to the stored ones by key whatever the TensorDict's own
    # key order, also once a structure is remembered; a bad leaf is still named
    rb = TensorDictReplayBuffer(storage=LazyTensorStorage(10))
    rb.extend(_rows(2))
    reordered = _rows(2, start=10)
    reordered = TensorDict(
        {"next": reordered["next"], "action": reordered["action"],
         "observation": reordered["observation"]}, [2]
    )
    for _ in range(2):  # checked in full, then by the remembered order
        rb.extend(reordered)
        rb.extend(_rows(2, start=20))
    stored = rb.storage.get(torch.arange(10))
    assert stored["action"].squeeze(1).tolist() == [0, 1, 10, 11, 20, 21, 10, 11, 20, 21]
    assert stored["next", "reward"].squeeze(1).tolist() == [0, 1, 10, 11, 20, 21, 10, 11, 20, 21]
    assert (stored["observation"][:, 0] == stored["next", "reward"][:, 0]).all()
    bad = _rows(2, start=30)
    bad["next", "reward"] = bad["next", "reward"].double()
    with pytest.raises(StorageLayoutError, match=r"data\['next.reward'\]: expected dtype"):
        rb.extend(bad)
    bad = reordered.clone()
    bad["observation"] = torch.zeros(2, 3)
    with pytest.raises(StorageLayoutError, match=r"data\['observation'\]: expected per-row"):
        rb.extend(bad)
    assert len(rb) == 10 and rb.writer.state_dict()["cursor"] == 0


def test_ndim2_storage_writes_along_time_and_samples_stored_rows():
    storage = LazyTensorStorage(40, ndim=2)
    rb = TensorDictReplayBuffer(storage=storage, batch_size=64)
    t = torch.arange(6).expand(4, 6)
    env = torch.arange(4).unsqueeze(1).expand(4, 6)
    rb.extend(TensorDict({"t": t, "env": env}, [4, 6]))
    assert len(rb) == 24 and storage.extend_capacity == 10
    s = rb.sample()
    # the flat index says where each row lives: env * capacity_t + t
    assert (s["index"] == s["env"] * 10 + s["t"]).all()
    assert (s["t"] < 6).all()
    rb.extend(TensorDict({"t": t + 6, "env": env}, [4, 6]))  # wraps along time
    assert len(rb) == 40
    assert storage.leaf("t")[:, :2].tolist() == [[10, 11]] * 4
    with pytest.raises(StorageLayoutError, match="envs"):
        rb.extend(TensorDict({"t": t[:3], "env": env[:3]}, [3, 6]))


def test_list_storage_stacks_tensors_and_keeps_objects():
    rb = ReplayBuffer(storage=ListStorage(3), batch_size=2)
    rb.extend([{"a": 1}, {"b": 2}, {"c": 3}, {"d": 4}])
    assert len(rb) == 3
    assert all(isinstance(x, dict) for x in rb.sample())
    rb2 = ReplayBuffer(storage=ListStorage(5))
    rb2.extend([torch.ones(2), torch.zeros(2)])
    assert rb2.sample(3).shape == (3, 2)


@pytest.mark.parametrize("codec", ["zlib", "zstd"])
def test_compressed_storage_round_trip_and_names_its_codec(codec):
    storage = CompressedStorage(8, codec=codec)
    rb = TensorDictReplayBuffer(storage=storage)
    data = _rows(5)
    data["pixels"] = torch.zeros(5, 3, 16, 16, dtype=torch.uint8)
    rb.extend(data)
    got = storage.get(torch.tensor([4, 0]))
    assert (got == data[torch.tensor([4, 0])]).all()
    assert storage.state_dict()["codec"] == codec
    assert storage.compressed_bytes() < data.bytes()
    restored = CompressedStorage(8, codec="zlib")
    restored.load_state_dict(storage.state_dict())
    assert restored.codec == codec and (restored.get(torch.arange(5)) == data).all()


def test_compressed_storage_rejects_unknown_codec():
    with pytest.raises(ValueError, match="codec"):
        CompressedStorage(4, codec="lz77")


def test_memmap_files_live_in_scratch_dir_and_are_removed(tmp_path):
    storage = LazyMemmapStorage(100, scratch_dir=tmp_path / "mm")
    rb = TensorDictReplayBuffer(storage=storage, batch_size=4)
    rb.extend(_rows(10))
    files = sorted(p.name for p in (tmp_path / "mm").iterdir())
    assert files == [
        "action.memmap",
        "next.done.memmap",
        "next.reward.memmap",
        "observation.memmap",
    ]
    assert (rb.sample()["observation"][:, 0] == rb.sample()["observation"][:, 0]).numel() == 4
    storage.cleanup()
    assert list((tmp_path / "mm").iterdir()) == []


def test_memmap_refuses_existing_files_unless_existsok(tmp_path):
    first = LazyMemmapStorage(10, scratch_dir=tmp_path, auto_cleanup=False)
    first.set(torch.arange(2), torch.ones(2, 3))
    second = LazyMemmapStorage(10, scratch_dir=tmp_path)
    with pytest.raises(FileExistsError, match="existsok"):
        second.set(torch.arange(2), torch.ones(2, 3))
    third = LazyMemmapStorage(10, scratch_dir=tmp_path, existsok=True)
    third.set(torch.arange(2), torch.full((2, 3), 7.0))
    assert first.get(torch.tensor([0])).tolist() == [[7.0, 7.0, 7.0]]  # same file
    third.cleanup()


_CHILD = """
import pickle, sys, torch
from tensordict import TensorDict
storage = pickle.load(open(sys.argv[1], "rb"))
print(storage.get(torch.arange(len(storage)))["action"].squeeze(1).tolist())
row = storage.get(torch.tensor([0])).clone()
row["action"] = torch.tensor([[999]])
storage.set(torch.tensor([0]), row)  # written back for the parent
"""


@pytest.mark.timeout(240)
def test_memmap_data_is_shared_with_another_process(tmp_path):
    import pickle
    import subprocess
    import sys

    storage = LazyMemmapStorage(50, scratch_dir=tmp_path / "mm")
    storage.set(torch.arange(5), _rows(5, start=10))
    (tmp_path / "s.pkl").write_bytes(pickle.dumps(storage))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "s.pkl")],
        capture_output=True,
        text=True,
        timeout=230,
        check=True,
    )
    assert out.stdout.strip() == "[10, 11, 12, 13, 14]"
    assert storage.get(torch.tensor([0]))["action"].item() == 999
    assert len(list((tmp_path / "mm").iterdir())) == 4  # the child removed nothing
    storage.cleanup()


@pytest.mark.parametrize("ndim", [1, 2])
def test_memmap_writes_match_tensor_storage_across_wraparound(tmp_path, ndim):
    def block(i):
        shape = [3, 7] if ndim == 2 else [7]
        x = torch.arange(i * 21, i * 21 + 21)[: 21 if ndim == 2 else 7].reshape(shape)
        return TensorDict({"x": x, "y": x.double().unsqueeze(-1) * 2, "b": x % 2 == 0}, shape)

    size = 30 if ndim == 2 else 10  # ndim=2: 3 envs x 10 steps
    ref = TensorDictReplayBuffer(storage=LazyTensorStorage(size, ndim=ndim))
    mm = TensorDictReplayBuffer(storage=LazyMemmapStorage(size, scratch_dir=tmp_path, ndim=ndim))
    for i in range(5):  # wraps around twice
        assert torch.equal(ref.extend(block(i)), mm.extend(block(i)))
        everything = ref.storage.valid_flat(torch.arange(len(ref)))
        assert (ref.storage.get(everything) == mm.storage.get(everything)).all()
    mm.storage.cleanup()


@pytest.mark.parametrize("kind", ["memmap", "compressed"])
def test_failed_extend_leaves_other_storages_unchanged(tmp_path, kind):
    storage = (
        LazyMemmapStorage(10, scratch_dir=tmp_path) if kind == "memmap" else CompressedStorage(10)
    )
    rb = TensorDictReplayBuffer(storage=storage)
    rb.extend(_rows(4))
    before = storage.get(torch.arange(4)).clone()
    with pytest.raises(StorageLayoutError, match="dtype"):
        rb.extend(_rows(3, start=50).set("action", torch.zeros(3, 1)))
    assert len(rb) == 4 and (storage.get(torch.arange(4)) == before).all()
    assert rb.writer.state_dict() == {"cursor": 4}
