"""Atomic checkpoints of a buffer: a directory of numbered snapshots and a pointer file.

``dumps(path)`` writes ``path/ckpt-<n>.tmp/state.pt``, fsyncs it, renames the directory
to ``ckpt-<n>``, then atomically replaces ``path/LATEST`` (``os.replace``) with its name,
and only then deletes older snapshots. Killed at any point, ``LATEST`` names a complete
snapshot: the previous one until the replace, the new one after.

A tensor storage's rows go to chunk files (:mod:`rl_replay._snapshot`): chunks unchanged
since the base snapshot (the previous one under ``path``, or the latest under ``base``)
are hard links to its files, so a dump writes what changed, not the whole buffer.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch

from rl_replay._snapshot import dump_chunks
from rl_replay._tree_snapshot import dump_tree, load_tree
from rl_replay.exceptions import CheckpointError

__all__ = ["dump_state", "load_state"]

_LATEST = "LATEST"
_STATE = "state.pt"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _latest(path: Path) -> str | None:
    try:
        return (path / _LATEST).read_text().strip()
    except FileNotFoundError:
        return None


def _chunked(storage: Any) -> bool:
    return (
        getattr(storage, "layout", None) is not None
        and hasattr(storage, "_tracker")
        and (not storage.compilable)
    )


def _snapshot_dir(path: Path | None) -> Path | None:
    """The snapshot ``path/LATEST`` names, if any."""
    name = None if path is None else _latest(path)
    return None if name is None else path / name


def dump_state(buffer: Any, path: Any, base: Any = None) -> None:
    """Write ``buffer``'s state as a new snapshot under ``path`` and point LATEST at it.

    Chunks of rows unchanged since the latest snapshot under ``base`` (default: ``path``)
    are linked from it rather than written.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    current = _latest(path)
    number = int(current.removeprefix("ckpt-")) + 1 if current else 0
    name = f"ckpt-{number}"
    tmp = path / f"{name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    storage = buffer.storage
    in_place = getattr(storage, "scratch_dir", None) is not None and (
        Path(path).resolve() == storage.scratch_dir.resolve()
    )
    state = buffer.state_dict()
    base_dir = _snapshot_dir(Path(base) if base is not None else path)
    if hasattr(storage, "checkpoint_state") and in_place:
        state["storage"] = storage.checkpoint_state(path)
    elif _chunked(storage):
        state["storage"] = dump_chunks(storage, tmp, base_dir)
    tree = getattr(buffer.sampler, "_tree", None)
    if tree is not None:  # its leaves as files: a delta over the base's when few changed
        state["sampler"]["tree"] = {"files": dump_tree(tree, tmp, base_dir)}
    with open(tmp / _STATE, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    shutil.rmtree(path / name, ignore_errors=True)  # left by a dump killed before LATEST
    os.rename(tmp, path / name)
    _fsync_dir(path)
    pointer = path / f"{_LATEST}.tmp"
    with open(pointer, "w") as f:
        f.write(name)
        f.flush()
        os.fsync(f.fileno())
    os.replace(pointer, path / _LATEST)
    _fsync_dir(path)
    for old in path.glob("ckpt-*"):
        if old.name != name:
            shutil.rmtree(old, ignore_errors=True)


def load_state(buffer: Any, path: Any) -> None:
    """Load the snapshot ``path/LATEST`` names into ``buffer``.

    Snapshots are pickles (``torch.load(weights_only=False)``): load only your own.
    """
    path = Path(path)
    name = _latest(path)
    if name is None or not (path / name / _STATE).is_file():
        raise CheckpointError(
            f"path: expected a checkpoint directory with {_LATEST} naming a snapshot, "
            f"got {str(path)!r} (LATEST={name!r})"
        )
    state = torch.load(path / name / _STATE, weights_only=False)
    if state["storage"].get("chunked"):
        state["storage"]["folder"] = str(path / name)  # where its chunk files are
    tree_files = (state["sampler"].get("tree") or {}).get("files")
    if tree_files is not None:
        state["sampler"]["tree"] = load_tree(path / name)
    buffer.load_state_dict(state)
    tree = getattr(buffer.sampler, "_tree", None)
    if tree_files is not None and tree.tracker is not None:
        tree.tracker.taken(tree_files["id"])  # the next dump is a delta over this one
