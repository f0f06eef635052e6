"""The Triton kernels of the ``"triton"`` backend, as plain functions until first use.

Module-level code may not import triton (an optional extra), so the kernels and the block
helpers they share are written here as ordinary functions whose annotations stay strings,
and :func:`kernels` wraps them with ``triton.jit`` on first use, binding ``tl`` for them.
They call only ``triton.language`` builtins and these helpers (none of triton's own
``@triton.jit`` helpers such as ``tl.sigmoid``, which were wrapped when triton was
imported), so they also run in Triton's interpreter when ``triton`` was imported before
``TRITON_INTERPRET=1`` was set. Each interpreter setting wraps its own copies, whose
global names resolve in a namespace of that setting: an interpreted kernel calls
interpreted helpers and a compiled kernel compiled ones, in the same process.

Layout (time-major, contiguous): ``xp`` ``[K, B, G]``, ``w`` = ``W_hh`` ``[G, H]``, ``keep``
``[K, B]``, states ``[B, H]``, per-step outputs ``[K, B, H]``, ``saved`` / ``d_pre``
``[K, B, 4H]`` as in :mod:`rl_recurrent._cells`. One program owns ``BLOCK_B`` batch rows
and every hidden unit; a ``tl.debug_barrier()`` separates the steps (and the two phases of
a backward step), so the global-memory state one thread writes is visible to the others
of its program before it is read.
"""

from __future__ import annotations

import functools
import types
from types import SimpleNamespace
from typing import Any

__all__ = ["kernels"]

# ``triton.language``, bound by :func:`kernels`; the kernels below resolve it there.
tl: Any = None


@functools.lru_cache(maxsize=2)
def kernels(interpret: bool) -> SimpleNamespace:
    """``triton.jit``-wrap the kernels and their helpers (cached per interpreter setting)."""
    global tl
    import triton
    import triton.language

    tl = triton.language
    del interpret  # only the cache key: the decorator reads TRITON_INTERPRET itself
    scope = dict(globals())  # this setting's global names: its kernels find its helpers here

    def jit(fn: Any) -> Any:
        copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__)
        return triton.jit(functools.update_wrapper(copy, fn))

    helpers = (_rows, _keep_at, _columns, _load_gates, _store_gates, _h_and_w, _add_gate,
               _add_d_w)
    for helper in helpers:
        scope[helper.__name__] = jit(helper)
    return SimpleNamespace(
        lstm_fwd=jit(_lstm_fwd_kernel),
        gru_fwd=jit(_gru_fwd_kernel),
        lstm_bwd=jit(_lstm_bwd_kernel),
        gru_bwd=jit(_gru_bwd_kernel),
    )


def _rows(batch, BLOCK_B: tl.constexpr):
    """This program's ``BLOCK_B`` batch rows and their mask."""
    offs_b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    return offs_b, offs_b < batch


def _keep_at(keep_ptr, k, batch, offs_b, mask_b):
    """``keep`` of step ``k`` for the rows ``offs_b``, as float32 (``0.0`` where reset)."""
    return tl.load(keep_ptr + k * batch + offs_b, mask=mask_b, other=0.0).to(tl.float32)


def _columns(j0, hidden, mask_b, BLOCK_H: tl.constexpr):
    """The hidden units ``j0 + [0, BLOCK_H)``: offsets, their mask, and the mask of the
    ``[BLOCK_B, BLOCK_H]`` block."""
    offs_j = j0 + tl.arange(0, BLOCK_H)
    mask_j = offs_j < hidden
    return offs_j, mask_j, mask_b[:, None] & mask_j[None, :]


