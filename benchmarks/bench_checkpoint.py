"""Run checkpoints (issue 26): save and restore a 1M-transition memmap buffer plus a run.

The run: a prioritized buffer over a ``LazyMemmapStorage`` of 1M CartPole transitions
(observation[4] f32, action i64, reward f32, done bool, next observation[4] f32: 53 bytes a
row, 50.5 MiB), a 64x64 MLP policy and its Adam optimiser, saved with
``rl_collectors.save_checkpoint``. Figures, each beside its reference measured in the same
run:

* the **first** save writes every chunk of rows: its time over the time to write the
  buffer's bytes to one new file and ``fsync`` it (the floor for writing them all);
* a save after one batch of 1,000 new rows (and their priorities) writes the chunks those
  rows touched and links the others: its time over the first save's (target: about the
  changed fraction, plus the fixed cost of the tree and the run's state, not 1);
* the run's state alone (no buffer), the cost every save pays;
* a restore of the first checkpoint into freshly built objects: its time over the same
  file write, and over the copying restore of the same checkpoint (the fallback where
  chunks cannot be mapped: each chunk copied into the storage's files with
  ``copy_file_range``; ``RL_REPLAY_LAZY_RESTORE=0`` turns mapping off). A memmap
  storage's chunks are mapped, not copied; the priority tree is built in memory from its
  saved leaves, the part of a restore that grows with the buffer;
* a restore of the checkpoint the small save wrote (its tree a base plus one delta): its
  time over the first restore's;
* the first write after a restore, a batch of 1,000 rows into a chunk that still maps the
  checkpoint's file (the write copies the chunk into the storage's file first): its time
  over the next batch's, written to the same chunk, now the storage's own;
* the storage alone (a uniform buffer, no tree): restoring 1M rows over the first restore
  (with the tree) and over the copying restore, and restoring 4M rows over 1M rows (a
  mapped restore costs a few system calls a chunk: 4 times the chunks), and the storage's
  save after the same 1,000 new rows at 4M rows over 1M rows (the same change in a buffer 4
  times the size: a ratio near 1 is a save that grows with the change, not the buffer).

The priority tree is saved as a base file of its leaves (16 bytes a row: sums and minima)
plus one delta per save of the leaves that changed (24 bytes each), a new base once the
deltas exceed a quarter of the leaves; every save fsyncs what it wrote.

Saves are single runs, restores (and the writes after them) medians of three, on whatever
machine this is (the disk's page cache included); compare the ratios.
``uv run python benchmarks/bench_checkpoint.py`` takes about a minute (it writes about
1 GB under the temporary folder and removes it).
"""

from __future__ import annotations

import logging
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch
from rl_collectors import load_checkpoint, save_checkpoint
from rl_replay import LazyMemmapStorage, ReplayBuffer, TensorDictPrioritizedReplayBuffer
from tensordict import TensorDict

ROWS = 1_000_000
BATCH = 1_000
REPEAT = 3  # restores (and the writes after them) are medians of this many
ROW_BYTES = 4 * 4 + 8 + 4 + 1 + 4 * 4


def _rows(n: int, start: int = 0) -> TensorDict:
    x = torch.arange(start, start + n, dtype=torch.float32)
    obs = x.unsqueeze(1).expand(n, 4).clone()
    return TensorDict(
        {"observation": obs, "action": (x % 2).long(), "next": {"observation": obs + 1,
         "reward": torch.ones(n), "done": (x % 200 == 0)}},
        [n],
    )  # fmt: skip


def _run(folder: Path) -> dict:
    rb = TensorDictPrioritizedReplayBuffer(
        alpha=0.6, beta=0.4, storage=LazyMemmapStorage(ROWS, scratch_dir=folder / "scratch"),
        batch_size=256,
    )  # fmt: skip
    policy = torch.nn.Sequential(torch.nn.Linear(4, 64), torch.nn.Tanh(), torch.nn.Linear(64, 2))
    return {"policy": policy, "optim": torch.optim.Adam(policy.parameters()), "buffer": rb}


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _write_synced(path: Path, raw) -> None:
    with open(path, "wb") as f:
        f.write(memoryview(raw))
        f.flush()
        os.fsync(f.fileno())


