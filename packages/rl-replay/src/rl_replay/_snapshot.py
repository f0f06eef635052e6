"""A tensor storage's rows in a checkpoint as chunk files, linked when unchanged.

A snapshot of a :class:`~rl_replay.LazyTensorStorage` (or memmap storage) holds each
leaf as files of ``CHUNK_ROWS`` rows, ``data/<leaf>.<chunk>.bin`` (raw bytes). A chunk
no row of which was written since the *base* snapshot (the previous one) is a hard link
to the base's file, so a checkpoint costs what changed, not the buffer's size. Files are
never written after their snapshot is complete, so a link shares data that never moves.

:class:`WriteTracker` (one per storage, updated by each write: one ``index_fill_``) knows
which chunks changed since the last snapshot it took or loaded: a snapshot gets an id,
and a chunk is linked from the base snapshot only when the tracker knows that id and no
write touched the chunk since. A storage loaded from a snapshot knows only that one, so
an older snapshot is never linked by mistake.
"""

from __future__ import annotations

import math
import os
import uuid
from pathlib import Path
from typing import Any

import torch

__all__ = ["CHUNK_ROWS", "WriteTracker", "base_id", "dump_chunks", "load_chunks", "write_file"]

CHUNK_ROWS = 32768
"""Rows per chunk file (1M rows: 31 files per leaf)."""

_DATA = "data"
_ID = "ID"


class WriteTracker:
    """Which chunks of ``rows_per_chunk`` rows were written since the last snapshot.

    One byte a chunk (``dirty``, on ``device``: the data's, so marking a write never
    syncs), cleared when a snapshot is taken or loaded: only that snapshot is ever a base.
    """

    def __init__(
        self, capacity: int, rows_per_chunk: int = CHUNK_ROWS, device: Any = "cpu"
    ) -> None:
        self.rows_per_chunk = rows_per_chunk
        self.chunks = math.ceil(capacity / rows_per_chunk)
        self.dirty = torch.zeros(self.chunks, dtype=torch.uint8, device=device)
        self.known: str | None = None  # the snapshot the clean chunks equal

    def mark(self, flat_index: torch.Tensor) -> None:
        """Rows ``flat_index`` were written (one vectorised op, no host sync)."""
        chunk = flat_index.reshape(-1).to(self.dirty.device)
        if self.rows_per_chunk > 1:
            chunk = torch.div(chunk, self.rows_per_chunk, rounding_mode="floor")
        self.dirty.index_fill_(0, chunk, 1)

    def knows(self, snapshot_id: str | None) -> bool:
        """Whether the clean chunks are as in snapshot ``snapshot_id``."""
        return snapshot_id is not None and snapshot_id == self.known

    def unchanged(self, snapshot_id: str | None) -> torch.Tensor:
        """Bool ``[chunks]``: the chunk is as in snapshot ``snapshot_id``."""
        if not self.knows(snapshot_id):
            return torch.zeros(self.chunks, dtype=torch.bool)
        return (self.dirty == 0).cpu()

    def taken(self, snapshot_id: str) -> None:
        """A snapshot of the current rows was taken (or loaded) under ``snapshot_id``."""
        self.dirty.zero_()  # rows written from now on differ from it
        self.known = snapshot_id  # older snapshots are never a base again

    def forget(self) -> None:
        """Every row changed (e.g. all cleared): no snapshot is a base any more."""
        self.known = None


def _raw_rows(flat: torch.Tensor) -> torch.Tensor:
    """``[capacity, row_bytes]`` uint8 view of a flat leaf (no copy)."""
    return flat.reshape(flat.shape[0], -1).view(torch.uint8)


def write_file(path: Path, raw: torch.Tensor) -> None:
    with open(path, "wb") as f:
        f.write(memoryview(raw.contiguous().numpy()).cast("B"))
        f.flush()
        os.fsync(f.fileno())


