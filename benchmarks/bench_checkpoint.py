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
* a restore of the first checkpoint into freshly built objects (buffer files filled by
  ``copy_file_range``): its time over the same file write;
* a restore of the checkpoint the small save wrote (its tree a base plus one delta): its
  time over the first restore's. Restoring copies every chunk into the storage's files
  (not lazy: a memmap storage keeps one file per key, so it cannot link the chunks), so
  this ratio is about 1.

The priority tree is saved as a base file of its leaves (16 bytes a row: sums and minima)
plus one delta per save of the leaves that changed (24 bytes each), a new base once the
deltas exceed a quarter of the leaves; every save fsyncs what it wrote.

Timings are single runs on whatever machine this is (the disk's page cache included);
compare the ratios. ``uv run python benchmarks/bench_checkpoint.py`` takes under a minute.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import torch
from rl_collectors import load_checkpoint, save_checkpoint
from rl_replay import LazyMemmapStorage, TensorDictPrioritizedReplayBuffer
from rl_replay._snapshot import CHUNK_ROWS
from tensordict import TensorDict

ROWS = 1_000_000
BATCH = 1_000
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


def run() -> list[dict]:
    folder = Path(tempfile.mkdtemp(prefix="bench-checkpoint-"))
    try:
        parts = _run(folder)
        rb = parts["buffer"]
        for start in range(0, ROWS, 100_000):
            rb.extend(_rows(100_000, start))
        rb.update_priority(torch.arange(ROWS), torch.rand(ROWS))
        ckpt = folder / "ckpt"
        first = _timed(lambda: save_checkpoint(ckpt, **parts))
        raw = torch.ones(ROWS * ROW_BYTES, dtype=torch.uint8).numpy()
        copy = _timed(lambda: _write_synced(folder / "blob", raw))
        fresh = _run(folder / "fresh")
        restore = _timed(lambda: load_checkpoint(ckpt, **fresh))
        fresh["buffer"].storage.cleanup()
        rb.extend(_rows(BATCH, 10**7))
        index = rb.sample(BATCH, return_info=True)[1]["index"]
        rb.update_priority(index, torch.rand(BATCH))
        incremental = _timed(lambda: save_checkpoint(ckpt, **parts))
        state_only = _timed(lambda: save_checkpoint(folder / "state", policy=parts["policy"],
                                                    optim=parts["optim"]))  # fmt: skip
        fresh = _run(folder / "fresh2")
        restore_small = _timed(lambda: load_checkpoint(ckpt, **fresh))
        assert torch.equal(fresh["buffer"].sampler.tree.leaves, rb.sampler.tree.leaves)
        assert len(fresh["buffer"]) == ROWS
        fresh["buffer"].storage.cleanup()
        rb.storage.cleanup()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    chunks = -(-ROWS // CHUNK_ROWS)
    touched = 2 if (ROWS % CHUNK_ROWS) + BATCH > CHUNK_ROWS else 1  # the batch's chunks, at most
    return [
        _row("first save, 1M memmap rows + run: ours/synced write of the rows' bytes", first, "s", copy,
             first / copy),
        _row(f"save after {BATCH:,} new rows: ours/first save (changed chunks {touched}/{chunks})",
             incremental, "s", first, incremental / first),
        _row("  of which the run's state alone (policy, Adam, RNGs): state/first save", state_only,
             "s", first, state_only / first),
        _row("restore 1M memmap rows + run: ours/synced write of the rows' bytes", restore, "s", copy,
             restore / copy),
        _row("restore of the small save (tree: base + delta): ours/first restore", restore_small,
             "s", restore, restore_small / restore),
    ]  # fmt: skip


if __name__ == "__main__":
    print(f"{'figure':84s} {'value':>9s} {'unit':>5s} {'limit':>9s} {'ratio':>7s}")
    for r in run():
        print(f"{r['figure']:84s} {r['value']:9.3f} {r['unit']:>5s} {r['limit']:9.3f} {r['ratio']:7.3f}")