def _row(figure: str, value: float, unit: str, limit: float, ratio: float) -> dict:
    return {"figure": figure, "value": value, "unit": unit, "limit": limit, "ratio": ratio}


def _copying(fn) -> float:
    """``fn``'s time with lazy restores off (``RL_REPLAY_LAZY_RESTORE=0``): memmap chunks
    copied, the fallback's cost."""
    os.environ["RL_REPLAY_LAZY_RESTORE"] = "0"
    logging.disable(logging.WARNING)  # its log line, once per restore
    try:
        return _timed(fn)
    finally:
        del os.environ["RL_REPLAY_LAZY_RESTORE"]
        logging.disable(logging.NOTSET)


def _storage_restores(folder: Path, rows: int, copied: bool = False) -> dict[str, float]:
    """A uniform buffer of ``rows`` memmap rows (no tree), the storage alone: the dump after
    ``BATCH`` new rows (into a folder holding the previous dump), and the restore, mapped
    and (when ``copied``) copied."""

    def make(name: str) -> ReplayBuffer:
        return ReplayBuffer(storage=LazyMemmapStorage(rows, scratch_dir=folder / name))

    rb = make("scratch")
    for start in range(0, rows, 100_000):
        rb.extend(_rows(min(100_000, rows - start), start))
    rb.dumps(folder / "ckpt")
    rb.extend(_rows(BATCH, 10**7))
    small_save = _timed(lambda: rb.dumps(folder / "ckpt"))
    rb.storage.cleanup()
    times = []
    for name, timer in [("mapped", _timed), ("copied", _copying)][: 1 + copied]:
        runs = []
        for i in range(REPEAT):
            fresh = make(f"{name}-{i}")
            runs.append(timer(lambda fresh=fresh: fresh.loads(folder / "ckpt")))
            assert len(fresh) == rows
            fresh.storage.cleanup()
        times.append(statistics.median(runs))
    shutil.rmtree(folder, ignore_errors=True)
    return {"save": small_save, "restore": times[0], "restore_copy": times[-1]}


def _first_writes(rb) -> tuple[float, float]:
    """A batch written to a borrowed chunk (owning it first), then one to the same chunk."""
    borrowed = rb.storage.borrowed_chunks
    first = _timed(lambda: rb.extend(_rows(BATCH, 10**7)))
    assert rb.storage.borrowed_chunks == borrowed - 1  # the batch fell in one chunk
    return first, _timed(lambda: rb.extend(_rows(BATCH, 2 * 10**7)))


def _restores(ckpt: Path, folder: Path) -> dict:
    """Medians of ``REPEAT`` restores, mapped and copied, and of the writes after each."""
    times: dict[str, list[float]] = {}
    for i in range(REPEAT):
        fresh = _run(folder / f"copied-{i}")
        times.setdefault("restore_copy", []).append(
            _copying(lambda fresh=fresh: load_checkpoint(ckpt, **fresh))
        )
        fresh["buffer"].storage.cleanup()
        fresh = _run(folder / f"fresh-{i}")
        restore = _timed(lambda fresh=fresh: load_checkpoint(ckpt, **fresh))
        times.setdefault("restore", []).append(restore)
        times["chunks"] = [fresh["buffer"].storage.borrowed_chunks]  # all mapped, none owned
        first, owned = _first_writes(fresh["buffer"])
        times.setdefault("write_borrowed", []).append(first)
        times.setdefault("write_owned", []).append(owned)
        fresh["buffer"].storage.cleanup()
    return {name: statistics.median(values) for name, values in times.items()}