def base_id(base: Path | None, part: str = _DATA) -> str | None:
    """The id of snapshot ``base``'s ``part`` (``data``: the rows), if it has one."""
    try:
        return (base / part / _ID).read_text().strip() if base is not None else None
    except FileNotFoundError:
        return None


def dump_chunks(storage: Any, folder: Path, base: Path | None) -> dict:
    """Write ``storage``'s leaves under ``folder/data``, linking chunks unchanged since
    the snapshot in ``base``; return the storage's state (layout, counts, chunk ids)."""
    from rl_replay._storage import _layout_state

    tracker: WriteTracker | None = storage._tracker
    data = folder / _DATA
    data.mkdir()
    if tracker is None:  # a storage shared with another process: every chunk is written
        tracker = WriteTracker(storage.capacity)
    unchanged = tracker.unchanged(base_id(base)).tolist()
    written = 0
    for leaf, flat in enumerate(storage._flat):
        raw = _raw_rows(flat)
        for chunk, same in enumerate(unchanged):
            name = f"{leaf}.{chunk}.bin"
            if same:
                try:
                    os.link(base / _DATA / name, data / name)
                    continue
                except OSError:  # another file system: write it
                    pass
            write_file(data / name, raw[chunk * CHUNK_ROWS : (chunk + 1) * CHUNK_ROWS])
            written += 1
    snapshot_id = uuid.uuid4().hex
    (data / _ID).write_text(snapshot_id)
    tracker.taken(snapshot_id)
    return {
        "chunked": True,
        "id": snapshot_id,
        "layout": _layout_state(storage.layout),
        "envs": storage._envs,
        "filled": int(storage._filled),
        "shapes": [list(t.shape) for t in storage._leaves],
        "dtypes": [str(t.dtype).removeprefix("torch.") for t in storage._leaves],
        "chunk_rows": CHUNK_ROWS,
        "chunks_written": written,
    }


def load_chunks(storage: Any, folder: Path, state: dict) -> None:
    """Fill ``storage`` from the chunk files of snapshot ``folder`` (see :func:`dump_chunks`).

    A memory-mapped storage's files are filled by the kernel (``copy_file_range``), with
    no pass through this process's memory.
    """
    from rl_replay._storage import _layout_from_state

    layout = _layout_from_state(state["layout"])
    storage._envs = int(state["envs"])
    if hasattr(storage, "filenames"):  # memmap: (re)create its files
        storage._folder()
        storage.existsok, storage.filenames = True, []
    leaves = [
        storage._alloc(key, torch.Size(shape), getattr(torch, dtype))
        for key, shape, dtype in zip(layout.keys, state["shapes"], state["dtypes"], strict=True)
    ]
    storage._attach(layout, leaves)
    rows = int(state["chunk_rows"])
    for leaf, flat in enumerate(storage._flat):
        raw = _raw_rows(flat)
        row_bytes = raw.shape[1]
        chunks = math.ceil(raw.shape[0] / rows)
        for chunk in range(chunks):
            src = folder / _DATA / f"{leaf}.{chunk}.bin"
            if hasattr(storage, "filenames"):
                _copy_range(src, storage.filenames[leaf], chunk * rows * row_bytes)
            else:
                with open(src, "rb") as f:
                    f.readinto(memoryview(raw[chunk * rows : (chunk + 1) * rows].numpy()).cast("B"))
    storage._set_filled(int(state["filled"]))
    storage._tracker = WriteTracker(storage.capacity, device=storage.device)
    storage._tracker.taken(state["id"])


def _copy_range(src: Path, dst: str, offset: int) -> None:
    """Copy file ``src`` into ``dst`` at ``offset``, in the kernel."""
    size = src.stat().st_size
    with open(src, "rb") as fin, open(dst, "r+b") as fout:
        done = 0
        while done < size:
            n = os.copy_file_range(fin.fileno(), fout.fileno(), size - done, done, offset + done)
            if n == 0:
                raise OSError(f"copy_file_range: {src} ended after {done} of {size} bytes")
            done += n
