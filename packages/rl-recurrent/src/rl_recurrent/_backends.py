"""Recurrent-mode dispatch: run a whole ``[N, T]`` batch through the chosen backend."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from rl_recurrent._cells import GRUCellMath, LSTMCellMath
from rl_recurrent._pad import run_pad
from rl_recurrent._reset import keep_mask
from rl_recurrent._scan import TorchImpl, run_layer
from rl_recurrent._triton import check_triton_available, make_triton_impl

__all__ = ["check_backend_available", "resolve_backend", "run_recurrent"]


def resolve_backend(backend: str, x: Tensor) -> str:
    """Turn ``"auto"`` into a concrete backend for input ``x``.

    ``"auto"`` is ``"scan"`` under ``torch.compile`` and on the CPU (where the packed
    ``nn.LSTM`` backward is the slow native loop), and ``"pad"`` on the GPU in eager
    (cuDNN). ``"triton"`` is never picked automatically.
    """
    if backend != "auto":
        return backend
    if torch.compiler.is_compiling() or x.device.type != "cuda":
        return "scan"
    return "pad"


def _layer_weights(rnn: nn.RNNBase, layer: int, dtype: torch.dtype):
    w_ih = getattr(rnn, f"weight_ih_l{layer}").to(dtype)
    w_hh = getattr(rnn, f"weight_hh_l{layer}").to(dtype)
    if not rnn.bias:
        return w_ih, None, w_hh, None
    b_ih = getattr(rnn, f"bias_ih_l{layer}").to(dtype)
    b_hh = getattr(rnn, f"bias_hh_l{layer}").to(dtype)
    if isinstance(rnn, nn.LSTM):
        return w_ih, b_ih + b_hh, w_hh, None
    return w_ih, b_ih, w_hh, b_hh


def check_backend_available(backend: str) -> None:
    """Raise :class:`BackendUnavailableError` for a backend this build cannot run."""
    if backend == "triton":
        check_triton_available()


def _run_stack(rnn, x, is_init, states0, *, recompute, impl, dtype):
    """Scan/triton: layer after layer over the whole sequence, time-major inside."""
    cell = LSTMCellMath if isinstance(rnn, nn.LSTM) else GRUCellMath
    keep = keep_mask(is_init, dtype).t().unsqueeze(-1)
    inp = x.transpose(0, 1).to(dtype)
    per_layer = []
    for layer in range(rnn.num_layers):
        if layer > 0 and rnn.dropout > 0 and rnn.training:
            inp = F.dropout(inp, rnn.dropout, training=True)
        s0 = tuple(s[layer].to(dtype) for s in states0)
        outs = run_layer(
            cell, inp, _layer_weights(rnn, layer, dtype), keep, s0, recompute=recompute, impl=impl
        )
        per_layer.append(outs)
        inp = outs[0]
    y = inp.transpose(0, 1)
    seg_end = torch.cat([is_init[:, 1:], torch.ones_like(is_init[:, :1])], 1)
    mask = seg_end[:, :, None, None]
    nxt = tuple(
        torch.where(mask, torch.stack([o[j] for o in per_layer], 2).transpose(0, 1), 0)
        for j in range(cell.n_states)
    )
    return y, nxt


def run_recurrent(
    rnn: nn.LSTM | nn.GRU,
    x: Tensor,
    is_init: Tensor,
    states0: tuple[Tensor, ...],
    *,
    backend: str,
    recompute: bool,
    compute_dtype: torch.dtype | None,
    precision: str,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Run ``rnn`` over ``x`` ``[N, T, I]`` with resets where ``is_init`` ``[N, T]``.

    ``states0`` are ``[num_layers, N, H]`` each, zeroed where ``is_init[:, 0]``. Returns
    ``y`` ``[N, T, H]`` and the next states ``[N, T, num_layers, H]``, exact at the last
    step of every segment (before a reset, and at ``T - 1``) and zero elsewhere; all in
    ``x.dtype``. ``precision`` is the Triton matmul precision (unused by the torch
    backends).
    """
    backend = resolve_backend(backend, x)
    out_dtype = x.dtype
    dtype = compute_dtype or out_dtype
    if backend == "pad":
        y, nxt = _run_pad_cast(rnn, x, is_init, states0, dtype)
    else:
        impl = TorchImpl if backend == "scan" else make_triton_impl(x, dtype, precision)
        y, nxt = _run_stack(rnn, x, is_init, states0, recompute=recompute, impl=impl, dtype=dtype)
    return y.to(out_dtype), tuple(s.to(out_dtype) for s in nxt)


def _run_pad_cast(rnn, x, is_init, states0, dtype):
    if dtype == x.dtype and all(p.dtype == dtype for p in rnn.parameters()):
        return run_pad(rnn, x, is_init, states0)
    params = {name: p.to(dtype) for name, p in rnn.named_parameters()}
    states0 = tuple(s.to(dtype) for s in states0)
    return run_pad(rnn, x.to(dtype), is_init, states0, params=params)
