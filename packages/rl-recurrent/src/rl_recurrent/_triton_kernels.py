"""The Triton kernels of the ``"triton"`` backend, as plain functions until first use.

Module-level code may not import triton (an optional extra), so the kernels are written
here as ordinary functions whose annotations stay strings, and :func:`kernels` wraps them
with ``triton.jit`` on first use, binding ``tl`` in this module for them. They call only
``triton.language`` builtins (no ``@triton.jit`` helpers such as ``tl.sigmoid``), so they
also run in Triton's interpreter when ``triton`` was imported before ``TRITON_INTERPRET=1``
was set.

Layout (time-major, contiguous): ``xp`` ``[K, B, G]``, ``w`` = ``W_hh`` ``[G, H]``, ``keep``
``[K, B]``, states ``[B, H]``, per-step outputs ``[K, B, H]``, ``saved`` / ``d_pre``
``[K, B, 4H]`` as in :mod:`rl_recurrent._cells`. One program owns ``BLOCK_B`` batch rows
and every hidden unit; a ``tl.debug_barrier()`` separates the steps (and the two phases of
a backward step), so the global-memory state one thread writes is visible to the others
of its program before it is read.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace
from typing import Any

__all__ = ["kernels"]

# ``triton.language``, bound by :func:`kernels`; the kernels below resolve it here.
tl: Any = None


@functools.lru_cache(maxsize=2)
def kernels(interpret: bool) -> SimpleNamespace:
    """``triton.jit``-wrap the kernels (cached per interpreter setting)."""
    global tl
    import triton
    import triton.language

    tl = triton.language
    del interpret  # only the cache key: the decorator reads TRITON_INTERPRET itself
    return SimpleNamespace(
        lstm_fwd=triton.jit(_lstm_fwd_kernel),
        gru_fwd=triton.jit(_gru_fwd_kernel),
        lstm_bwd=triton.jit(_lstm_bwd_kernel),
        gru_bwd=triton.jit(_gru_bwd_kernel),
    )


def _lstm_fwd_kernel(
    xp_ptr, w_ptr, keep_ptr, h0_ptr, c0_ptr, h_ptr, c_ptr, saved_ptr,
    n_steps, batch, hidden,
    SAVE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """LSTM chunk: ``xp`` ``[K, B, 4H]``, ``w`` ``[4H, H]``; ``saved`` gets ``i, f, g, o``."""
    offs_b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    mask_b = offs_b < batch
    n_gates = 4 * hidden
    for k in range(n_steps):
        keep = tl.load(keep_ptr + k * batch + offs_b, mask=mask_b, other=0.0).to(tl.float32)
        if k == 0:
            hp_ptr = h0_ptr
            cp_ptr = c0_ptr
        else:
            hp_ptr = h_ptr + (k - 1) * batch * hidden
            cp_ptr = c_ptr + (k - 1) * batch * hidden
        for j0 in range(0, hidden, BLOCK_H):
            offs_j = j0 + tl.arange(0, BLOCK_H)
            mask = mask_b[:, None] & (offs_j < hidden)[None, :]
            xrow = xp_ptr + k * batch * n_gates + offs_b[:, None] * n_gates + offs_j[None, :]
            acc_i = tl.load(xrow, mask=mask, other=0.0).to(tl.float32)
            acc_f = tl.load(xrow + hidden, mask=mask, other=0.0).to(tl.float32)
            acc_g = tl.load(xrow + 2 * hidden, mask=mask, other=0.0).to(tl.float32)
            acc_o = tl.load(xrow + 3 * hidden, mask=mask, other=0.0).to(tl.float32)
            for k0 in range(0, hidden, BLOCK_K):
                offs_k = k0 + tl.arange(0, BLOCK_K)
                mask_k = offs_k < hidden
                h_mask = mask_b[:, None] & mask_k[None, :]
                h_prev = (
                    tl.load(
                        hp_ptr + offs_b[:, None] * hidden + offs_k[None, :], mask=h_mask, other=0.0
                    ).to(tl.float32)
                    * keep[:, None]
                )
                # W_hh^T block [BLOCK_K, BLOCK_H] of gate 0; gate q is q * H * H further on.
                w_t = w_ptr + offs_j[None, :] * hidden + offs_k[:, None]
                w_mask = mask_k[:, None] & (offs_j < hidden)[None, :]
                w_i = tl.load(w_t, mask=w_mask, other=0.0).to(tl.float32)
                w_f = tl.load(w_t + hidden * hidden, mask=w_mask, other=0.0).to(tl.float32)
                w_g = tl.load(w_t + 2 * hidden * hidden, mask=w_mask, other=0.0).to(tl.float32)
                w_o = tl.load(w_t + 3 * hidden * hidden, mask=w_mask, other=0.0).to(tl.float32)
                acc_i = tl.dot(h_prev, w_i, acc_i, input_precision=PRECISION)
                acc_f = tl.dot(h_prev, w_f, acc_f, input_precision=PRECISION)
                acc_g = tl.dot(h_prev, w_g, acc_g, input_precision=PRECISION)
                acc_o = tl.dot(h_prev, w_o, acc_o, input_precision=PRECISION)
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
                srow = saved_ptr + k * batch * n_gates + offs_b[:, None] * n_gates + offs_j[None, :]
                tl.store(srow, i, mask=mask)
                tl.store(srow + hidden, f, mask=mask)
                tl.store(srow + 2 * hidden, g, mask=mask)
                tl.store(srow + 3 * hidden, o, mask=mask)
        tl.debug_barrier()


def _gru_fwd_kernel(
    xp_ptr, w_ptr, bhh_ptr, keep_ptr, h0_ptr, h_ptr, saved_ptr,
    n_steps, batch, hidden,
    HAS_BHH: tl.constexpr, SAVE: tl.constexpr, PRECISION: tl.constexpr,
    BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    """GRU chunk: ``xp`` ``[K, B, 3H]``, ``w`` ``[3H, H]``; ``saved`` gets ``r, z, n, hn``."""
    offs_b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    mask_b = offs_b < batch
    for k in range(n_steps):
        keep = tl.load(keep_ptr + k * batch + offs_b, mask=mask_b, other=0.0).to(tl.float32)
        if k == 0:  # noqa: SIM108 - a runtime if, not a ternary, lowers in Triton
            hp_ptr = h0_ptr
        else:
            hp_ptr = h_ptr + (k - 1) * batch * hidden
        for j0 in range(0, hidden, BLOCK_H):
            offs_j = j0 + tl.arange(0, BLOCK_H)
            mask_j = offs_j < hidden
            mask = mask_b[:, None] & mask_j[None, :]
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
                offs_k = k0 + tl.arange(0, BLOCK_K)
                mask_k = offs_k < hidden
                h_mask = mask_b[:, None] & mask_k[None, :]
                h_prev = (
                    tl.load(
                        hp_ptr + offs_b[:, None] * hidden + offs_k[None, :], mask=h_mask, other=0.0
                    ).to(tl.float32)
                    * keep[:, None]
                )
                w_t = w_ptr + offs_j[None, :] * hidden + offs_k[:, None]
                w_mask = mask_k[:, None] & mask_j[None, :]
                w_r = tl.load(w_t, mask=w_mask, other=0.0).to(tl.float32)
                w_z = tl.load(w_t + hidden * hidden, mask=w_mask, other=0.0).to(tl.float32)
                w_n = tl.load(w_t + 2 * hidden * hidden, mask=w_mask, other=0.0).to(tl.float32)
                acc_r = tl.dot(h_prev, w_r, acc_r, input_precision=PRECISION)
                acc_z = tl.dot(h_prev, w_z, acc_z, input_precision=PRECISION)
                acc_n = tl.dot(h_prev, w_n, acc_n, input_precision=PRECISION)
            r = 1.0 / (1.0 + tl.exp(-acc_r))
            z = 1.0 / (1.0 + tl.exp(-acc_z))
            x_n = tl.load(xrow + 2 * hidden, mask=mask, other=0.0).to(tl.float32)
            n = 2.0 / (1.0 + tl.exp(-2.0 * (x_n + r * acc_n))) - 1.0
            state = offs_b[:, None] * hidden + offs_j[None, :]
            h_old = tl.load(hp_ptr + state, mask=mask, other=0.0).to(tl.float32) * keep[:, None]
            tl.store(h_ptr + k * batch * hidden + state, n + z * (h_old - n), mask=mask)
            if SAVE:
                srow = saved_ptr + (k * batch + offs_b[:, None]) * 4 * hidden + offs_j[None, :]
                tl.store(srow, r, mask=mask)
                tl.store(srow + hidden, z, mask=mask)
                tl.store(srow + 2 * hidden, n, mask=mask)
                tl.store(srow + 3 * hidden, acc_n, mask=mask)
        tl.debug_barrier()


def _lstm_bwd_kernel(
    saved_ptr, cprev_ptr, c_ptr, dh_out_ptr, dc_out_ptr, keep_ptr, w_ptr, dh_ptr, dc_ptr,
    dpre_ptr, n_steps, batch, hidden,
    PRECISION: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_K: tl.constexpr,
):  # fmt: skip
    """LSTM chunk in reverse: ``d_pre`` ``[K, B, 4H]``; ``dh``/``dc`` ``[B, H]`` carried in
    place."""
    offs_b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    mask_b = offs_b < batch
    for step in range(n_steps):
        k = n_steps - 1 - step
        keep = tl.load(keep_ptr + k * batch + offs_b, mask=mask_b, other=0.0).to(tl.float32)
        for j0 in range(0, hidden, BLOCK_H):
            offs_j = j0 + tl.arange(0, BLOCK_H)
            mask = mask_b[:, None] & (offs_j < hidden)[None, :]
            state = offs_b[:, None] * hidden + offs_j[None, :]
            at_k = k * batch * hidden + state
            gate = (k * batch + offs_b[:, None]) * 4 * hidden + offs_j[None, :]
            i = tl.load(saved_ptr + gate, mask=mask, other=0.0).to(tl.float32)
            f = tl.load(saved_ptr + gate + hidden, mask=mask, other=0.0).to(tl.float32)
            g = tl.load(saved_ptr + gate + 2 * hidden, mask=mask, other=0.0).to(tl.float32)
            o = tl.load(saved_ptr + gate + 3 * hidden, mask=mask, other=0.0).to(tl.float32)
            c = tl.load(c_ptr + at_k, mask=mask, other=0.0).to(tl.float32)
            tc = 2.0 / (1.0 + tl.exp(-2.0 * c)) - 1.0
            dh = tl.load(dh_out_ptr + at_k, mask=mask, other=0.0).to(tl.float32)
            dh += tl.load(dh_ptr + state, mask=mask, other=0.0).to(tl.float32)
            dc = tl.load(dc_out_ptr + at_k, mask=mask, other=0.0).to(tl.float32)
            dc += tl.load(dc_ptr + state, mask=mask, other=0.0).to(tl.float32)
            dc += dh * o * (1.0 - tc * tc)
            c_prev = tl.load(cprev_ptr + at_k, mask=mask, other=0.0).to(tl.float32)
            tl.store(dpre_ptr + gate, dc * g * i * (1.0 - i), mask=mask)
            tl.store(dpre_ptr + gate + hidden, dc * c_prev * f * (1.0 - f), mask=mask)
            tl.store(dpre_ptr + gate + 2 * hidden, dc * i * (1.0 - g * g), mask=mask)
            tl.store(dpre_ptr + gate + 3 * hidden, dh * tc * o * (1.0 - o), mask=mask)
            tl.store(dc_ptr + state, dc * f * keep[:, None], mask=mask)
        tl.debug_barrier()
        # dh_{t-1} = (d_pre_t @ W_hh) * keep_t, over all four gates.
        for j0 in range(0, hidden, BLOCK_H):
            offs_j = j0 + tl.arange(0, BLOCK_H)
            mask_j = offs_j < hidden
            acc = tl.full((BLOCK_B, BLOCK_H), 0.0, tl.float32)
            for q in tl.static_range(4):
                for k0 in range(0, hidden, BLOCK_K):
                    offs_k = k0 + tl.arange(0, BLOCK_K)
                    mask_k = offs_k < hidden
                    d_gate = dpre_ptr + (k * batch + offs_b[:, None]) * 4 * hidden + q * hidden
                    d = tl.load(
                        d_gate + offs_k[None, :], mask=mask_b[:, None] & mask_k[None, :], other=0.0
                    ).to(tl.float32)
                    w = tl.load(
                        w_ptr + (q * hidden + offs_k[:, None]) * hidden + offs_j[None, :],
                        mask=mask_k[:, None] & mask_j[None, :], other=0.0,
                    ).to(tl.float32)  # fmt: skip
                    acc = tl.dot(d, w, acc, input_precision=PRECISION)
            state = offs_b[:, None] * hidden + offs_j[None, :]
            tl.store(dh_ptr + state, acc * keep[:, None], mask=mask_b[:, None] & mask_j[None, :])
        tl.debug_barrier()


def _gru_bwd_kernel(
    saved_ptr, hprev_ptr, dh_out_ptr, keep_ptr, w_ptr, dh_ptr, dpre_ptr,
    n_steps, batch, hidden,
    PRECISION: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_K: tl.constexpr,
):  # fmt: skip
    """GRU chunk in reverse: ``d_pre`` ``[K, B, 4H]`` = ``(d_r, d_z, d_n_x, d_n_h)``."""
    offs_b = tl.program_id(0) * BLOCK_B + tl.arange(0, BLOCK_B)
    mask_b = offs_b < batch
    for step in range(n_steps):
        k = n_steps - 1 - step
        keep = tl.load(keep_ptr + k * batch + offs_b, mask=mask_b, other=0.0).to(tl.float32)
        for j0 in range(0, hidden, BLOCK_H):
            offs_j = j0 + tl.arange(0, BLOCK_H)
            mask = mask_b[:, None] & (offs_j < hidden)[None, :]
            state = offs_b[:, None] * hidden + offs_j[None, :]
            gate = (k * batch + offs_b[:, None]) * 4 * hidden + offs_j[None, :]
            r = tl.load(saved_ptr + gate, mask=mask, other=0.0).to(tl.float32)
            z = tl.load(saved_ptr + gate + hidden, mask=mask, other=0.0).to(tl.float32)
            n = tl.load(saved_ptr + gate + 2 * hidden, mask=mask, other=0.0).to(tl.float32)
            hn = tl.load(saved_ptr + gate + 3 * hidden, mask=mask, other=0.0).to(tl.float32)
            h_prev = tl.load(hprev_ptr + k * batch * hidden + state, mask=mask, other=0.0)
            dh = tl.load(dh_out_ptr + k * batch * hidden + state, mask=mask, other=0.0)
            dh = dh.to(tl.float32) + tl.load(dh_ptr + state, mask=mask, other=0.0).to(tl.float32)
            dnx = dh * (1.0 - z) * (1.0 - n * n)
            tl.store(dpre_ptr + gate, dnx * hn * r * (1.0 - r), mask=mask)
            dz = dh * (h_prev.to(tl.float32) - n) * z * (1.0 - z)
            tl.store(dpre_ptr + gate + hidden, dz, mask=mask)
            tl.store(dpre_ptr + gate + 2 * hidden, dnx, mask=mask)
            tl.store(dpre_ptr + gate + 3 * hidden, dnx * r, mask=mask)
            tl.store(dh_ptr + state, dh * z, mask=mask)
        tl.debug_barrier()
        # dh_{t-1} = (dh * z + [d_r, d_z, d_n_h] @ W_hh) * keep_t.
        for j0 in range(0, hidden, BLOCK_H):
            offs_j = j0 + tl.arange(0, BLOCK_H)
            mask_j = offs_j < hidden
            mask = mask_b[:, None] & mask_j[None, :]
            state = offs_b[:, None] * hidden + offs_j[None, :]
            acc = tl.load(dh_ptr + state, mask=mask, other=0.0).to(tl.float32)
            for q in tl.static_range(3):
                for k0 in range(0, hidden, BLOCK_K):
                    offs_k = k0 + tl.arange(0, BLOCK_K)
                    mask_k = offs_k < hidden
                    d_col = (q + q // 2) * hidden  # d_r, d_z, then d_n_h (skip d_n_x)
                    d_gate = dpre_ptr + (k * batch + offs_b[:, None]) * 4 * hidden + d_col
                    d = tl.load(
                        d_gate + offs_k[None, :], mask=mask_b[:, None] & mask_k[None, :], other=0.0
                    ).to(tl.float32)
                    w = tl.load(
                        w_ptr + (q * hidden + offs_k[:, None]) * hidden + offs_j[None, :],
                        mask=mask_k[:, None] & mask_j[None, :], other=0.0,
                    ).to(tl.float32)  # fmt: skip
                    acc = tl.dot(d, w, acc, input_precision=PRECISION)
            tl.store(dh_ptr + state, acc * keep[:, None], mask=mask)
        tl.debug_barrier()