def _load_gates(ptr, hidden, mask):
    """The four ``[BLOCK_B, BLOCK_H]`` gate blocks at ``ptr``, ``hidden`` apart, as float32."""
    a = tl.load(ptr, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(ptr + hidden, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(ptr + 2 * hidden, mask=mask, other=0.0).to(tl.float32)
    d = tl.load(ptr + 3 * hidden, mask=mask, other=0.0).to(tl.float32)
    return a, b, c, d


def _store_gates(ptr, a, b, c, d, hidden, mask):
    """Store four gate blocks at ``ptr``, ``hidden`` apart (the layout of :func:`_load_gates`)."""
    tl.store(ptr, a, mask=mask)
    tl.store(ptr + hidden, b, mask=mask)
    tl.store(ptr + 2 * hidden, c, mask=mask)
    tl.store(ptr + 3 * hidden, d, mask=mask)


def _h_and_w(hp_ptr, w_ptr, offs_b, mask_b, offs_j, mask_j, keep, k0, hidden,
             BLOCK_K: tl.constexpr):  # fmt: skip
    """The operands of ``gates += (h_{t-1} * keep_t) W_hh^T`` at the columns ``k0 +
    [0, BLOCK_K)`` of ``h``: its block ``[BLOCK_B, BLOCK_K]`` (float32, reset rows zeroed),
    and the pointers and mask of the ``W_hh^T`` block ``[BLOCK_K, BLOCK_H]`` of gate 0
    (gate ``q`` is ``q * H * H`` further on: :func:`_add_gate`)."""
    offs_k = k0 + tl.arange(0, BLOCK_K)
    mask_k = offs_k < hidden
    h_mask = mask_b[:, None] & mask_k[None, :]
    h = tl.load(hp_ptr + offs_b[:, None] * hidden + offs_k[None, :], mask=h_mask, other=0.0)
    w_t = w_ptr + offs_j[None, :] * hidden + offs_k[:, None]
    return h.to(tl.float32) * keep[:, None], w_t, mask_k[:, None] & mask_j[None, :]


def _add_gate(acc, h, w_t, w_mask, gate, hidden, PRECISION: tl.constexpr):
    """``acc + h W_hh^T`` for the block of gate ``gate`` (operands from :func:`_h_and_w`)."""
    w = tl.load(w_t + gate * hidden * hidden, mask=w_mask, other=0.0).to(tl.float32)
    return tl.dot(h, w, acc, input_precision=PRECISION)


def _add_d_w(acc, d_ptr, w_ptr, gate, mask_b, offs_j, mask_j, hidden,
             PRECISION: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """``acc + d W_hh[gate]`` over all of ``H``: ``d`` is the ``[BLOCK_B, H]`` gradient at
    ``d_ptr`` (a column of pointers, one per row) of the pre-activation of gate ``gate``,
    whose rows of ``W_hh`` are ``gate * H`` to ``(gate + 1) * H``."""
    for k0 in range(0, hidden, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        mask_k = offs_k < hidden
        d = tl.load(d_ptr + offs_k[None, :], mask=mask_b[:, None] & mask_k[None, :], other=0.0)
        w = tl.load(
            w_ptr + (gate * hidden + offs_k[:, None]) * hidden + offs_j[None, :],
            mask=mask_k[:, None] & mask_j[None, :], other=0.0,
        )  # fmt: skip
        acc = tl.dot(d.to(tl.float32), w.to(tl.float32), acc, input_precision=PRECISION)
    return acc


def _lstm_fwd_kernel(
    xp_ptr, w_ptr, keep_ptr, h0_ptr, c0_ptr, h_ptr, c_ptr, saved_ptr,
    n_steps, batch, hidden,
    SAVE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """LSTM chunk: ``xp`` ``[K, B, 4H]``, ``w`` ``[4H, H]``; ``saved`` gets ``i, f, g, o``."""
    offs_b, mask_b = _rows(batch, BLOCK_B)
    for k in range(n_steps):
        keep = _keep_at(keep_ptr, k, batch, offs_b, mask_b)
        if k == 0:
            hp_ptr = h0_ptr
            cp_ptr = c0_ptr
        else:
            hp_ptr = h_ptr + (k - 1) * batch * hidden
            cp_ptr = c_ptr + (k - 1) * batch * hidden
        for j0 in range(0, hidden, BLOCK_H):
            offs_j, mask_j, mask = _columns(j0, hidden, mask_b, BLOCK_H)
            gate = (k * batch + offs_b[:, None]) * 4 * hidden + offs_j[None, :]
            acc_i, acc_f, acc_g, acc_o = _load_gates(xp_ptr + gate, hidden, mask)
            for k0 in range(0, hidden, BLOCK_K):
                h_prev, w_t, w_mask = _h_and_w(
                    hp_ptr, w_ptr, offs_b, mask_b, offs_j, mask_j, keep, k0, hidden, BLOCK_K
                )
                acc_i = _add_gate(acc_i, h_prev, w_t, w_mask, 0, hidden, PRECISION)
                acc_f = _add_gate(acc_f, h_prev, w_t, w_mask, 1, hidden, PRECISION)
                acc_g = _add_gate(acc_g, h_prev, w_t, w_mask, 2, hidden, PRECISION)
                acc_o = _add_gate(acc_o, h_prev, w_t, w_mask, 3, hidden, PRECISION)
            i = 1.0 / (1.0 + tl.exp(-acc_i))
            f = 1.0 / (1.0 + tl.exp(-acc_f))
            g = 2.0 / (1.0 + tl.exp(-2.0 * acc_g)) - 1.0
            o = 1.0 / (1.0 + tl.exp(-acc_o))
            state = offs_b[:, None] * hidden + offs_j[None, :]
            c_prev = tl.load(cp_ptr + state, mask=mask, other=0.0).to(tl.float32)
            c = f * (c_prev * keep[:, None]) + i * g
            h = o * (2.0 / (1.0 + tl.exp(-2.0 * c)) - 1.0)
            tl.store(c_ptr + k * batch * hidden + state, c, mask=mask)
            tl.store(h_ptr + k * batch * hidden + state, h, mask=mask)
            if SAVE:
                _store_gates(saved_ptr + gate, i, f, g, o, hidden, mask)
        tl.debug_barrier()


def _gru_fwd_kernel(
    xp_ptr, w_ptr, bhh_ptr, keep_ptr, h0_ptr, h_ptr, saved_ptr,
    n_steps, batch, hidden,
    HAS_BHH: tl.constexpr, SAVE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """GRU chunk: ``xp`` ``[K, B, 3H]``, ``w`` ``[3H, H]``; ``saved`` gets ``r, z, n, hn``."""
    offs_b, mask_b = _rows(batch, BLOCK_B)
    for k in range(n_steps):
        keep = _keep_at(keep_ptr, k, batch, offs_b, mask_b)
        if k == 0:  # noqa: SIM108 - a runtime if, not a ternary, lowers in Triton
            hp_ptr = h0_ptr
        else:
            hp_ptr = h_ptr + (k - 1) * batch * hidden
        for j0 in range(0, hidden, BLOCK_H):
            offs_j, mask_j, mask = _columns(j0, hidden, mask_b, BLOCK_H)
            xrow = xp_ptr + k * batch * 3 * hidden + offs_b[:, None] * 3 * hidden + offs_j[None, :]
            acc_r = tl.load(xrow, mask=mask, other=0.0).to(tl.float32)
            acc_z = tl.load(xrow + hidden, mask=mask, other=0.0).to(tl.float32)
            acc_n = tl.full((BLOCK_B, BLOCK_H), 0.0, tl.float32)
            if HAS_BHH:
                b_r = tl.load(bhh_ptr + offs_j, mask=mask_j, other=0.0).to(tl.float32)
                b_z = tl.load(bhh_ptr + hidden + offs_j, mask=mask_j, other=0.0).to(tl.float32)
                b_n = tl.load(bhh_ptr + 2 * hidden + offs_j, mask=mask_j, other=0.0)
                acc_r += b_r[None, :]
                acc_z += b_z[None, :]
                acc_n += b_n.to(tl.float32)[None, :]
            for k0 in range(0, hidden, BLOCK_K):
                h_prev, w_t, w_mask = _h_and_w(
                    hp_ptr, w_ptr, offs_b, mask_b, offs_j, mask_j, keep, k0, hidden, BLOCK_K
                )
                acc_r = _add_gate(acc_r, h_prev, w_t, w_mask, 0, hidden, PRECISION)
                acc_z = _add_gate(acc_z, h_prev, w_t, w_mask, 1, hidden, PRECISION)
                acc_n = _add_gate(acc_n, h_prev, w_t, w_mask, 2, hidden, PRECISION)
            r = 1.0 / (1.0 + tl.exp(-acc_r))
            z = 1.0 / (1.0 + tl.exp(-acc_z))
            x_n = tl.load(xrow + 2 * hidden, mask=mask, other=0.0).to(tl.float32)
            n = 2.0 / (1.0 + tl.exp(-2.0 * (x_n + r * acc_n))) - 1.0
            state = offs_b[:, None] * hidden + offs_j[None, :]
            h_old = tl.load(hp_ptr + state, mask=mask, other=0.0).to(tl.float32) * keep[:, None]
            tl.store(h_ptr + k * batch * hidden + state, n + z * (h_old - n), mask=mask)
            if SAVE:
                srow = saved_ptr + (k * batch + offs_b[:, None]) * 4 * hidden + offs_j[None, :]
                _store_gates(srow, r, z, n, acc_n, hidden, mask)
        tl.debug_barrier()


def _lstm_bwd_kernel(
    saved_ptr, cprev_ptr, c_ptr, dh_out_ptr, dc_out_ptr, keep_ptr, w_ptr, dh_ptr, dc_ptr,
    dpre_ptr, n_steps, batch, hidden,
    PRECISION: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_K: tl.constexpr,
):  # fmt: skip
    """LSTM chunk in reverse: ``d_pre`` ``[K, B, 4H]``; ``dh``/``dc`` ``[B, H]`` carried in
    place."""
    offs_b, mask_b = _rows(batch, BLOCK_B)
    for step in range(n_steps):
        k = n_steps - 1 - step
        keep = _keep_at(keep_ptr, k, batch, offs_b, mask_b)
        for j0 in range(0, hidden, BLOCK_H):
            offs_j, _, mask = _columns(j0, hidden, mask_b, BLOCK_H)
            state = offs_b[:, None] * hidden + offs_j[None, :]
            at_k = k * batch * hidden + state
            gate = (k * batch + offs_b[:, None]) * 4 * hidden + offs_j[None, :]
            i, f, g, o = _load_gates(saved_ptr + gate, hidden, mask)
            c = tl.load(c_ptr + at_k, mask=mask, other=0.0).to(tl.float32)
            tc = 2.0 / (1.0 + tl.exp(-2.0 * c)) - 1.0
            dh = tl.load(dh_out_ptr + at_k, mask=mask, other=0.0).to(tl.float32)
            dh += tl.load(dh_ptr + state, mask=mask, other=0.0).to(tl.float32)
            dc = tl.load(dc_out_ptr + at_k, mask=mask, other=0.0).to(tl.float32)
            dc += tl.load(dc_ptr + state, mask=mask, other=0.0).to(tl.float32)
            dc += dh * o * (1.0 - tc * tc)
            c_prev = tl.load(cprev_ptr + at_k, mask=mask, other=0.0).to(tl.float32)
            d_i = dc * g * i * (1.0 - i)
            d_f = dc * c_prev * f * (1.0 - f)
            d_g = dc * i * (1.0 - g * g)
            _store_gates(dpre_ptr + gate, d_i, d_f, d_g, dh * tc * o * (1.0 - o), hidden, mask)
            tl.store(dc_ptr + state, dc * f * keep[:, None], mask=mask)
        tl.debug_barrier()
        # dh_{t-1} = (d_pre_t @ W_hh) * keep_t, over all four gates.
        d_row = dpre_ptr + (k * batch + offs_b[:, None]) * 4 * hidden
        for j0 in range(0, hidden, BLOCK_H):
            offs_j, mask_j, mask = _columns(j0, hidden, mask_b, BLOCK_H)
            acc = tl.full((BLOCK_B, BLOCK_H), 0.0, tl.float32)
            for q in tl.static_range(4):
                acc = _add_d_w(acc, d_row + q * hidden, w_ptr, q, mask_b, offs_j, mask_j, hidden,
                               PRECISION, BLOCK_K)  # fmt: skip
            state = offs_b[:, None] * hidden + offs_j[None, :]
            tl.store(dh_ptr + state, acc * keep[:, None], mask=mask)
        tl.debug_barrier()


def _gru_bwd_kernel(
    saved_ptr, hprev_ptr, dh_out_ptr, keep_ptr, w_ptr, dh_ptr, dpre_ptr,
    n_steps, batch, hidden,
    PRECISION: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_K: tl.constexpr,
):  # fmt: skip
    """GRU chunk in reverse: ``d_pre`` ``[K, B, 4H]`` = ``(d_r, d_z, d_n_x, d_n_h)``."""
    offs_b, mask_b = _rows(batch, BLOCK_B)
    for step in range(n_steps):
        k = n_steps - 1 - step
        keep = _keep_at(keep_ptr, k, batch, offs_b, mask_b)
        for j0 in range(0, hidden, BLOCK_H):
            offs_j, _, mask = _columns(j0, hidden, mask_b, BLOCK_H)
            state = offs_b[:, None] * hidden + offs_j[None, :]
            gate = (k * batch + offs_b[:, None]) * 4 * hidden + offs_j[None, :]
            r, z, n, hn = _load_gates(saved_ptr + gate, hidden, mask)
            h_prev = tl.load(hprev_ptr + k * batch * hidden + state, mask=mask, other=0.0)
            dh = tl.load(dh_out_ptr + k * batch * hidden + state, mask=mask, other=0.0)
            dh = dh.to(tl.float32) + tl.load(dh_ptr + state, mask=mask, other=0.0).to(tl.float32)
            dnx = dh * (1.0 - z) * (1.0 - n * n)
            dz = dh * (h_prev.to(tl.float32) - n) * z * (1.0 - z)
            _store_gates(dpre_ptr + gate, dnx * hn * r * (1.0 - r), dz, dnx, dnx * r, hidden, mask)
            tl.store(dh_ptr + state, dh * z, mask=mask)
        tl.debug_barrier()
        # dh_{t-1} = (dh * z + [d_r, d_z, d_n_h] @ W_hh) * keep_t.
        d_row = dpre_ptr + (k * batch + offs_b[:, None]) * 4 * hidden
        for j0 in range(0, hidden, BLOCK_H):
            offs_j, mask_j, mask = _columns(j0, hidden, mask_b, BLOCK_H)
            state = offs_b[:, None] * hidden + offs_j[None, :]
            acc = tl.load(dh_ptr + state, mask=mask, other=0.0).to(tl.float32)
            for q in tl.static_range(3):
                d_col = (q + q // 2) * hidden  # d_r, d_z, then d_n_h (skip d_n_x)
                acc = _add_d_w(acc, d_row + d_col, w_ptr, q, mask_b, offs_j, mask_j, hidden,
                               PRECISION, BLOCK_K)  # fmt: skip
            tl.store(dh_ptr + state, acc * keep[:, None], mask=mask)
        tl.debug_barrier()
