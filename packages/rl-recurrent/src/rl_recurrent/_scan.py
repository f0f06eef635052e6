"""The ``"scan"`` backend: one recurrent layer as an autograd Function over time chunks.

Forward: for each chunk of ``chunk`` steps, one matmul projects the inputs, then the cell
runs step by step with the resets applied inside (``keep``). Backward: the cell walks each
chunk in reverse and yields pre-activation gradients; the weight and input gradients are
then one matmul per chunk. With ``recompute="full"`` the gates are not stored: each chunk
is replayed from the saved states at its boundary before its backward, so the extra
memory is one chunk of gates instead of ``T`` of them.

The per-step math lives in :mod:`rl_recurrent._cells` (torch) and
:mod:`rl_recurrent._triton` (fused kernels); both honour the same contract.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from rl_recurrent._cells import pre_gradients
from rl_recurrent._matmul import addlinear, linear

__all__ = ["CHUNK", "TorchImpl", "run_layer"]

CHUNK = 32
"""Time steps per chunk (projection matmuls and, with recompute, the replay window)."""


def _prev_states(states0, outs, keep, t0, t1):
    """States entering steps ``t0..t1-1``, multiplied by ``keep`` (the reset)."""
    prev = []
    for s0, out in zip(states0, outs, strict=True):
        first = s0.unsqueeze(0) if t0 == 0 else out[t0 - 1 : t0]
        prev.append(torch.cat([first, out[t0 : t1 - 1]], 0) * keep[t0:t1])
    return prev


class _Layer(torch.autograd.Function):
    @staticmethod
    def forward(ctx, impl, cell, recompute, x, w_ih, b_x, w_hh, b_hh, keep, *states0):
        t_len, batch, _ = x.shape
        hsz = w_hh.shape[1]
        outs = tuple(x.new_empty(t_len, batch, hsz) for _ in range(cell.n_states))
        saved = None if recompute else x.new_empty(t_len, batch, cell.save_factor * hsz)
        states = states0
        for t0 in range(0, t_len, CHUNK):
            t1 = min(t0 + CHUNK, t_len)
            xp = _project(x[t0:t1], w_ih, b_x)
            sv = None if saved is None else saved[t0:t1]
            states = impl.forward(
                cell, xp, w_hh, b_hh, keep[t0:t1], states, [o[t0:t1] for o in outs], sv
            )
        ctx.impl, ctx.cell, ctx.recompute = impl, cell, recompute
        ctx.has_b = (b_x is not None, b_hh is not None)
        ctx.save_for_backward(x, w_ih, b_x, w_hh, b_hh, keep, saved, *states0, *outs)
        ctx.mark_non_differentiable(keep)
        return outs if len(outs) > 1 else outs[0]

    @staticmethod
    def backward(ctx, *d_outs):
        x, w_ih, b_x, w_hh, b_hh, keep, saved, *rest = ctx.saved_tensors
        cell, impl = ctx.cell, ctx.impl
        states0, outs = rest[: cell.n_states], rest[cell.n_states :]
        d_outs = [
            torch.zeros_like(o) if d is None else d for d, o in zip(d_outs, outs, strict=True)
        ]
        grads = _Grads(x, w_ih, w_hh, ctx.has_b)
        carry = tuple(torch.zeros_like(s) for s in states0)
        t_len = x.shape[0]
        for t0 in reversed(range(0, t_len, CHUNK)):
            t1 = min(t0 + CHUNK, t_len)
            prev = _prev_states(states0, outs, keep, t0, t1)
            if saved is None:
                sv = x.new_empty(t1 - t0, x.shape[1], cell.save_factor * w_hh.shape[1])
                xp = _project(x[t0:t1], w_ih, b_x)
                entering = [p[0] for p in prev]
                impl.recompute(cell, xp, w_hh, b_hh, keep[t0:t1], entering, outs, sv, t0, t1)
            else:
                sv = saved[t0:t1]
            d_pre = x.new_empty(t1 - t0, x.shape[1], sv.shape[-1])
            chunk_outs = [o[t0:t1] for o in outs]
            chunk_d = [d[t0:t1] for d in d_outs]
            carry = impl.backward(
                cell, sv, prev, chunk_outs, chunk_d, carry, w_hh, keep[t0:t1], d_pre
            )
            grads.add_chunk(cell, t0, t1, x, d_pre, prev[0])
        return (None, None, None, *grads.result(), None, *carry)


def _project(x: Tensor, w_ih: Tensor, b_x: Tensor | None) -> Tensor:
    out = linear(x.reshape(-1, x.shape[-1]), w_ih, b_x)
    return out.view(x.shape[0], x.shape[1], -1)


class _Grads:
    """Accumulates the input and weight gradients, one matmul per chunk."""

    def __init__(self, x: Tensor, w_ih: Tensor, w_hh: Tensor, has_b: tuple[bool, bool]):
        self.w_ih_t = w_ih.t().contiguous()  # d @ W_ih = linear(d, W_ih^T)
        self.dx = torch.empty_like(x)
        self.dw_ih = torch.zeros_like(w_ih)
        self.dw_hh = torch.zeros_like(w_hh)
        self.db_x = x.new_zeros(w_ih.shape[0]) if has_b[0] else None
        self.db_hh = x.new_zeros(w_hh.shape[0]) if has_b[1] else None

    def add_chunk(self, cell, t0: int, t1: int, x: Tensor, d_pre: Tensor, h_prev: Tensor) -> None:
        d_x, d_h = pre_gradients(cell, d_pre)
        d_x = d_x.reshape(-1, d_x.shape[-1])
        d_h = d_h.reshape(-1, d_h.shape[-1])
        self.dx[t0:t1] = linear(d_x, self.w_ih_t).view(t1 - t0, x.shape[1], -1)
        x_rows = x[t0:t1].reshape(-1, x.shape[-1])
        h_rows = h_prev.reshape(-1, h_prev.shape[-1])
        addlinear(self.dw_ih, d_x.t(), x_rows.t(), out=self.dw_ih)  # dW_ih += d_x^T x
        addlinear(self.dw_hh, d_h.t(), h_rows.t(), out=self.dw_hh)  # dW_hh += d_h^T h_prev
        if self.db_x is not None:
            self.db_x += d_x.sum(0)
        if self.db_hh is not None:
            self.db_hh += d_h.sum(0)

    def result(self) -> tuple[Any, ...]:
        return self.dx, self.dw_ih, self.db_x, self.dw_hh, self.db_hh


class TorchImpl:
    """The per-chunk step loops written in torch (:mod:`rl_recurrent._cells`)."""

    @staticmethod
    def forward(cell, xp, w_hh, b_hh, keep, states, outs, saved):
        return cell.forward(xp, w_hh, b_hh, keep, states, outs, saved)

    @staticmethod
    def recompute(cell, xp, w_hh, b_hh, keep, entering, outs, saved, t0, t1):
        cell.recompute(xp, w_hh, b_hh, keep, entering, [o[t0:t1] for o in outs], saved)

    @staticmethod
    def backward(cell, saved, prev, outs, d_outs, carry, w_hh, keep, d_pre):
        return cell.backward(saved, prev, outs, d_outs, carry, w_hh, keep, d_pre)


def run_layer(
    cell: type,
    x: Tensor,
    weights: tuple[Tensor, Tensor | None, Tensor, Tensor | None],
    keep: Tensor,
    states0: tuple[Tensor, ...],
    *,
    recompute: bool = False,
    impl: Any = TorchImpl,
) -> tuple[Tensor, ...]:
    """Run one layer over ``x`` ``[T, B, I]``; return the per-step states ``[T, B, H]``.

    Args:
        cell: :class:`~rl_recurrent._cells.LSTMCellMath` or ``GRUCellMath``.
        x: the layer input, time-major.
        weights: ``(w_ih, b_x, w_hh, b_hh)``; for the LSTM ``b_x = b_ih + b_hh`` and
            ``b_hh`` is ``None``; for the GRU ``b_x = b_ih`` and ``b_hh`` stays apart.
        keep: ``[T, B, 1]`` float, ``0`` where the state is reset before the step.
        states0: the states before step 0, ``[B, H]`` each.
        recompute: replay the forward in the backward instead of storing the gates.
        impl: where the step loops run (torch here, fused kernels in ``_triton``).

    Returns:
        The per-step states: ``(h, c)`` for the LSTM, ``(h,)`` for the GRU.
    """
    w_ih, b_x, w_hh, b_hh = weights
    out = _Layer.apply(impl, cell, recompute, x, w_ih, b_x, w_hh, b_hh, keep, *states0)
    return out if isinstance(out, tuple) else (out,)
