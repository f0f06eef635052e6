"""A tensor storage's rows in a checkpoint as chunk files, linked when unchanged.

A snapshot of a :class:`~rl_replay.LazyTensorStorage` (or memmap storage) holds its
rows as files of ``CHUNK_ROWS`` rows, ``data/<chunk>.bin``: each leaf's raw bytes for
those rows, one leaf after the other, each starting at a multiple of ``SECTION_ALIGN``
(so a leaf's rows can be memory-mapped, :mod:`rl_replay._mapped`). One file a chunk,
not a file a leaf and chunk, so a save's file work (writes, fsyncs, links, and the
removal of the previous snapshot) does not grow with the number of keys. A chunk
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

import contextlib
import math
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rl_profiling.atomic import guard

from rl_replay._layout import Layout
from rl_replay.exceptions import CheckpointError

__all__ = [
    "CHUNK_ROWS",
    "WriteTracker",
    "base_id",
    "dump_chunks",
    "load_chunks",
    "open_chunk",
    "sections",
    "write_file",
]

CHUNK_ROWS = 32768
"""Rows per chunk file (1M rows: 31 files)."""
CHUNK_FORMAT = 2
"""Format of the chunk files: 2, one file a chunk holding every leaf (1: a file a leaf)."""
SECTION_ALIGN = 4096
"""A leaf's rows start at a multiple of this in a chunk file (a page: they can be mapped)."""

_DATA = "data"
_ID = "ID"


class WriteTracker:
    """Which chunks of ``rows_per_chunk`` rows were written since each of the last two
    snapshots.

    One byte a chunk (``dirty``: written since the last snapshot, on ``device``: the
    data's, so marking a write never syncs) and ``between`` (written between the two last
    snapshots). A dump links from the snapshot *before* the newest
    (:meth:`rl_profiling.atomic.AtomicDirectory.base`), so both are needed: a chunk is as
    in that one when neither byte is set. Loading a snapshot forgets every other one.
    """

    def __init__(
        self, capacity: int, rows_per_chunk: int = CHUNK_ROWS, device: Any = "cpu"
    ) -> None:
        self.rows_per_chunk = rows_per_chunk
        self.chunks = math.ceil(capacity / rows_per_chunk)
        self.dirty = torch.zeros(self.chunks, dtype=torch.uint8, device=device)
        self.between = torch.zeros(self.chunks, dtype=torch.uint8, device=device)
        self.known: str | None = None  # the snapshot the clean chunks equal
        self.known_before: str | None = None  # the one before it (chunks clean in both)

    def mark(self, flat_index: torch.Tensor) -> None:
        """Rows ``flat_index`` were written (one vectorised op, no host sync)."""
        chunk = flat_index if flat_index.dim() == 1 else flat_index.reshape(-1)
        if chunk.device != self.dirty.device:
            chunk = chunk.to(self.dirty.device)
        if self.rows_per_chunk > 1:
            chunk = torch.div(chunk, self.rows_per_chunk, rounding_mode="floor")
        self.dirty.index_fill_(0, chunk, 1)

    def knows(self, snapshot_id: str | None) -> bool:
        """Whether the chunks unchanged since snapshot ``snapshot_id`` are known."""
        return snapshot_id is not None and snapshot_id in (self.known, self.known_before)

    def _since(self, snapshot_id: str | None) -> torch.Tensor:
        if snapshot_id == self.known:
            return self.dirty.cpu()
        return (self.dirty | self.between).cpu()

    def unchanged(self, snapshot_id: str | None) -> torch.Tensor:
        """Bool ``[chunks]``: the chunk is as in snapshot ``snapshot_id``."""
        if not self.knows(snapshot_id):
            return torch.zeros(self.chunks, dtype=torch.bool)
        return self._since(snapshot_id) == 0

    def changed(self, snapshot_id: str | None = None) -> torch.Tensor:
        """Int64 indices (on the CPU) of the chunks written since snapshot ``snapshot_id``
        (default: the last one)."""
        since = self.dirty.cpu() if snapshot_id is None else self._since(snapshot_id)
        return torch.from_numpy(np.flatnonzero(since.numpy()))

    def taken(self, snapshot_id: str) -> None:
        """A snapshot of the current rows was taken (or loaded) under ``snapshot_id``."""
        # rows written from now on differ from it; numpy on the CPU: torch's parallel
        # fill of 1M bytes took 12 ms on a loaded 2-core machine, numpy's 0.05 ms
        if self.known is None:
            self.between.fill_(1)  # nothing known before: every chunk differs from it
        else:
            self.between.copy_(self.dirty)
        if self.dirty.device.type == "cpu":
            self.dirty.numpy().fill(0)
        else:
            self.dirty.zero_()
        self.known_before, self.known = self.known, snapshot_id

    def forget(self) -> None:
        """Every row changed (e.g. all cleared, or another snapshot loaded): no snapshot
        is a base any more."""
        self.known = self.known_before = None


