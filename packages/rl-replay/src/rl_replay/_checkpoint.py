"""Atomic, verified checkpoints of a buffer: numbered snapshots and a pointer file.

The folder is an :class:`rl_profiling.atomic.AtomicDirectory` (the one writer the run
checkpointer uses too): ``dumps(path)`` writes ``path/ckpt-<n>.tmp``, then its
``manifest.json`` last (size and SHA-256 of each file), renames it into place, replaces
``path/LATEST`` atomically and keeps the ``keep`` newest snapshots. Killed at any point,
``LATEST`` names a complete snapshot. ``loads`` verifies the snapshot first (``state.pt``
and the priority tree by checksum, chunk files by size, by checksum on request) and falls
back to the newest intact one with a warning naming what was skipped and why.

A tensor storage's rows go to chunk files (:mod:`rl_replay._snapshot`): chunks unchanged
since the base snapshot are hard links to its files. The base is the snapshot *before* the
newest (see :meth:`~rl_profiling.atomic.AtomicDirectory.base`), which the dump's commit
removes, so the newest snapshot and its fallback never share a file.
"""

from __future__ import annotations

import io
import logging
import warnings
from pathlib import Path
from typing import Any

import torch
from rl_profiling.atomic import AtomicDirectory

from rl_replay._snapshot import dump_chunks, write_file
from rl_replay._tree_snapshot import dump_tree, load_tree
from rl_replay.exceptions import CheckpointError

__all__ = ["dump_state", "load_state", "snapshot_folder"]

_log = logging.getLogger(__name__)
_STATE = "state.pt"
_SIZE_ONLY = ("data/*.bin",)
"""Chunk files: checked by size on load (a restore stays memory-mapped), by checksum on
request."""


def _chunked(storage: Any) -> bool:
    return (
        getattr(storage, "layout", None) is not None
        and hasattr(storage, "_tracker")
        and (not storage.compilable)
    )


def _base(path: Path, base: Any, keep: int) -> Path | None:
    """The snapshot chunks may be linked from: ``base``'s newest, or ``path``'s own base."""
    if base is not None:
        return AtomicDirectory(base, error=CheckpointError).latest()
    return AtomicDirectory(path, keep=keep, error=CheckpointError).base()


def dump_state(buffer: Any, path: Any, base: Any = None, keep: int = 2) -> None:
    """Write ``buffer``'s state as a new snapshot under ``path`` and point LATEST at it.

    Chunks of rows unchanged since the base snapshot (under ``base`` when given: its
    newest; else the one before ``path``'s newest) are linked from it rather than written.

    Raises:
        CheckpointError: an OS failure (full disk, file size limit), naming the path and
            the bytes wanted; the unfinished snapshot is removed, LATEST is unchanged.
    """
    path = Path(path)
    folder = AtomicDirectory(path, keep=keep, error=CheckpointError)
    base_dir = _base(path, base, keep)
    tmp = folder.begin()
    try:
        storage = buffer.storage
        in_place = getattr(storage, "scratch_dir", None) is not None and (
            path.resolve() == storage.scratch_dir.resolve()
        )
        state = buffer.state_dict()
        if hasattr(storage, "checkpoint_state") and in_place:
            state["storage"] = storage.checkpoint_state(path)
        elif _chunked(storage):
            state["storage"] = dump_chunks(storage, tmp, base_dir)
        tree = getattr(buffer.sampler, "_tree", None)
        if tree is not None:  # its leaves as files: a delta over the base's when few changed
            state["sampler"]["tree"] = {"files": dump_tree(tree, tmp, base_dir)}
        body = io.BytesIO()
        torch.save(state, body)
        write_file(tmp / _STATE, torch.frombuffer(body.getbuffer(), dtype=torch.uint8))
    except BaseException:
        folder.abort(tmp)
        raise
    folder.commit(tmp, {"kind": "replay", "type": type(buffer).__qualname__},
                  size_only=_SIZE_ONLY, base=base_dir)


def snapshot_folder(path: Any, *, checksum: bool = False) -> Path:
    """The newest intact snapshot under ``path``; warns naming the newer ones skipped.

    Raises:
        CheckpointError: no intact snapshot (each one's problem is named).
    """
    folder = AtomicDirectory(path, error=CheckpointError)
    found, skipped = folder.newest_valid(checksum=checksum)
    why = "; ".join(f"{p.name}: {reason}" for p, reason in skipped)
    if found is None:
        raise CheckpointError(
            f"path: expected a checkpoint directory with an intact snapshot, got "
            f"{str(path)!r} (LATEST={folder.latest_name()!r}"
            + (f"; skipped {why})" if skipped else ")")
        )
    if skipped:
        message = f"{path}: loading {found.name}; skipped {why}"
        _log.warning(message)
        warnings.warn(message, RuntimeWarning, stacklevel=3)
    return found


def load_state(buffer: Any, path: Any, *, checksum: bool = False) -> None:
    """Load the newest intact snapshot under ``path`` into ``buffer``.

    Snapshots are pickles (``torch.load(weights_only=False)``): load only your own.

    Raises:
        CheckpointError: no intact snapshot under ``path``.
    """
    where = snapshot_folder(path, checksum=checksum)
    state = torch.load(where / _STATE, weights_only=False)
    if state["storage"].get("chunked"):
        state["storage"]["folder"] = str(where)  # where its chunk files are
    tree_files = (state["sampler"].get("tree") or {}).get("files")
    if tree_files is not None:
        state["sampler"]["tree"] = load_tree(where)
    buffer.load_state_dict(state)
    tree = getattr(buffer.sampler, "_tree", None)
    if tree_files is not None and tree.tracker is not None:
        tree.tracker.forget()
        tree.tracker.taken(tree_files["id"])  # the next dump is a delta over this one
