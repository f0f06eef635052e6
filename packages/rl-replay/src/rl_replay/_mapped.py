"""A memmap storage restored from a snapshot without copying its rows (Linux).

A restore maps each chunk file of the snapshot (:mod:`rl_replay._snapshot`) into place:
a leaf's array is one address range, reserved as an anonymous ``PROT_NONE`` mapping of
the leaf's size, over which each chunk file is mapped with ``MAP_FIXED`` at the chunk's
offset. The chunks are *borrowed*: mapped ``MAP_PRIVATE``, so nothing this process does
ever changes a snapshot's file. The rows are read from the page cache (or the disk) when
first touched; the restore itself is a few system calls a chunk.

Before the first write to a borrowed chunk (:meth:`Borrowed.own`, from the storage's
write path) its bytes are copied from the mapping into the storage's own file (one file a
key, as for a storage that was never restored), and that file is mapped ``MAP_SHARED`` at
the same address: every tensor and view of the leaf stays valid and sees the same bytes.

The mapping holds the file's inode: a snapshot deleted while a buffer borrows from it
(``Checkpointer`` removes old checkpoints) stays readable until its chunks are owned or
the storage is dropped. Python's :mod:`mmap` cannot map at a fixed address, so the
mappings are made through libc (``ctypes``); the reservation is unmapped, with every
chunk mapped over it, when the last tensor viewing it is freed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import mmap
import os
import sys
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rl_replay._snapshot import SECTION_ALIGN, open_chunk

__all__ = ["Borrowed", "borrow_leaves", "supported"]

# Linux's values (x86-64, aarch64); Python's mmap module names only MAP_ANONYMOUS
_MAP_FIXED = 0x10
_MAP_ANONYMOUS = getattr(mmap, "MAP_ANONYMOUS", 0x20)
_MAP_NORESERVE = 0x4000
_FAILED = ctypes.c_void_p(-1).value


@functools.cache
def _libc() -> Any:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
    ]  # fmt: skip
    libc.munmap.restype = ctypes.c_int
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


LAZY_RESTORE_VAR = "RL_REPLAY_LAZY_RESTORE"
"""``0`` turns mapped restores off: every chunk is copied into the storage's files during
the restore (the restore then takes the time to copy the rows, and training never waits on
a first read of a checkpoint's page, e.g. from a network filesystem). ``1`` or unset: map."""


def supported() -> str | None:
    """``None`` when chunks can be mapped in place here, else why not.

    Raises:
        ValueError: ``RL_REPLAY_LAZY_RESTORE`` is set to something other than 0 or 1.
    """
    setting = os.environ.get(LAZY_RESTORE_VAR, "1").strip()
    if setting not in ("0", "1"):
        raise ValueError(f"{LAZY_RESTORE_VAR}: expected 0 or 1, received {setting!r}")
    if setting == "0":
        return f"turned off by {LAZY_RESTORE_VAR}=0"
    if not sys.platform.startswith("linux"):
        return f"mapping at a fixed address is implemented for Linux only, not {sys.platform}"
    return None


def _mmap(addr: int | None, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
    got = _libc().mmap(addr, size, prot, flags, fd, offset)
    if got is None or got == _FAILED or (flags & _MAP_FIXED and got != addr):
        err = ctypes.get_errno()
        raise OSError(err, f"mmap of {size} bytes at offset {offset}: {os.strerror(err)}")
    return got


def _pages(size: int) -> int:
    return -(-size // mmap.PAGESIZE) * mmap.PAGESIZE


class _Region:
    """``size`` bytes of reserved address space, unmapped when this object is freed.

    ``numpy.asarray(region)`` is a writable uint8 view whose base is the region, so a
    tensor made from it keeps the mappings alive.
    """

    def __init__(self, size: int) -> None:
        self.size = _pages(size)
        flags = mmap.MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE
        self.addr = _mmap(None, self.size, 0, flags, -1, 0)
        self.__array_interface__ = {
            "data": (self.addr, False), "shape": (size,), "typestr": "|u1", "version": 3
        }  # fmt: skip
        unmap = weakref.finalize(self, _libc().munmap, self.addr, self.size)
        unmap.atexit = False  # a tensor may still view it while the interpreter exits


class _Leaf:
    """One leaf's address range and the storage file that receives its owned chunks."""

    def __init__(self, region: _Region, filename: str, chunk_bytes: int, nbytes: int) -> None:
        self.addr, self.filename = region.addr, filename
        self.chunk_bytes, self.nbytes = chunk_bytes, nbytes
        self.view = np.asarray(region)  # uint8, its base the region: keeps it mapped

    def span(self, chunk: int) -> tuple[int, int]:
        """Offset and length of ``chunk``'s bytes."""
        start = chunk * self.chunk_bytes
        return start, min(self.chunk_bytes, self.nbytes - start)

    def map_file(self, chunk: int, fd: int, offset: int) -> None:
        """Map ``chunk``'s rows from open snapshot file ``fd`` at ``offset``, copy-on-write
        (never written back)."""
        start, length = self.span(chunk)
        flags = mmap.MAP_PRIVATE | _MAP_FIXED
        _mmap(self.addr + start, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, offset)

    def own(self, chunk: int, fd: int) -> None:
        """Copy ``chunk`` into the storage file (``fd``) and map that file in its place."""
        start, length = self.span(chunk)
        view = memoryview(self.view[start : start + length])
        done = 0
        while done < length:
            done += os.pwrite(fd, view[done:], start + done)
        flags = mmap.MAP_SHARED | _MAP_FIXED
        _mmap(self.addr + start, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, fd, start)


class Borrowed:
    """Which chunks of a restored memmap storage still map the snapshot's files.

    Args:
        leaves: each leaf's address range and storage file.
        chunk_rows: rows per chunk.
        chunks: number of chunks.
    """

    def __init__(self, leaves: list[_Leaf], chunk_rows: int, chunks: int) -> None:
        self._leaves = leaves
        self.chunk_rows = chunk_rows
        self.left = np.ones(chunks, dtype=bool)  # True: still the snapshot's file

    @property
    def count(self) -> int:
        """Number of chunks still borrowed."""
        return int(self.left.sum())

    def own(self, flat_index: torch.Tensor) -> None:
        """Make the chunks holding rows ``flat_index`` the storage's own (before a write)."""
        chunks = np.unique(flat_index.reshape(-1).cpu().numpy() // self.chunk_rows)
        self._own(chunks[self.left[chunks]])

    def own_all(self) -> None:
        """Own every chunk (the storage's files then hold every row)."""
        self._own(np.flatnonzero(self.left))

    def _own(self, chunks: np.ndarray) -> None:
        if not len(chunks):
            return
        for leaf in self._leaves:
            fd = os.open(leaf.filename, os.O_RDWR)
            try:
                for chunk in chunks.tolist():  # a chunk half-owned is owned again: idempotent
                    leaf.own(chunk, fd)
            finally:
                os.close(fd)
        self.left[chunks] = False


def borrow_leaves(
    folder: Path,
    filenames: list[str],
    shapes: list[torch.Size],
    dtypes: list[torch.dtype],
    chunk_rows: int,
) -> tuple[list[torch.Tensor], Borrowed]:
    """Map the chunk files ``folder/<chunk>.bin`` into one tensor a leaf.

    ``filenames`` are the storage's files (created or resized here, never read until a
    chunk is owned). Each leaf's first dim is its rows (the flat capacity).

    Raises:
        OSError: a mapping failed or a chunk is not page-aligned (the caller copies).
        CheckpointError: a chunk file has the wrong size.
    """
    row_bytes = [math.prod(s[1:]) * torch.empty((), dtype=d).element_size()
                 for s, d in zip(shapes, dtypes, strict=True)]  # fmt: skip
    capacity = shapes[0][0]
    if SECTION_ALIGN % mmap.PAGESIZE or any(
        size == 0 or chunk_rows * size % mmap.PAGESIZE for size in row_bytes
    ):
        raise OSError(f"rows of {row_bytes} bytes: chunks are not aligned to pages here")
    leaves = []
    for filename, size in zip(filenames, row_bytes, strict=True):
        with open(filename, "ab") as f:  # the storage's file, sparse until chunks are owned
            if os.fstat(f.fileno()).st_size != capacity * size:
                f.truncate(capacity * size)
        leaves.append(_Leaf(_Region(capacity * size), filename, chunk_rows * size, capacity * size))
    chunks = math.ceil(capacity / chunk_rows)
    for chunk in range(chunks):
        rows = min(chunk_rows, capacity - chunk * chunk_rows)
        with open_chunk(folder / f"{chunk}.bin", row_bytes, rows) as (f, places):
            for leaf, (offset, _) in zip(leaves, places, strict=True):
                leaf.map_file(chunk, f.fileno(), offset)
    tensors = [torch.from_numpy(leaf.view).view(dtype).view(shape)
               for leaf, dtype, shape in zip(leaves, dtypes, shapes, strict=True)]  # fmt: skip
    return tensors, Borrowed(leaves, chunk_rows, chunks)
