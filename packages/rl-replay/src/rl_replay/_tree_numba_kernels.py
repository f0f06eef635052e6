"""Numba kernels of the CPU priority tree, compiled on first use.

The kernels walk :class:`~rl_replay._tree.PriorityTree`'s flat layout (all levels' sums
in one float64 array, all minima in another, level 0 first; node ``n`` of level
``l + 1`` is the parent of nodes ``n * F .. n * F + F - 1`` of level ``l``), one draw
or one index at a time: a scalar loop is cheaper than any tensor op once the batch is a
few hundred rows, because each tensor op costs microseconds of dispatch.

numba is imported by :func:`kernels` (not at module import: it takes a few hundred
milliseconds), and the kernels are compiled with ``cache=True``, so only the first
process on a machine pays the compilation (about a second per kernel).
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["BAD_INDEX", "BAD_PRIORITY", "kernels"]

BAD_PRIORITY = 1
"""Status of :func:`_set_priorities`: a priority is negative, NaN or infinite."""
BAD_INDEX = 2
"""Status of :func:`_set_priorities`: an index is outside ``[0, capacity)``."""


# The helpers the kernels call, as jit dispatchers: numba resolves a kernel's globals
# when it compiles it, so :func:`kernels` binds these before compiling anything.
_scan_jit: Any = None
_refresh_jit: Any = None


@functools.cache
def kernels() -> SimpleNamespace:
    """The compiled kernels (``numba.njit`` on first call, cached on disk)."""
    global _scan_jit, _refresh_jit
    import numba

    jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    _scan_jit, _refresh_jit = jit(_scan), jit(_refresh)
    return SimpleNamespace(
        descend=jit(_descend), update=jit(_update), set_priorities=jit(_set_priorities)
    )


def _scan(sums: np.ndarray, start: int, count: int, target: float) -> tuple[int, float]:
    """First child ``j`` of ``sums[start:start + count]`` whose running sum exceeds
    ``target``, and the mass before it; the last non-zero child if rounding leaves none."""
    acc = 0.0
    last = count - 1
    last_acc = 0.0
    for j in range(count):
        v = sums[start + j]
        if v > 0.0:
            if acc + v > target:
                return j, acc
            last, last_acc = j, acc
        acc += v
    return last, last_acc


def _descend(sums, mins, offsets, depth, fanout, n_top, u, beta, out_index, out_weight):  # noqa: ANN001, ANN202
    """Leaf of each draw ``u[i]`` (leaf ``k`` w.p. ``p_k / sum(p)``) and its weight
    ``(p_k / p_min) ** -beta`` (float32), written into ``out_index`` / ``out_weight``.

    Level by level over the whole batch rather than draw by draw: the draws of one level
    are independent, so the CPU overlaps their cache misses.
    """
    top = offsets[depth]
    total = 0.0
    low = np.inf
    for j in range(n_top):
        total += sums[top + j]
        low = min(low, mins[top + j])
    n = u.shape[0]
    target = np.empty(n, dtype=np.float64)
    for i in range(n):
        node, before = _scan_jit(sums, top, n_top, u[i] * total)
        target[i] = u[i] * total - before
        out_index[i] = node
    for level in range(depth - 1, -1, -1):
        touch = 0.0  # load every chosen block first: independent loads overlap their
        for i in range(n):  # cache misses, the branchy scan below would serialise them
            touch += sums[offsets[level] + out_index[i] * fanout]
        target[0] += touch * 0.0  # keeps the loads (``touch`` is finite)
        for i in range(n):
            node = out_index[i]
            child, before = _scan_jit(sums, offsets[level] + node * fanout, fanout, target[i])
            target[i] -= before
            out_index[i] = node * fanout + child
    for i in range(n):
        out_weight[i] = (sums[out_index[i]] / low) ** -beta


def _refresh(sums, mins, offsets, depth, fanout, index):  # noqa: ANN001, ANN202
    """Recompute the ancestors of the leaves ``index`` (sum and min of their children).

    Level by level over the batch (the CPU overlaps the independent cache misses); a
    parent shared by several leaves is recomputed once per leaf, to the same values.
    """
    divisor = 1
    for level in range(depth):
        divisor *= fanout
        for i in range(index.shape[0]):
            node = index[i] // divisor
            start = offsets[level] + node * fanout
            s = 0.0
            m = np.inf
            for j in range(fanout):
                s += sums[start + j]
                m = min(m, mins[start + j])
            sums[offsets[level + 1] + node] = s
            mins[offsets[level + 1] + node] = m


def _update(sums, mins, offsets, depth, fanout, index, value):  # noqa: ANN001, ANN202
    """``leaves[index] = value`` (already checked), then refresh the ancestors."""
    for i in range(index.shape[0]):
        sums[index[i]] = value[i]
        mins[index[i]] = value[i]
    _refresh_jit(sums, mins, offsets, depth, fanout, index)


def _set_priorities(  # noqa: ANN202
    sums,
    mins,
    offsets,
    depth,
    fanout,
    index,
    priority,
    eps,
    alpha,
    capacity,
    check_index,  # noqa: ANN001
):
    """Check every priority (and index), then write ``(p + eps) ** alpha``.

    Returns ``(status, largest priority)``: status 0 when written, else
    :data:`BAD_PRIORITY` or :data:`BAD_INDEX`, with nothing written.
    """
    high = 0.0
    for i in range(index.shape[0]):
        p = priority[i]
        if not (p >= 0.0 and p < np.inf):  # NaN fails both
            return BAD_PRIORITY, high
        high = max(high, p)
        if check_index and not (0 <= index[i] < capacity):
            return BAD_INDEX, high
    for i in range(index.shape[0]):
        q = (priority[i] + eps) ** alpha
        sums[index[i]] = q
        mins[index[i]] = q
    _refresh_jit(sums, mins, offsets, depth, fanout, index)
    return 0, high
