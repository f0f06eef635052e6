"""A priority tree's leaves in a checkpoint: a base file and deltas, linked when unchanged.

Priorities change all over a buffer (each ``update_priority`` touches the rows a sample
drew, spread at random), so chunks of leaves would nearly all be dirty after one batch:
1,000 random rows of 1M touch 970 of 1,000 chunks of 1,000 leaves. A snapshot's tree is
therefore ``tree/base.bin`` (every leaf: the sums, then the min leaves, float64) followed
by ``tree/delta.<k>.bin`` files, each holding the leaves changed since the snapshot before
it (their indices int64, then sums and min leaves). A dump hard-links the base snapshot's
base and deltas and writes one delta of the leaves a :class:`WriteTracker` (one row per
chunk) saw change: its cost is the number of changed leaves, 24 bytes each. Once the
deltas together exceed a quarter of the leaves, the dump writes a new base instead, so a
load reads at most 1.75 times the base and the disk holds at most that.

Inner nodes are not stored: a load rebuilds them from the leaves, to the same bits an
incremental update computes (each tree sums a block's children in its update's order).
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import torch

from rl_replay._snapshot import WriteTracker, write_file

__all__ = ["dump_tree", "load_tree"]

_TREE = "tree"
_BASE = "base.bin"
_META = "META"  # JSON: the snapshot's id, capacity and delta lengths
COMPACT_FRACTION = 0.25
"""A new base is written once the deltas hold more than this fraction of the leaves."""


def _link(src: Path, dst: Path) -> bool:
    try:
        os.link(src, dst)
        return True
    except OSError:  # another file system: the caller writes the file
        return False


def _raw(*tensors: torch.Tensor) -> torch.Tensor:
    """The tensors' bytes, one after the other (``[n]`` uint8, on the CPU)."""
    return torch.cat([t.detach().cpu().contiguous().view(torch.uint8) for t in tensors])


def _meta(snapshot: Path | None) -> dict | None:
    try:
        return json.loads((snapshot / _TREE / _META).read_text()) if snapshot else None
    except FileNotFoundError:
        return None


def _delta(tracker: WriteTracker | None, meta: dict | None, capacity: int) -> torch.Tensor | None:
    """The leaves changed since the base snapshot ``meta`` describes, or ``None`` when a
    new base is due (no known base, or the deltas would grow too large)."""
    if tracker is None or meta is None or meta["capacity"] != capacity:
        return None
    if not tracker.knows(meta["id"]):  # not the snapshot this tree last saved or loaded
        return None
    changed = tracker.changed(meta["id"])
    if sum(meta["deltas"]) + len(changed) > COMPACT_FRACTION * capacity:
        return None
    return changed


def _link_chain(base: Path, out: Path, deltas: list[int]) -> bool:
    """Link ``base``'s base file and deltas into ``out`` (``False``: one could not be)."""
    names = [_BASE] + [f"delta.{k}.bin" for k in range(len(deltas))]
    return all(_link(base / _TREE / name, out / name) for name in names)


def dump_tree(tree: Any, folder: Path, base: Path | None) -> dict:
    """Write ``tree``'s leaves under ``folder/tree``: a delta over snapshot ``base``'s
    tree when the tree's tracker knows it and the deltas stay small, else a new base.

    Returns:
        The tree's part of the snapshot state (id, capacity, delta lengths).
    """
    out = folder / _TREE
    out.mkdir()
    leaves, mins = tree.leaves, tree.min_leaves
    meta, tracker = _meta(base), tree.tracker
    changed = _delta(tracker, meta, tree.capacity)
    deltas: list[int] = []
    if changed is not None and _link_chain(base, out, meta["deltas"]):
        deltas = list(meta["deltas"])
        if len(changed):
            index = changed.to(leaves.device)
            raw = _raw(changed, leaves.index_select(0, index), mins.index_select(0, index))
            write_file(out / f"delta.{len(deltas)}.bin", raw)
            deltas.append(len(changed))
    else:
        for partial in out.iterdir():
            partial.unlink()
        write_file(out / _BASE, _raw(leaves, mins))
    state = {"id": uuid.uuid4().hex, "capacity": tree.capacity, "deltas": deltas}
    with open(out / _META, "w") as f:
        f.write(json.dumps(state))
        f.flush()
        os.fsync(f.fileno())
    if tracker is not None:
        tracker.taken(state["id"])
    return state


def load_tree(folder: Path) -> dict:
    """The tree state (``leaves``, ``min_leaves``, ``capacity``) of snapshot ``folder``:
    its base with every delta applied in order, and the snapshot's ``id``."""
    meta = _meta(folder)
    n = int(meta["capacity"])
    raw = torch.from_file(str(folder / _TREE / _BASE), size=16 * n, dtype=torch.uint8)
    both = raw.view(torch.float64)  # a private mapping: the file never changes
    leaves, mins = both[:n], both[n:]
    for k, m in enumerate(meta["deltas"]):
        name = str(folder / _TREE / f"delta.{k}.bin")
        delta = torch.from_file(name, size=24 * m, dtype=torch.uint8)
        index, values = delta[: 8 * m].view(torch.int64), delta[8 * m :].view(torch.float64)
        leaves.index_copy_(0, index, values[:m])
        mins.index_copy_(0, index, values[m:])
    return {"leaves": leaves, "min_leaves": mins, "capacity": n, "id": meta["id"]}
