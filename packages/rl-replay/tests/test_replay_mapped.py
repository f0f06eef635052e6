"""A memmap storage restored without copying: its chunks map the snapshot's files until
a write makes them the storage's own (``rl_replay._mapped``)."""

from __future__ import annotations

import gc
import hashlib
import json
import logging
import os
import pickle
import shutil
import sys

import pytest
import torch
from rl_profiling.atomic import file_record
from rl_replay import (
    LazyMemmapStorage,
    LazyTensorStorage,
    ReplayBuffer,
    TensorDictPrioritizedReplayBuffer,
)
from rl_replay._snapshot import CHUNK_ROWS
from rl_replay.exceptions import CheckpointError

from ._chunked import CAPACITY, assert_same_content, content, numbered_rows, prioritized_buffer

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="chunks are mapped in place on Linux only"
)

CHUNKS = 4


def _digests(path):
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}  # fmt: skip


def _mapped_lines(*folders):
    with open("/proc/self/maps") as f:
        return [line for line in f if any(str(folder) in line for folder in folders)]


def _saved(tmp_path, rows=CAPACITY):
    """A buffer of ``rows`` rows and priorities, dumped to ``tmp_path/ckpt``."""
    rb = prioritized_buffer(tmp_path / "scratch")
    rb.extend(numbered_rows(rows))
    rb.update_priority(torch.arange(0, rows, 3), torch.rand(len(range(0, rows, 3))) + 0.5)
    rb.dumps(tmp_path / "ckpt")
    return rb


def _drop(*buffers):
    for rb in buffers:
        if hasattr(rb.storage, "cleanup"):
            rb.storage.cleanup()
    del buffers
    gc.collect()


def test_a_restore_maps_the_chunks_and_copies_nothing(tmp_path):
    rb = _saved(tmp_path)
    restored = prioritized_buffer(tmp_path / "restored")
    restored.loads(tmp_path / "ckpt")
    assert restored.storage.borrowed_chunks == CHUNKS
    # the storage's own files exist at full size but hold no block yet: nothing was copied
    for name in restored.storage.filenames:
        assert os.stat(name).st_size > 0 and os.stat(name).st_blocks == 0
    assert_same_content(content(restored), content(rb))
    assert len(restored) == len(rb) and restored.writer.state_dict() == rb.writer.state_dict()
    _drop(rb, restored)


def test_the_checkpoint_stays_bit_for_bit_after_the_resumed_run_writes_every_row(tmp_path):
    rb = _saved(tmp_path)
    saved, before = content(rb), _digests(tmp_path / "ckpt")
    restored = prioritized_buffer(tmp_path / "restored")
    restored.loads(tmp_path / "ckpt")
    view = restored.storage.leaf("obs")  # taken while every chunk is borrowed
    restored.extend(numbered_rows(10, start=10**6))  # chunk 0 only
    assert restored.storage.borrowed_chunks == CHUNKS - 1
    for start in range(0, CAPACITY, 20_000):  # then every row, wrapping around
        restored.extend(numbered_rows(min(20_000, CAPACITY - start), start=2 * 10**6 + start))
    assert restored.storage.borrowed_chunks == 0
    # the view of before the writes sees them: the chunks were remapped at the same address
    assert torch.equal(view[:, 0], restored[:]["obs"][:, 0])
    assert not torch.equal(view, saved[0])
    assert _digests(tmp_path / "ckpt") == before
    again = prioritized_buffer(tmp_path / "again")
    again.loads(tmp_path / "ckpt")
    assert_same_content(content(again), saved)
    _drop(rb, restored, again)


