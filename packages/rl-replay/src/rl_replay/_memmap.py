"""``LazyMemmapStorage``: preallocated tensors backed by files (tensordict memory maps)."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Any

import torch
from rl_profiling.atomic import guard
from tensordict import MemoryMappedTensor

from rl_replay._layout import Layout
from rl_replay._mapped import Borrowed, borrow_leaves, supported
from rl_replay._storage import LazyTensorStorage
from rl_replay.exceptions import StorageError, StorageLayoutError

__all__ = ["LazyMemmapStorage"]

_log = logging.getLogger(__name__)


def _file_name(key: Any) -> str:
    name = "data" if key is None else ".".join(key) if isinstance(key, tuple) else str(key)
    return name.replace(os.sep, "_") + ".memmap"


def _remove(files: list[str], folder: str | None, owner: int) -> None:
    if os.getpid() != owner:
        return
    for f in files:
        with contextlib.suppress(FileNotFoundError):
            os.remove(f)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


def _pwrite_all(fd: int, array: Any, offset: int) -> None:
    view = memoryview(array).cast("B")
    while len(view):
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


class LazyMemmapStorage(LazyTensorStorage):
    """Like :class:`LazyTensorStorage`, with each leaf a memory-mapped file.

    The OS pages data in and out, so a buffer far larger than RAM works and the
    process's memory does not grow with the buffer. Files are ``<key>.memmap`` under
    ``scratch_dir``. A storage pickled to another process (e.g. a spawned worker)
    re-opens the same files there: rows written by one process are read by the other
    (the row count is the one at pickling time). Only the creating process removes files.

    Args:
        max_size: capacity in rows (``ndim=1``) or env-steps (``ndim=2``).
        scratch_dir: folder for the files; a fresh temporary folder when ``None``.
        device: must be CPU (memory maps live in host memory).
        ndim: number of leading batch dims (1 or 2).
        existsok: reuse files already in ``scratch_dir`` (else refuse to overwrite them).
        auto_cleanup: remove the files (and a temporary folder) when the storage is
            garbage-collected or the interpreter exits.

    Raises:
        ValueError: a non-CPU device.
        FileExistsError: (first write) a file exists and ``existsok`` is ``False``.

    Examples:
        >>> import torch
        >>> from rl_replay import LazyMemmapStorage
        >>> s = LazyMemmapStorage(1000)
        >>> s.set(torch.arange(4), torch.ones(4, 3))
        >>> s.get(torch.tensor([1, 3])).sum().item(), s.filenames[0].endswith("data.memmap")
        (6.0, True)
    """

    def __init__(
        self,
        max_size: int,
        *,
        scratch_dir: Any = None,
        device: Any = "cpu",
        ndim: int = 1,
        existsok: bool = False,
        auto_cleanup: bool = True,
    ) -> None:
        super().__init__(max_size, device=device, ndim=ndim)
        if self.device.type != "cpu":
            raise ValueError(f"device: expected 'cpu' for a memory-mapped storage, got {device!r}")
        self.scratch_dir = None if scratch_dir is None else Path(scratch_dir)
        self.existsok, self.auto_cleanup = bool(existsok), bool(auto_cleanup)
        self.filenames: list[str] = []
        self._own_dir = False
        self._finalizer: weakref.finalize | None = None
        self._borrowed: Borrowed | None = None  # chunks mapped from a restored snapshot

    def _make_compilable(self) -> None:
        raise ValueError(
            "storage: expected a LazyTensorStorage for a compilable buffer, got "
            "LazyMemmapStorage, whose writes are file I/O (pwrite) that torch.compile "
            "cannot trace"
        )

    def _folder(self) -> Path:
        if self.scratch_dir is None:
            self.scratch_dir = Path(tempfile.mkdtemp(prefix="rl-replay-"))
            self._own_dir = True
        self.scratch_dir.mkdir(parents=True, exist_ok=True)
        return self.scratch_dir

    def _initialize(self, data: Any) -> None:
        layout = Layout.of(data, self.ndim)
        folder = self._folder()
        if not self.existsok:
            for k in layout.keys:
                if (folder / _file_name(k)).exists():
                    raise FileExistsError(
                        f"scratch_dir: {folder / _file_name(k)} exists; pass existsok=True "
                        "to overwrite it"
                    )
        super()._initialize(data)

    def _alloc(self, key: Any, shape: Any, dtype: torch.dtype) -> torch.Tensor:
        filename = str(self._folder() / _file_name(key))
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        reserve = self.existsok or not os.path.exists(filename)  # else tensordict refuses it
        if reserve:
            try:
                with guard(filename, nbytes, StorageError, "allocate",
                           "the storage holds what it held before"):
                    _reserve(filename, nbytes)
            except StorageError:
                with contextlib.suppress(OSError):
                    os.unlink(filename)  # no file half-allocated where a later run would look
                raise
        tensor = MemoryMappedTensor.empty(
            tuple(shape), dtype=dtype, filename=filename, existsok=reserve
        )
        self._register(filename)
        return tensor

    def _register(self, filename: str) -> None:
        """Add ``filename`` to the files removed with the storage."""
        self.filenames.append(filename)
        if self.auto_cleanup:
            if self._finalizer is not None:
                self._finalizer.detach()
            folder = str(self.scratch_dir) if self._own_dir else None
            self._finalizer = weakref.finalize(
                self, _remove, list(self.filenames), folder, os.getpid()
            )

    def _attach(self, layout: Layout, leaves: list[torch.Tensor]) -> None:
        self._borrowed = None  # fresh leaves: nothing maps a snapshot's files
        super()._attach(layout, leaves)

    def borrow(self, layout: Layout, folder: Path, meta: dict) -> bool:
        """Map snapshot ``folder``'s chunk files as the leaves (no copy); ``False`` when
        they cannot be mapped here (the caller copies them, and a log line says why)."""
        why = supported()
        if why is None:
            self.filenames = []
            for key in layout.keys:  # removed with the storage, whatever happens below
                self._register(str(self._folder() / _file_name(key)))
            flat = [(self.capacity, *s[self.ndim :]) for s in meta["shapes"]]
            try:
                flats, borrowed = borrow_leaves(
                    folder, self.filenames, flat, meta["dtypes"], meta["rows"]
                )
            except OSError as e:
                why = f"mapping failed ({e})"
        if why is not None:
            _log.warning("restoring %s by copying its chunks: %s", folder, why)
            return False
        self._attach(layout, [t.view(s) for t, s in zip(flats, meta["shapes"], strict=True)])
        self._borrowed = borrowed
        return True

    @property
    def borrowed_chunks(self) -> int:
        """Chunks whose rows still map a snapshot's files (0 unless restored lazily)."""
        return 0 if self._borrowed is None else self._borrowed.count

    def _write(self, index: torch.Tensor, data: Any) -> None:
        """Write through the files (``pwrite``), not the mapping.

        Pages written this way go to the OS page cache without entering this process's
        resident set, so extending a huge buffer does not grow its memory; reads through
        the mapping see them (one page cache).
        """
        self.prepare(data)
        leaves = self._check(data)
        if self.rows(data) != len(index):
            raise StorageLayoutError(f"data: expected {len(index)} rows, got {self.rows(data)}")
        if len(index) == 0:
            return
        if self._borrowed is not None:  # rows mapped from a snapshot: own them first
            self._borrowed.own(self.flat_index(index))
            self._borrowed = self._borrowed if self._borrowed.count else None
        breaks = ((index[1:] - index[:-1]) != 1).nonzero().squeeze(1).add(1).tolist()
        bounds = list(zip([0, *breaks], [*breaks, len(index)], strict=False))
        starts = index[[a for a, _ in bounds]].tolist()
        for filename, dst, src in zip(self.filenames, self._leaves, leaves, strict=False):
            fd = os.open(filename, os.O_WRONLY)
            try:
                self._write_runs(fd, dst, src.detach().contiguous(), bounds, starts)
            finally:
                os.close(fd)
        if self._tracker is not None:
            self._tracker.mark(self.flat_index(index))

    def _write_runs(
        self, fd: int, dst: torch.Tensor, src: torch.Tensor, bounds: list, starts: list
    ) -> None:
        row = dst[(0,) * self.ndim].numel() * dst.element_size()
        envs = src.shape[0] if self.ndim == 2 else 1
        for (a, b), first in zip(bounds, starts, strict=False):
            for env in range(envs):  # ndim=2: one contiguous run per env row
                chunk = src[env, a:b] if self.ndim == 2 else src[a:b]
                offset = (env * self.extend_capacity + first) * row
                _pwrite_all(fd, chunk.contiguous().view(-1).view(torch.uint8).numpy(), offset)

    def cleanup(self) -> None:
        """Drop the mappings and remove the files now (in the creating process)."""
        self.layout, self._leaves, self._flat, self._filled = None, [], [], 0
        self._borrowed = None
        if self._finalizer is not None:
            self._finalizer()
        self.filenames = []

    def _own_all(self) -> None:
        if self._borrowed is not None:
            self._borrowed.own_all()
            self._borrowed = None

    def _meta(self) -> dict:
        return {
            "layout": self.layout.state(),
            "envs": self._envs,
            "filled": self._filled,
            "shapes": [list(t.shape) for t in self._leaves],
            "filenames": list(self.filenames),
        }

    def checkpoint_state(self, path: Any) -> dict:
        """State for a checkpoint at ``path``: no copy when ``scratch_dir`` is ``path``."""
        if (
            self.layout is not None
            and self.scratch_dir is not None
            and Path(path).resolve() == self.scratch_dir.resolve()
        ):
            self._own_all()  # the files themselves are the checkpoint
            return {"in_place": True, **self._meta()}
        return self.state_dict()

    def load_state_dict(self, state: dict) -> None:
        if not state.get("in_place"):
            if state["layout"] is not None and self.scratch_dir is None:
                self._folder()
            self.existsok, self.filenames = True, []
            super().load_state_dict(state)
            return
        self._open(state)

    def _open(self, meta: dict) -> None:
        layout = Layout.from_state(meta["layout"])
        self._envs = int(meta["envs"])
        leaves = [
            MemoryMappedTensor.from_filename(f, dtype=dt, shape=torch.Size(shp))
            for f, dt, shp in zip(meta["filenames"], layout.dtypes, meta["shapes"], strict=False)
        ]
        self.filenames = list(meta["filenames"])
        self._attach(layout, leaves)
        self._filled = int(meta["filled"])

    def __getstate__(self) -> dict:
        # another process may write the files now, unseen by this one's tracker: from
        # here on a dump writes every chunk (none is linked from the previous snapshot)
        self._tracker = None
        self._own_all()  # the other process opens the files: they must hold every row
        state = {
            k: v
            for k, v in self.__dict__.items()
            if k not in ("_leaves", "_flat", "_finalizer", "layout", "_borrowed")
        }
        state["_meta"] = None if self.layout is None else self._meta()
        return state

    def __setstate__(self, state: dict) -> None:
        meta = state.pop("_meta")
        self.__dict__.update(state)
        self.auto_cleanup, self._own_dir, self._finalizer = False, False, None
        self.layout, self._leaves, self._flat, self._borrowed = None, [], [], None
        if meta is not None:
            self._open(meta)
        self._tracker = None  # shared with the pickling process (see __getstate__)


def _reserve(filename: str, nbytes: int) -> None:
    """Create the file with its blocks allocated now (``posix_fallocate``), so a full disk
    fails here, with a named error, not later as a SIGBUS on a write to a page with no
    block."""
    fd = os.open(filename, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if nbytes and hasattr(os, "posix_fallocate"):
            os.posix_fallocate(fd, 0, nbytes)
        else:
            os.ftruncate(fd, nbytes)
    finally:
        os.close(fd)