def _raw_rows(flat: torch.Tensor) -> torch.Tensor:
    """``[capacity, row_bytes]`` uint8 view of a flat leaf (no copy)."""
    return flat.reshape(flat.shape[0], -1).view(torch.uint8)


def write_file(path: Path, raw: torch.Tensor) -> None:
    """Write ``raw``'s bytes to ``path`` and fsync it.

    Raises:
        CheckpointError: an OS failure, naming the path, the bytes wanted and the cause.
    """
    view = memoryview(raw.contiguous().numpy()).cast("B")
    with guard(path, len(view), CheckpointError), open(path, "wb") as f:
        f.write(view)
        f.flush()
        os.fsync(f.fileno())


def base_id(base: Path | None, part: str = _DATA) -> str | None:
    """The id of snapshot ``base``'s ``part`` (``data``: the rows), if it has one."""
    try:
        return (base / part / _ID).read_text().strip() if base is not None else None
    except FileNotFoundError:
        return None


def sections(row_bytes: list[int], rows: int) -> tuple[list[tuple[int, int]], int]:
    """Where each leaf's ``rows`` rows lie in a chunk file: ``(offset, length)`` a leaf,
    each offset a multiple of :data:`SECTION_ALIGN`, and the file's size."""
    out, offset = [], 0
    for size in row_bytes:
        out.append((offset, rows * size))
        offset += -(-rows * size // SECTION_ALIGN) * SECTION_ALIGN
    return out, offset


def _chunk_rows(capacity: int, chunk: int, rows: int = CHUNK_ROWS) -> int:
    return min(rows, capacity - chunk * rows)


def _write_chunk(path: Path, raws: list[torch.Tensor]) -> None:
    """One chunk file: each leaf's rows (``[rows, row_bytes]`` uint8) at its section."""
    places, size = sections([raw.shape[1] for raw in raws], raws[0].shape[0])
    with guard(path, size, CheckpointError), open(path, "wb") as f:
        for raw, (offset, _) in zip(raws, places, strict=True):
            f.seek(offset)
            f.write(memoryview(raw.contiguous().numpy()).cast("B"))
        f.truncate(size)  # the last section's padding (a hole)
        f.flush()
        os.fsync(f.fileno())


def dump_chunks(storage: Any, folder: Path, base: Path | None) -> dict:
    """Write ``storage``'s rows under ``folder/data``, one file a chunk holding every
    leaf, linking the chunks unchanged since the snapshot in ``base``; return the
    storage's state (layout, counts, chunk ids)."""
    tracker: WriteTracker | None = storage._tracker
    data = folder / _DATA
    data.mkdir()
    if tracker is None:  # a storage shared with another process: every chunk is written
        tracker = WriteTracker(storage.capacity)
    unchanged = tracker.unchanged(base_id(base)).tolist()
    raws = [_raw_rows(flat) for flat in storage._flat]
    written = 0
    for chunk, same in enumerate(unchanged):
        name = f"{chunk}.bin"
        if same:
            try:
                os.link(base / _DATA / name, data / name)
                continue
            except OSError:  # another file system, or the base's file is gone: write it
                pass
        rows = slice(chunk * CHUNK_ROWS, (chunk + 1) * CHUNK_ROWS)
        _write_chunk(data / name, [raw[rows] for raw in raws])
        written += 1
    snapshot_id = uuid.uuid4().hex
    with guard(data / _ID, len(snapshot_id), CheckpointError):
        (data / _ID).write_text(snapshot_id)
    tracker.taken(snapshot_id)
    return {
        "chunked": True,
        "chunk_format": CHUNK_FORMAT,
        "id": snapshot_id,
        "layout": storage.layout.state(),
        "envs": storage._envs,
        "filled": int(storage._filled),
        "shapes": [list(t.shape) for t in storage._leaves],
        "dtypes": [str(t.dtype).removeprefix("torch.") for t in storage._leaves],
        "chunk_rows": CHUNK_ROWS,
        "chunks_written": written,
    }


def load_chunks(storage: Any, folder: Path, state: dict) -> None:
    """Fill ``storage`` from the chunk files of snapshot ``folder`` (see :func:`dump_chunks`).

    A memory-mapped storage maps the chunk files in place (:mod:`rl_replay._mapped`: no
    copy; a chunk is copied into the storage's files before its first write). Where that
    cannot be done, its files are filled by the kernel (``copy_file_range``), with no
    pass through this process's memory.

    Raises:
        CheckpointError: the chunk files are of another format, or of the wrong size.
    """
    if state.get("chunk_format") != CHUNK_FORMAT:
        raise CheckpointError(
            f"{folder}: expected chunk files of format {CHUNK_FORMAT} (one file a chunk, "
            f"every key in it), got format {state.get('chunk_format', 1)} (one file a key "
            "and chunk, written by an earlier rl-replay): load it with that version and save again"
        )
    layout = Layout.from_state(state["layout"])
    storage._envs = int(state["envs"])
    rows = int(state["chunk_rows"])
    dtypes = [getattr(torch, dtype) for dtype in state["dtypes"]]
    shapes = [torch.Size(shape) for shape in state["shapes"]]
    if hasattr(storage, "borrow") and storage.borrow(
        layout, folder / _DATA, {"shapes": shapes, "dtypes": dtypes, "rows": rows}
    ):  # a memmap storage maps the chunk files (see rl_replay._mapped): no copy
        _loaded(storage, state)
        return
    if hasattr(storage, "filenames"):  # memmap: (re)create its files
        storage._folder()
        storage.existsok, storage.filenames = True, []
    leaves = [
        storage._alloc(key, shape, dtype)
        for key, shape, dtype in zip(layout.keys, shapes, dtypes, strict=True)
    ]
    storage._attach(layout, leaves)
    raws = [_raw_rows(flat) for flat in storage._flat]
    for chunk in range(math.ceil(storage.capacity / rows)):
        n = _chunk_rows(storage.capacity, chunk, rows)
        with open_chunk(folder / _DATA / f"{chunk}.bin", [r.shape[1] for r in raws], n) as (f, at):
            for leaf, (raw, (offset, length)) in enumerate(zip(raws, at, strict=True)):
                if hasattr(storage, "filenames"):
                    start = chunk * rows * raw.shape[1]
                    _copy_range(f, storage.filenames[leaf], offset, length, start)
                else:
                    _read_into(f, raw[chunk * rows : chunk * rows + n], offset)
    _loaded(storage, state)


@contextlib.contextmanager
def open_chunk(path: Path, row_bytes: list[int], rows: int) -> Iterator[tuple[Any, list]]:
    """Chunk file ``path`` opened for reading, and its leaves' sections, once its size is
    checked.

    Raises:
        CheckpointError: the file does not have the size of ``rows`` rows of each leaf.
    """
    places, size = sections(row_bytes, rows)
    with open(path, "rb") as f:
        got = os.fstat(f.fileno()).st_size
        if got != size:
            raise CheckpointError(
                f"{path}: expected a chunk file of {size} bytes ({rows} rows), got {got} bytes"
            )
        yield f, places


def _read_into(f: Any, rows: torch.Tensor, offset: int) -> None:
    view = memoryview(rows.numpy()).cast("B")
    done = 0
    while done < len(view):
        n = os.preadv(f.fileno(), [view[done:]], offset + done)
        if n == 0:
            raise CheckpointError(f"{f.name}: ended {len(view) - done} bytes early")
        done += n


def _loaded(storage: Any, state: dict) -> None:
    """Set the row count and a tracker that knows the loaded snapshot (its next base)."""
    storage._set_filled(int(state["filled"]))
    storage._tracker = WriteTracker(storage.capacity, device=storage.device)
    storage._tracker.taken(state["id"])


def _copy_range(src: Any, dst: str, offset: int, size: int, to: int) -> None:
    """Copy ``size`` bytes of open file ``src`` from ``offset`` into ``dst`` at ``to``,
    in the kernel."""
    with open(dst, "r+b") as fout:
        done = 0
        while done < size:
            left = size - done
            n = os.copy_file_range(src.fileno(), fout.fileno(), left, offset + done, to + done)
            if n == 0:
                raise CheckpointError(f"{src.name}: ended after {done} of {size} bytes")
            done += n