def test_deleting_the_checkpoint_while_borrowing_from_it_breaks_nothing(tmp_path):
    rb = _saved(tmp_path)
    saved = content(rb)
    restored = prioritized_buffer(tmp_path / "restored")
    restored.loads(tmp_path / "ckpt")
    shutil.rmtree(tmp_path / "ckpt")  # as Checkpointer removes an old checkpoint
    assert_same_content(content(restored), saved)
    restored.extend(numbered_rows(5, start=10**6))  # owning a chunk copies it from the mapping
    obs = restored[:]["obs"]
    assert torch.equal(obs[5:], saved[0][5:]) and torch.equal(obs[:5, 0], torch.arange(5.0) + 10**6)
    restored.dumps(tmp_path / "next")  # borrowed chunks are read through the mapping
    check = prioritized_buffer(tmp_path / "check")
    check.loads(tmp_path / "next")
    assert torch.equal(check[:]["obs"], obs)
    _drop(rb, restored, check)


def test_a_save_after_a_lazy_restore_links_the_borrowed_chunks(tmp_path):
    _saved(tmp_path)
    restored = prioritized_buffer(tmp_path / "restored")
    restored.loads(tmp_path / "ckpt")
    first = tmp_path / "ckpt" / (tmp_path / "ckpt" / "LATEST").read_text()
    inodes = {p.name: p.stat().st_ino for p in (first / "data").glob("*.bin")}
    restored.extend(numbered_rows(10, start=10**6))  # chunk 0 changes
    restored.dumps(tmp_path / "ckpt", keep=1)  # links 1..3 from the one it borrows, deletes it
    second = tmp_path / "ckpt" / (tmp_path / "ckpt" / "LATEST").read_text()
    assert not first.exists()
    linked = {p.name for p in (second / "data").glob("*.bin") if inodes[p.name] == p.stat().st_ino}
    assert linked == {f"{chunk}.bin" for chunk in (1, 2, 3)}
    check = prioritized_buffer(tmp_path / "check")
    check.loads(tmp_path / "ckpt")
    assert_same_content(content(check), content(restored))
    _drop(restored, check)


def test_a_pickled_storage_owns_its_chunks_first(tmp_path):
    """Another process opens the storage's files, so they must hold every row."""
    rb = _saved(tmp_path)
    restored = prioritized_buffer(tmp_path / "restored")
    restored.loads(tmp_path / "ckpt")
    twin = pickle.loads(pickle.dumps(restored.storage))  # opens the files, as a worker would
    assert restored.storage.borrowed_chunks == 0
    assert torch.equal(twin.get(torch.arange(CAPACITY))["obs"], rb[:]["obs"])
    _drop(rb, restored)


def test_a_dump_into_its_own_scratch_dir_owns_every_chunk_first(tmp_path):
    """Such a dump records the storage's files, which must then hold every row."""
    rb = _saved(tmp_path)
    restored = prioritized_buffer(tmp_path / "restored")
    restored.loads(tmp_path / "ckpt")
    restored.dumps(tmp_path / "restored")  # in place: the files are the checkpoint
    assert restored.storage.borrowed_chunks == 0
    check = prioritized_buffer(tmp_path / "check")
    check.loads(tmp_path / "restored")
    assert_same_content(content(check), content(rb))
    _drop(rb, restored, check)


def test_a_two_dim_memmap_storage_is_restored_lazily(tmp_path):
    def make(name):
        storage = LazyMemmapStorage(2 * CHUNK_ROWS + 8, scratch_dir=tmp_path / name, ndim=2)
        return ReplayBuffer(storage=storage)

    rb = make("scratch")
    rb.extend(torch.arange(2 * 100, dtype=torch.float64).reshape(2, 100))  # [envs, T]
    rb.dumps(tmp_path / "ckpt")
    restored = make("restored")
    restored.loads(tmp_path / "ckpt")
    assert restored.storage.borrowed_chunks == 3 and torch.equal(restored[:], rb[:])
    restored.extend(torch.full((2, 3), -1.0, dtype=torch.float64))  # env 0: chunk 0; 1: chunk 1
    rb.extend(torch.full((2, 3), -1.0, dtype=torch.float64))
    assert torch.equal(restored[:], rb[:]) and restored.storage.borrowed_chunks == 1
    _drop(rb, restored)


