"""Triton kernels of the priority tree, as plain functions until first use.

Module-level code may not import triton (the optional ``[cuda]`` extra), so the kernels
are ordinary functions whose annotations stay strings; :func:`kernels` wraps them with
``triton.jit`` on first use (cached per ``TRITON_INTERPRET`` setting, which the decorator
reads) and binds ``tl`` in this module for them. They call only ``triton.language``
builtins: sums, minima and running sums are ``tl.reduce`` / ``tl.associative_scan``
with combine functions of this module (jit-wrapped at the same time), not the
``@triton.jit`` helpers ``tl.sum`` / ``tl.cumsum``, so that they also run in Triton's
interpreter when ``triton`` was imported before ``TRITON_INTERPRET=1`` was set.

Layout (see :mod:`rl_replay._tree`): all levels' sums in one flat float64 buffer, all
minima in another, level 0 (the leaves) first; ``level_offsets[l]`` is where level ``l``
starts and node ``n`` of level ``l + 1`` is the parent of nodes ``n * F .. n * F + F - 1``
of level ``l``. ``cum`` is ``[0, cumsum(top)]`` (the top level's inclusive prefix sums
after a leading 0), computed by one torch ``cumsum`` before :func:`_descend_kernel`.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

__all__ = ["kernels"]

# ``triton.language`` and the jit-wrapped combine functions, bound by :func:`kernels`;
# the kernels below resolve them here.
tl: Any = None
_add: Any = None
_min: Any = None


@functools.lru_cache(maxsize=2)
def kernels(interpret: bool) -> SimpleNamespace:
    """``triton.jit``-wrap the kernels (cached per interpreter setting)."""
    global tl, _add, _min
    import triton
    import triton.language

    tl = triton.language
    _add, _min = triton.jit(_add_combine), triton.jit(_min_combine)
    del interpret  # only the cache key: the decorator reads TRITON_INTERPRET itself
    return SimpleNamespace(refresh=triton.jit(_refresh_kernel), descend=triton.jit(_descend_kernel))


def _add_combine(a, b):
    return a + b


def _min_combine(a, b):
    return tl.minimum(a, b)


def _refresh_kernel(
    sum_ptr, min_ptr, index_ptr, n_index, child_off, parent_off, divisor,
    FANOUT: tl.constexpr, FANOUT_P2: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Recompute the parents (at ``parent_off``) of leaves ``index // divisor``.

    ``divisor`` is ``F ** (l + 1)`` for level ``l + 1``; each parent's ``F`` children
    (at ``child_off``) are summed and min-reduced. Duplicate parents store equal values.
    """
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_index
    parent = tl.load(index_ptr + offs, mask=mask, other=0) // divisor
    j = tl.arange(0, FANOUT_P2)
    tile_mask = mask[:, None] & (j < FANOUT)[None, :]
    child = child_off + parent[:, None] * FANOUT + j[None, :]
    sums = tl.load(sum_ptr + child, mask=tile_mask, other=0.0)
    mins = tl.load(min_ptr + child, mask=tile_mask, other=float("inf"))
    tl.store(sum_ptr + parent_off + parent, tl.reduce(sums, 1, _add), mask=mask)
    tl.store(min_ptr + parent_off + parent, tl.reduce(mins, 1, _min), mask=mask)


def _descend_kernel(
    sum_ptr, offsets_ptr, cum_ptr, u_ptr, out_ptr, n_query, n_top,
    DEPTH: tl.constexpr, SEARCH_STEPS: tl.constexpr,
    FANOUT: tl.constexpr, FANOUT_P2: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """Leaf of each draw ``u``: binary search in the top prefix sums, then per level.

    At the top, node = the number of prefix sums ``<= u * total`` (``searchsorted``
    with ``right=True``), clamped to the last node; below, the same count over the
    running sum of the node's ``F`` children, minus the mass of the children skipped.
    """
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_query
    total = tl.load(cum_ptr + n_top)
    target = tl.load(u_ptr + offs, mask=mask, other=0.0) * total
    lo = tl.full([BLOCK], 0, dtype=tl.int64)
    hi = tl.full([BLOCK], 0, dtype=tl.int64) + n_top
    for _ in range(SEARCH_STEPS):  # first i with cum[i + 1] > target
        active = lo < hi
        mid = (lo + hi) // 2
        c = tl.load(cum_ptr + 1 + mid, mask=mask & active, other=0.0)
        right = active & (c <= target)
        lo = tl.where(right, mid + 1, lo)
        hi = tl.where(active & (c > target), mid, hi)
    node = tl.minimum(lo, n_top - 1)
    target = target - tl.load(cum_ptr + node, mask=mask, other=0.0)
    j = tl.arange(0, FANOUT_P2)
    tile_mask = mask[:, None] & (j < FANOUT)[None, :]
    for step in range(DEPTH):
        level_off = tl.load(offsets_ptr + (DEPTH - 1 - step))
        child = level_off + node[:, None] * FANOUT + j[None, :]
        sums = tl.load(sum_ptr + child, mask=tile_mask, other=0.0)
        running = tl.associative_scan(sums, 1, _add)
        below = tile_mask & (running <= target[:, None])
        k = tl.minimum(tl.reduce(below.to(tl.int64), 1, _add), FANOUT - 1)
        skipped = tl.where(j[None, :] < k[:, None], sums, 0.0)
        target = target - tl.reduce(skipped, 1, _add)
        node = node * FANOUT + k
    tl.store(out_ptr + offs, node, mask=mask)
