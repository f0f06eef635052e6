"""The matrix products of the ``"scan"`` backend, by oneDNN where that is faster.

Every product the scan makes is ``x @ weight.T`` (a linear layer's layout): the
recurrent step ``h W_hh^T``, its backward ``d W_hh`` (``weight = W_hh^T``), the input
projection and the weight gradients. On the CPU, torch's float32 ``mm`` calls MKL, which
on AMD CPUs runs its AVX2 kernels; oneDNN, the library behind ``nn.LSTM`` on the CPU,
runs AVX-512 ones there. Measured on an AMD EPYC (CPU family 26), one thread:
``[32, 256] x [256, 1024]`` 165 us with MKL, 95 us with oneDNN; ``[1024, 1024]^T x
[1024, 256]`` 4.9 ms and 2.4 ms.

So float32 CPU products go through ``torch.ops.mkldnn._linear_pointwise`` (the op
torch.compile's inductor emits for linear layers on the CPU) when this build of torch has
it, outside ``torch.compile`` (a traced graph keeps ``mm``, which inductor lowers
itself) and while ``torch.backends.mkldnn.enabled`` holds (``torch.backends.mkldnn.flags
(enabled=False)`` turns it off for a block). ``RL_RECURRENT_ONEDNN=0``, read at import,
keeps ``mm`` everywhere. The results differ from ``mm``'s in the last bits (another
summation order), as two BLAS libraries' do.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

__all__ = ["ENV_VAR", "ONEDNN", "addlinear", "linear"]

ENV_VAR = "RL_RECURRENT_ONEDNN"


def _onednn_available() -> bool:
    if os.environ.get(ENV_VAR, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


ONEDNN: bool = _onednn_available()
"""Whether float32 CPU products use oneDNN in this process (see the module docstring)."""


def _use_onednn(x: Tensor) -> bool:
    return (
        ONEDNN
        and x.dtype == torch.float32
        and x.is_cpu
        and torch.backends.mkldnn.enabled
        and not torch.compiler.is_compiling()
    )


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T (+ bias)`` for ``x`` ``[N, K]``, ``weight`` ``[M, K]``, ``bias`` ``[M]``."""
    if _use_onednn(x):
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
    if bias is None:
        return torch.mm(x, weight.t())
    return torch.addmm(bias, x, weight.t())


def addlinear(base: Tensor, x: Tensor, weight: Tensor, out: Tensor | None = None) -> Tensor:
    """``base + x @ weight.T`` (``base`` ``[N, M]``), written to ``out`` when given."""
    if _use_onednn(x):
        product = torch.ops.mkldnn._linear_pointwise(x, weight, None, "none", [], "")
        return torch.add(base, product, out=out)
    return torch.addmm(base, x, weight.t(), out=out)
