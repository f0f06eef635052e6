"""Incremental dumps: a checkpoint writes the chunks that changed and links the others."""

from __future__ import annotations

import os

import pytest
import torch
from rl_replay import LazyTensorStorage, ReplayBuffer
from rl_replay._snapshot import CHUNK_ROWS

from ._chunked import assert_same_content, content, numbered_rows, prioritized_buffer


def _snapshot(path):
    return path / (path / "LATEST").read_text()


def _inodes(snapshot):
    return {p.name: os.stat(p).st_ino for p in (snapshot / "data").glob("*.bin")}


@pytest.mark.parametrize("kind", ["tensor", "memmap"])
def test_a_second_dump_links_the_chunks_no_row_of_which_was_written(kind, tmp_path):
    rb = prioritized_buffer(tmp_path / "scratch" if kind == "memmap" else None)
    rb.extend(numbered_rows(2 * CHUNK_ROWS + 10))  # chunks 0, 1, 2 hold data
    rb.dumps(tmp_path / "ckpt", keep=1)  # keep=1: links from the newest
    first = _inodes(_snapshot(tmp_path / "ckpt"))
    rb.extend(numbered_rows(50, start=10**6))  # rows of chunk 2 only
    rb.update_priority(torch.arange(5), torch.full((5,), 3.0))  # priorities: not row data
    rb.dumps(tmp_path / "ckpt", keep=1)
    second = _inodes(_snapshot(tmp_path / "ckpt"))
    linked = {name for name in second if first.get(name) == second[name]}
    # four chunk files (each holding both leaves, obs and done); only chunk 2 was written again
    assert linked == {f"{chunk}.bin" for chunk in (0, 1, 3)}
    other = prioritized_buffer(tmp_path / "other" if kind == "memmap" else None)
    other.loads(tmp_path / "ckpt")
    assert_same_content(content(other), content(rb))
    assert len(other) == len(rb) and other.writer.state_dict() == rb.writer.state_dict()


def test_a_restored_buffer_links_from_its_own_snapshot_only(tmp_path):
    rb = prioritized_buffer()
    rb.extend(numbered_rows(CHUNK_ROWS + 5))
    rb.dumps(tmp_path / "a")
    rb.extend(numbered_rows(10, start=10**6))
    rb.dumps(tmp_path / "b")  # a later snapshot, not the one loaded below
    restored = prioritized_buffer()
    restored.loads(tmp_path / "a")
    restored.dumps(tmp_path / "c", base=tmp_path / "b")  # b is unknown to it: nothing linked
    assert not set(_inodes(_snapshot(tmp_path / "c")).values()) & set(
        _inodes(_snapshot(tmp_path / "b")).values()
    )
    restored.dumps(tmp_path / "d", base=tmp_path / "c")  # c is its own: everything linked
    assert _inodes(_snapshot(tmp_path / "d")) == _inodes(_snapshot(tmp_path / "c"))
    check = prioritized_buffer()
    check.loads(tmp_path / "d")
    assert_same_content(content(check), content(restored))


def test_two_dim_storage_round_trips_in_chunks(tmp_path):
    rb = ReplayBuffer(storage=LazyTensorStorage(2 * CHUNK_ROWS + 8, ndim=2))
    block = torch.arange(2 * 100, dtype=torch.float64).reshape(2, 100)  # [envs, T]
    rb.extend(block)
    rb.dumps(tmp_path / "ckpt")
    other = ReplayBuffer(storage=LazyTensorStorage(2 * CHUNK_ROWS + 8, ndim=2))
    other.loads(tmp_path / "ckpt")
    assert torch.equal(other[:], rb[:]) and len(other) == 200


def test_a_shared_memmap_storage_stops_linking(tmp_path):
    """Pickled to another process, which may write the files unseen: every chunk is written."""
    import pickle

    rb = prioritized_buffer(tmp_path / "scratch")
    rb.extend(numbered_rows(CHUNK_ROWS + 5))
    rb.dumps(tmp_path / "ckpt")
    first = _inodes(_snapshot(tmp_path / "ckpt"))
    pickle.dumps(rb.storage)
    rb.dumps(tmp_path / "ckpt")
    assert not set(first.values()) & set(_inodes(_snapshot(tmp_path / "ckpt")).values())


def test_with_keep_2_the_newest_and_its_fallback_share_no_file(tmp_path):
    rb = prioritized_buffer(None)
    rb.extend(numbered_rows(2 * CHUNK_ROWS + 10))
    saved = []
    for k in range(3):
        rb.extend(numbered_rows(50, start=10**6 * (k + 1)))  # chunk 2 only
        rb.dumps(tmp_path / "ckpt")
        saved.append(content(rb))
    kept = sorted(p for p in (tmp_path / "ckpt").iterdir() if p.is_dir())
    assert len(kept) == 2
    older, newest = (_inodes(p) for p in kept)
    assert not set(older.values()) & set(newest.values())  # no inode shared
    # yet the third dump linked chunks 0, 1, 3 from the first (removed by its commit)
    assert all(os.stat(kept[1] / "data" / f"{c}.bin").st_nlink == 1 for c in (0, 1, 3))
    with open(kept[1] / "data" / "0.bin", "r+b") as f:  # truncate the newest's chunk
        f.truncate(100)
    other = prioritized_buffer(None)
    with pytest.warns(RuntimeWarning, match=rf"{kept[1].name}: data/0.bin: expected \d+ bytes"):
        other.loads(tmp_path / "ckpt")
    assert_same_content(content(other), saved[1])  # the fallback: the second dump, whole
