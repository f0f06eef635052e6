"""Reset-aware LSTM and GRU cells over a chunk of time steps, forward and backward.

These are the torch implementations behind the ``"scan"`` backend (the Triton backend
swaps in fused kernels with the same contract). Shapes are time-major:

- ``xp``: ``[K, B, G]`` input projection ``x_t W_ih^T + b`` of the chunk (``G`` gate
  columns: ``4H`` for the LSTM in order ``i, f, g, o``; ``3H`` for the GRU in order
  ``r, z, n``, as in :class:`torch.nn.LSTM` / :class:`torch.nn.GRU`).
- ``keep``: ``[K, B, 1]``, ``0.0`` where ``is_init`` (the state entering that step is
  zeroed) and ``1.0`` elsewhere.
- states: ``[B, H]`` each (LSTM ``(h, c)``, GRU ``(h,)``); per-step outputs ``[K, B, H]``.
- ``saved``: ``[K, B, S]`` activations kept for the backward (``S = 4H`` for both cells).

The backward walks the chunk in reverse and returns the gradients of the
pre-activations, from which the caller forms the weight gradients with one matmul per
chunk (never one per step).
"""

from __future__ import annotations

import torch
from torch import Tensor

from rl_recurrent._matmul import addlinear, linear

__all__ = ["GRUCellMath", "LSTMCellMath"]


def tanh(x: Tensor, inplace: bool = False) -> Tensor:
    """``tanh(x)``, on the CPU as ``2 sigmoid(2x) - 1`` (within 2e-7 of it); ``inplace``
    overwrites ``x``.

    torch's CPU ``tanh`` is about 7 times slower than its ``sigmoid`` (16.7 against
    2.4 us on ``[32, 256]`` float32, one thread, AMD EPYC family 26), and the step loops
    call it two or three times per step; the four ops of the identity take about 8 us.
    Elsewhere (GPUs) the single kernel stays.
    """
    if not x.is_cpu:
        return x.tanh_() if inplace else torch.tanh(x)
    doubled = x.mul_(2) if inplace else torch.mul(x, 2)
    return doubled.sigmoid_().mul_(2).sub_(1)


class _CellMath:
    """What the two cells share: :meth:`recompute` replays a subclass's ``forward``, and
    ``saved`` holds ``save_factor * H`` activations per step for both."""

    save_factor = 4

    @classmethod
    def recompute(cls, xp, w_hh, b_hh, keep, states, outs, saved):
        """Replay the forward of a chunk into ``saved`` (used by ``recompute="full"``)."""
        scratch = tuple(torch.empty_like(o) for o in outs)
        cls.forward(xp, w_hh, b_hh, keep, states, scratch, saved)


class LSTMCellMath(_CellMath):
    """LSTM: ``c_t = f*c' + i*g``, ``h_t = o*tanh(c_t)`` with ``c' = keep_t * c_{t-1}``."""

    n_states = 2
    gate_factor = 4

    @staticmethod
    def forward(xp, w_hh, b_hh, keep, states, outs, saved):
        """Run the chunk; write states to ``outs`` and gates to ``saved`` (if given)."""
        h, c = states
        h_out, c_out = outs
        hsz = h.shape[-1]
        for k in range(xp.shape[0]):
            gates = addlinear(xp[k], h * keep[k], w_hh, out=None if saved is None else saved[k])
            gates[:, : 2 * hsz].sigmoid_()
            tanh(gates[:, 2 * hsz : 3 * hsz], inplace=True)
            gates[:, 3 * hsz :].sigmoid_()
            i, f, g, o = gates.chunk(4, 1)
            c = torch.addcmul(f * (c * keep[k]), i, g, out=c_out[k])
            h = torch.mul(o, tanh(c), out=h_out[k])
        return h, c

    @staticmethod
    def backward(saved, prev, outs, d_outs, carry, w_hh, keep, d_pre):
        """Reverse pass; writes pre-activation grads to ``d_pre`` and returns the carry.

        ``prev`` are the states entering each step, already multiplied by ``keep``.
        """
        _, c_prev = prev
        _, c_out = outs
        dh_out, dc_out = d_outs
        dh, dc = carry
        w_t = w_hh.t().contiguous()  # d @ W_hh = linear(d, W_hh^T)
        hsz = w_hh.shape[1]
        for k in range(saved.shape[0] - 1, -1, -1):
            gates = saved[k]
            i, f, g, o = gates.chunk(4, 1)
            dh = dh_out[k] + dh
            tc = tanh(c_out[k])
            dc = (dc_out[k] + dc).addcmul_(dh * o, 1 - tc * tc)
            # d_pre = (dc*g, dc*c', dc*i, dh*tanh(c)) * (i', f', g', o'): the sigmoid
            # derivative s*(1-s) for all four blocks at once, then g's (1-g^2) over it
            di, df, dg, do = d_pre[k].chunk(4, 1)
            torch.mul(dc, g, out=di)
            torch.mul(dc, c_prev[k], out=df)
            torch.mul(dc, i, out=dg)
            torch.mul(dh, tc, out=do)
            slope = gates * (1 - gates)
            torch.mul(g, g, out=slope[:, 2 * hsz : 3 * hsz]).neg_().add_(1)
            d_pre[k].mul_(slope)
            dc = dc.mul_(f).mul_(keep[k])
            dh = linear(d_pre[k], w_t).mul_(keep[k])
        return dh, dc


