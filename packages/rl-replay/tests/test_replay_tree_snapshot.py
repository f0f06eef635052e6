"""A priority tree in a dump: a base file and deltas of the leaves that changed."""

from __future__ import annotations

import os

import pytest
import torch
from rl_replay import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from rl_replay._tree_choice import TREE_ENV
from rl_replay._tree_snapshot import COMPACT_FRACTION
from tensordict import TensorDict

CAPACITY = 5000


@pytest.fixture(params=["torch", "numba"])
def kind(request, monkeypatch):
    monkeypatch.setenv(TREE_ENV, request.param)
    return request.param


def _rows(n, start=0):
    return TensorDict({"obs": torch.arange(start, start + n, dtype=torch.float32)}, [n])


def _buffer(seed=0):
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.7, beta=0.5, storage=LazyTensorStorage(CAPACITY), batch_size=64,
        generator=torch.Generator().manual_seed(seed),
    )  # fmt: skip
    return rb


def _tree_files(path):
    snapshot = path / (path / "LATEST").read_text()
    return {p.name: os.stat(p) for p in (snapshot / "tree").glob("*.bin")}


def _bits(rb):
    tree = rb.sampler.tree
    return tree._sum_buf.view(torch.int64).clone(), tree._min_buf.clone()


def _filled(rb, rows=CAPACITY):
    rb.extend(_rows(rows))
    g = torch.Generator().manual_seed(1)
    rb.update_priority(torch.arange(rows), torch.rand(rows, generator=g) * 5)


def test_a_dump_after_a_few_updates_writes_their_leaves_and_links_the_base(kind, tmp_path):
    rb = _buffer()
    _filled(rb, CAPACITY - 10)
    rb.dumps(tmp_path / "ckpt", keep=1)  # keep=1: a delta over the newest
    first = _tree_files(tmp_path / "ckpt")
    index = rb.sample(return_info=True)[1]["index"]
    rb.update_priority(index, torch.rand(64) + 1)
    rb.extend(_rows(10, start=10**6))  # new rows: their leaves get the max priority
    rb.dumps(tmp_path / "ckpt", keep=1)
    second = _tree_files(tmp_path / "ckpt")
    assert second["base.bin"].st_ino == first["base.bin"].st_ino  # linked, not written
    changed = len(set(index.tolist()) | set(range(CAPACITY - 10, CAPACITY)))
    assert second["delta.0.bin"].st_size == 24 * changed  # index, sum and min per leaf
    restored = _buffer()
    restored.loads(tmp_path / "ckpt")
    for a, b in zip(_bits(restored), _bits(rb), strict=True):
        assert torch.equal(a, b)  # inner nodes rebuilt to the very bits updates made
    rb._generator.manual_seed(5)
    restored._generator.manual_seed(5)
    rb.sampler._draws, restored.sampler._draws = [], []
    assert torch.equal(rb.sample(return_info=True)[1]["index"],
                       restored.sample(return_info=True)[1]["index"])  # fmt: skip


def test_deltas_past_a_quarter_of_the_leaves_compact_into_a_new_base(kind, tmp_path):
    rb = _buffer()
    _filled(rb)
    rb.dumps(tmp_path / "ckpt", keep=1)
    first = _tree_files(tmp_path / "ckpt")
    step = int(COMPACT_FRACTION * CAPACITY) // 2 - 1
    for k in range(2):  # two deltas, together just under the limit
        rb.update_priority(torch.arange(k * step, (k + 1) * step), torch.full((step,), 2.0))
        rb.dumps(tmp_path / "ckpt", keep=1)
    files = _tree_files(tmp_path / "ckpt")
    assert sorted(files) == ["base.bin", "delta.0.bin", "delta.1.bin"]
    assert files["base.bin"].st_ino == first["base.bin"].st_ino
    rb.update_priority(torch.arange(2 * step, 3 * step), torch.full((step,), 3.0))
    rb.dumps(tmp_path / "ckpt", keep=1)
    files = _tree_files(tmp_path / "ckpt")
    assert sorted(files) == ["base.bin"] and files["base.bin"].st_ino != first["base.bin"].st_ino
    restored = _buffer()
    restored.loads(tmp_path / "ckpt")
    assert torch.equal(_bits(restored)[0], _bits(rb)[0])


def test_a_restored_buffer_continues_the_chain_and_empty_starts_a_new_base(kind, tmp_path):
    rb = _buffer()
    _filled(rb)
    rb.dumps(tmp_path / "a")
    base = _tree_files(tmp_path / "a")["base.bin"].st_ino
    restored = _buffer()
    restored.loads(tmp_path / "a")
    restored.update_priority(torch.tensor([3, 7]), torch.tensor([9.0, 0.5]))
    restored.dumps(tmp_path / "b", base=tmp_path / "a")
    files = _tree_files(tmp_path / "b")
    assert files["base.bin"].st_ino == base and files["delta.0.bin"].st_size == 24 * 2
    again = _buffer()
    again.loads(tmp_path / "b")
    assert torch.equal(_bits(again)[0], _bits(restored)[0])
    assert float(again.sampler.tree.leaves[3]) == pytest.approx((9.0 + again.sampler.eps) ** 0.7)
    restored.empty()
    restored.extend(_rows(3))
    restored.dumps(tmp_path / "b")
    assert sorted(_tree_files(tmp_path / "b")) == ["base.bin"]  # every leaf changed
    again.loads(tmp_path / "b")
    assert again.sampler.tree.written(torch.arange(CAPACITY)).sum() == 3
