"""The ``"triton"`` backend: fused per-chunk LSTM/GRU time loops as Triton kernels.

It plugs into the ``"scan"`` machinery (:mod:`rl_recurrent._scan`) as another ``impl``
with the same per-chunk contract as ``TorchImpl``:

- forward: the input projection of each chunk stays one torch matmul; one kernel launch
  runs the chunk's whole time recurrence, ``gates = xp_t + (h_{t-1} * keep_t) W_hh^T``
  with the reset ``keep_t = 1 - is_init_t`` applied in the kernel, and writes ``h_t``
  (and ``c_t``) and, unless recomputing, the activations the backward needs;
- backward: one kernel launch walks the chunk in reverse, writes the pre-activation
  gradients ``d_pre`` and carries ``dh`` (and ``dc``) across steps and resets; the weight
  and input gradients are then one torch matmul per chunk (``_scan._Grads``);
- ``recompute="full"``: the forward kernel replays each chunk before its backward.

The kernels live in :mod:`rl_recurrent._triton_kernels`. Triton is an optional extra,
imported only inside functions here; ``TRITON_INTERPRET=1`` runs the kernels on the CPU
with Triton's interpreter (tests), otherwise the data must be on a CUDA device.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch
from torch import Tensor

from rl_recurrent._cells import LSTMCellMath
from rl_recurrent._triton_kernels import kernels
from rl_recurrent.exceptions import BackendUnavailableError

__all__ = ["TritonImpl", "check_triton_available", "make_triton_impl"]

BLOCK_B = 16
"""Batch rows per program (``tl.dot`` needs every block dim >= 16)."""
BLOCK_H = 32
"""Hidden units per gate block."""
BLOCK_K = 32
"""Reduction block over the previous hidden state."""

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
"""Compute dtypes of the kernels (arithmetic is float32 inside)."""


def _interpreting() -> bool:
    import triton

    return bool(triton.knobs.runtime.interpret)


def check_triton_available(device: torch.device | None = None) -> None:
    """Raise :class:`BackendUnavailableError` if the kernels cannot run (on ``device``).

    Args:
        device: where the data lives; ``None`` checks that some CUDA device exists.

    Raises:
        BackendUnavailableError: triton is missing, or there is no CUDA device (or the
            data is not on one) and ``TRITON_INTERPRET=1`` is not set.
    """
    if importlib.util.find_spec("triton") is None:
        raise BackendUnavailableError(
            "recurrent_backend='triton' needs the triton package: pip install "
            "'rl-recurrent[triton]' (or use recurrent_backend='scan' / 'pad')"
        )
    on_cuda = torch.cuda.is_available() if device is None else device.type == "cuda"
    if not on_cuda and not _interpreting():
        where = "no CUDA device is available" if device is None else f"got {device} data"
        raise BackendUnavailableError(
            f"recurrent_backend='triton' needs CUDA tensors ({where}); set the environment "
            "variable TRITON_INTERPRET=1 to run the kernels on the CPU with Triton's (slow) "
            "interpreter, or use recurrent_backend='scan' on the CPU"
        )


def make_triton_impl(x: Tensor, dtype: torch.dtype, precision: str) -> TritonImpl:
    """The ``impl`` for :func:`rl_recurrent._scan.run_layer`, after checking ``x``.

    Raises:
        BackendUnavailableError: see :func:`check_triton_available`.
        ValueError: for a compute dtype the kernels do not support.
    """
    check_triton_available(x.device)
    if dtype not in SUPPORTED_DTYPES:
        raise ValueError(
            f"recurrent_backend='triton' computes in one of {SUPPORTED_DTYPES} (float32 "
            f"arithmetic inside), got compute dtype {dtype}; use recurrent_compute_dtype="
            "torch.float32 or recurrent_backend='scan'"
        )
    return TritonImpl(precision)


class TritonImpl:
    """Per-chunk forward and backward loops as Triton kernels (``_scan.TorchImpl``'s contract)."""

    def __init__(self, precision: str) -> None:
        self.precision = precision

    def forward(self, cell, xp, w_hh, b_hh, keep, states, outs, saved):
        k_len, batch, _ = xp.shape
        hidden = w_hh.shape[1]
        states = [s.contiguous() for s in states]
        save = saved is not None
        kern = kernels(_interpreting())
        grid = (_cdiv(batch, BLOCK_B),)
        common = dict(SAVE=save, **self._options())
        xp, w_hh, keep = xp.contiguous(), w_hh.contiguous(), keep.contiguous()
        dummy = outs[0]
        if cell is LSTMCellMath:
            kern.lstm_fwd[grid](
                xp, w_hh, keep, states[0], states[1], outs[0], outs[1],
                saved if save else dummy, k_len, batch, hidden, **common,
            )  # fmt: skip
        else:
            has_b = b_hh is not None
            kern.gru_fwd[grid](
                xp, w_hh, b_hh if has_b else dummy, keep, states[0], outs[0],
                saved if save else dummy, k_len, batch, hidden, HAS_BHH=has_b, **common,
            )  # fmt: skip
        return tuple(o[-1] for o in outs)

    def _options(self) -> dict[str, Any]:
        """Block sizes, matmul precision and the compiler flag set explicitly."""
        return dict(
            PRECISION=self.precision, BLOCK_B=BLOCK_B, BLOCK_H=BLOCK_H, BLOCK_K=BLOCK_K,
            enable_fp_fusion=True,
        )  # fmt: skip

    def recompute(self, cell, xp, w_hh, b_hh, keep, entering, outs, saved, t0, t1):
        scratch = [torch.empty_like(o[t0:t1]) for o in outs]
        self.forward(cell, xp, w_hh, b_hh, keep, entering, scratch, saved)

    def backward(self, cell, saved, prev, outs, d_outs, carry, w_hh, keep, d_pre):
        k_len, batch, _ = saved.shape
        hidden = w_hh.shape[1]
        carry = [c.clone(memory_format=torch.contiguous_format) for c in carry]
        grid = (_cdiv(batch, BLOCK_B),)
        kern = kernels(_interpreting())
        args = [saved.contiguous()]
        if cell is LSTMCellMath:
            args += [prev[1].contiguous(), outs[1].contiguous(), *_contig(d_outs)]
            launch = kern.lstm_bwd
        else:
            args += [prev[0].contiguous(), d_outs[0].contiguous()]
            launch = kern.gru_bwd
        launch[grid](
            *args, keep.contiguous(), w_hh.contiguous(), *carry, d_pre, k_len, batch, hidden,
            **self._options(),
        )  # fmt: skip
        return tuple(carry)


def _contig(tensors):
    return [t.contiguous() for t in tensors]


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)