def _measure(folder: Path) -> dict:
    parts = _run(folder)
    rb = parts["buffer"]
    for start in range(0, ROWS, 100_000):
        rb.extend(_rows(100_000, start))
    rb.update_priority(torch.arange(ROWS), torch.rand(ROWS))
    ckpt, t = folder / "ckpt", {}
    t["first"] = _timed(lambda: save_checkpoint(ckpt, **parts))
    raw = torch.ones(ROWS * ROW_BYTES, dtype=torch.uint8).numpy()
    t["copy"] = _timed(lambda: _write_synced(folder / "blob", raw))
    t.update(_restores(ckpt, folder))
    rb.extend(_rows(BATCH, 10**7))
    index = rb.sample(BATCH, return_info=True)[1]["index"]
    rb.update_priority(index, torch.rand(BATCH))
    t["incremental"] = _timed(lambda: save_checkpoint(ckpt, **parts))
    t["state"] = _timed(lambda: save_checkpoint(folder / "state", policy=parts["policy"],
                                                optim=parts["optim"]))  # fmt: skip
    fresh = _run(folder / "fresh2")
    t["restore_small"] = _timed(lambda: load_checkpoint(ckpt, **fresh))
    assert torch.equal(fresh["buffer"].sampler.tree.leaves, rb.sampler.tree.leaves)
    assert len(fresh["buffer"]) == ROWS
    fresh["buffer"].storage.cleanup()
    rb.storage.cleanup()
    one = _storage_restores(folder / "storage-1x", ROWS, copied=True)
    four = _storage_restores(folder / "storage-4x", 4 * ROWS)
    t["storage"], t["storage_copy"], t["storage4"] = one["restore"], one["restore_copy"], four[
        "restore"]
    t["storage_save"], t["storage4_save"] = one["save"], four["save"]
    return t


def run() -> list[dict]:
    folder = Path(tempfile.mkdtemp(prefix="bench-checkpoint-"))
    try:
        t = _measure(folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    chunks = int(t["chunks"])  # chunks of the 1M rows (a restore borrows each)
    touched = 1  # the buffer is full: the batch wraps to rows 0-999, all in chunk 0
    return [
        _row("first save, 1M memmap rows + run: ours/synced write of the rows' bytes", t["first"],
             "s", t["copy"], t["first"] / t["copy"]),
        _row(f"save after {BATCH:,} new rows: ours/first save (changed chunks {touched}/{chunks})",
             t["incremental"], "s", t["first"], t["incremental"] / t["first"]),
        _row("  of which the run's state alone (policy, Adam, RNGs): state/first save", t["state"],
             "s", t["first"], t["state"] / t["first"]),
        _row("restore 1M memmap rows + run (chunks mapped, not copied): ours/synced write of the "
             "rows' bytes", t["restore"], "s", t["copy"], t["restore"] / t["copy"]),
        _row("restore 1M memmap rows + run: mapped/copied (the fallback), same checkpoint",
             t["restore"], "s", t["restore_copy"], t["restore"] / t["restore_copy"]),
        _row("restore of the small save (tree: base + delta): ours/first restore",
             t["restore_small"], "s", t["restore"], t["restore_small"] / t["restore"]),
        _row(f"first write after a restore ({BATCH:,} rows; owns a borrowed chunk): ours/the next "
             "write (owned chunk)", t["write_borrowed"], "s", t["write_owned"],
             t["write_borrowed"] / t["write_owned"]),
        _row("restore of the storage alone (uniform buffer), 1M rows: ours/first restore (with "
             "the tree)", t["storage"], "s", t["restore"], t["storage"] / t["restore"]),
        _row("restore of the storage alone, 1M rows: mapped/copied (the fallback)", t["storage"],
             "s", t["storage_copy"], t["storage"] / t["storage_copy"]),
        _row("restore of the storage alone, 4M rows: ours/1M rows (4x the chunks)",
             t["storage4"], "s", t["storage"], t["storage4"] / t["storage"]),
        _row(f"save of the storage alone after {BATCH:,} new rows, 4M rows: ours/1M rows (same "
             "change, 4x the buffer)", t["storage4_save"], "s", t["storage_save"],
             t["storage4_save"] / t["storage_save"]),
    ]  # fmt: skip


if __name__ == "__main__":
    print(f"{'figure':84s} {'value':>9s} {'unit':>5s} {'limit':>9s} {'ratio':>7s}")
    for r in run():
        print(
            f"{r['figure']:84s} {r['value']:9.3f} {r['unit']:>5s} "
            f"{r['limit']:9.3f} {r['ratio']:7.3f}"
        )