class GRUCellMath(_CellMath):
    """GRU: ``n = tanh(x_n + r*(W_hn h' + b_hn))``, ``h_t = (1-z)*n + z*h'``."""

    n_states = 1
    gate_factor = 3

    @staticmethod
    def forward(xp, w_hh, b_hh, keep, states, outs, saved):
        """Run the chunk; ``saved`` gets ``(r, z, n, W_hn h' + b_hn)`` per step."""
        (h,) = states
        (h_out,) = outs
        hsz = h.shape[-1]
        for k in range(xp.shape[0]):
            h = h * keep[k]
            hp = linear(h, w_hh, b_hh)
            xr, xn = xp[k].split([2 * hsz, hsz], 1)
            rz = torch.sigmoid(xr + hp[:, : 2 * hsz])
            r, z = rz.chunk(2, 1)
            hn = hp[:, 2 * hsz :]
            n = tanh(torch.addcmul(xn, r, hn), inplace=True)
            h = torch.addcmul(n, z, h - n, out=h_out[k])
            if saved is not None:
                torch.cat([rz, n, hn], 1, out=saved[k])
        return (h,)

    @staticmethod
    def backward(saved, prev, outs, d_outs, carry, w_hh, keep, d_pre):
        """Reverse pass; ``d_pre`` is ``[K, B, 4H]``: ``(d_r, d_z, d_n_x, d_n_h)``."""
        (h_prev,) = prev
        (dh_out,) = d_outs
        (dh,) = carry
        hsz = h_prev.shape[-1]
        w_t = w_hh.t().contiguous()  # d @ W_hh = linear(d, W_hh^T)
        for k in range(saved.shape[0] - 1, -1, -1):
            r, z, n, hn = saved[k].chunk(4, 1)
            dh = dh_out[k] + dh
            dr, dz, dnx, dnh = d_pre[k].chunk(4, 1)
            torch.mul(dh * (1 - z), 1 - n * n, out=dnx)
            torch.mul(dnx * hn, r * (1 - r), out=dr)
            torch.mul(dh * (h_prev[k] - n), z * (1 - z), out=dz)
            torch.mul(dnx, r, out=dnh)
            d_hidden = torch.cat([d_pre[k][:, : 2 * hsz], dnh], 1)
            dh = addlinear(dh * z, d_hidden, w_t) * keep[k]
        return (dh,)


def pre_gradients(cell: type, d_pre: Tensor) -> tuple[Tensor, Tensor]:
    """Split ``d_pre`` into the gradients w.r.t. the input and hidden projections."""
    if cell is LSTMCellMath:
        return d_pre, d_pre
    hsz = d_pre.shape[-1] // 4
    d_x = d_pre[..., : 3 * hsz]
    d_h = torch.cat([d_pre[..., : 2 * hsz], d_pre[..., 3 * hsz :]], -1)
    return d_x, d_h