def test_no_mapping_fd_or_folder_is_left_behind(tmp_path):
    rb = _saved(tmp_path)
    fds = len(os.listdir("/proc/self/fd"))
    storage = LazyMemmapStorage(CAPACITY)  # its own temporary folder
    restored = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=storage)
    restored.loads(tmp_path / "ckpt")
    restored.extend(numbered_rows(10, start=10**6))  # one chunk owned, three borrowed
    folder = storage.scratch_dir
    assert len(os.listdir("/proc/self/fd")) == fds  # no file kept open
    assert _mapped_lines(tmp_path / "ckpt", folder)
    del storage
    _drop(restored)
    assert not folder.exists()
    assert _mapped_lines(tmp_path / "ckpt", folder) == []
    _drop(rb)


@pytest.mark.parametrize("off_by", ["platform", "RL_REPLAY_LAZY_RESTORE"])
def test_where_chunks_cannot_be_mapped_the_restore_copies_and_says_so(
    off_by, tmp_path, monkeypatch, caplog
):
    import rl_replay._memmap as memmap

    rb = _saved(tmp_path)
    if off_by == "platform":
        reason = "mapping at a fixed address: not here"
        monkeypatch.setattr(memmap, "supported", lambda: reason)
    else:  # the user's switch
        reason = "turned off by RL_REPLAY_LAZY_RESTORE=0"
        monkeypatch.setenv("RL_REPLAY_LAZY_RESTORE", "0")
    restored = prioritized_buffer(tmp_path / "restored")
    with caplog.at_level(logging.WARNING, logger="rl_replay._memmap"):
        restored.loads(tmp_path / "ckpt")
    assert f"by copying its chunks: {reason}" in caplog.text
    assert restored.storage.borrowed_chunks == 0
    assert_same_content(content(restored), content(rb))
    _drop(rb, restored)


def test_a_bad_rl_replay_lazy_restore_is_named_and_loads_nothing(tmp_path, monkeypatch):
    rb = _saved(tmp_path)
    monkeypatch.setenv("RL_REPLAY_LAZY_RESTORE", "yes")
    other = prioritized_buffer(tmp_path / "other")
    with pytest.raises(ValueError, match="RL_REPLAY_LAZY_RESTORE: expected 0 or 1, received 'yes'"):
        other.loads(tmp_path / "ckpt")
    assert len(other) == 0
    _drop(rb, other)


@pytest.mark.parametrize("kind", ["tensor", "memmap"])
def test_a_chunk_file_of_the_wrong_size_is_refused_naming_it(kind, tmp_path):
    rb = _saved(tmp_path)
    snapshot = tmp_path / "ckpt" / (tmp_path / "ckpt" / "LATEST").read_text()
    with open(snapshot / "data" / "2.bin", "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        f.truncate(size - 4096)
    storage = LazyTensorStorage(CAPACITY) if kind == "tensor" else LazyMemmapStorage(CAPACITY)
    other = TensorDictPrioritizedReplayBuffer(alpha=0.7, beta=0.5, storage=storage)
    with pytest.raises(CheckpointError, match=rf"2\.bin: expected {size} bytes, got {size - 4096}"):
        other.loads(tmp_path / "ckpt")
    folder = getattr(storage, "scratch_dir", None)  # the memmap storage's own temporary one
    del storage
    _drop(rb, other)
    assert folder is None or not folder.exists()


def test_chunk_files_of_the_earlier_format_are_refused_with_what_to_do(tmp_path):
    rb = _saved(tmp_path)
    state_file = tmp_path / "ckpt" / (tmp_path / "ckpt" / "LATEST").read_text() / "state.pt"
    state = torch.load(state_file, weights_only=False)
    del state["storage"]["chunk_format"]  # as a dump of the one-file-a-key format wrote it
    torch.save(state, state_file)
    manifest = json.loads((state_file.parent / "manifest.json").read_text())
    manifest["files"]["state.pt"] = file_record(state_file)  # intact, of the earlier format
    (state_file.parent / "manifest.json").write_text(json.dumps(manifest))
    other = prioritized_buffer(tmp_path / "other")
    with pytest.raises(CheckpointError, match="expected chunk files of format 2 .* got format 1"):
        other.loads(tmp_path / "ckpt")
    _drop(rb, other)
