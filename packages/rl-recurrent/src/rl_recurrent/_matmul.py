"""The matrix products of the ``"scan"`` backend, by oneDNN where that is faster.

Every product the scan makes is ``x @ weight.T`` (a linear layer's layout): the
recurrent step ``h W_hh^T``, its backward ``d W_hh`` (``weight = W_hh^T``), the input
projection and the weight gradients. On the CPU, torch's float32 ``mm`` calls MKL, which
on AMD CPUs runs its AVX2 kernels; oneDNN, the library behind ``nn.LSTM`` on the CPU,
runs AVX-512 ones there. Measured on an AMD EPYC (CPU family 26), one thread:
``[32, 256] x [256, 1024]`` 165 us with MKL, 95 us with oneDNN; ``[1024, 1024]^T x
[1024, 256]`` 4.9 ms and 2.4 ms.

On an Intel CPU it is the other way round: MKL runs its AVX-512 kernels there, and oneDNN's
call costs more at the scan's small products. Measured on an Intel Xeon (CPU family 6,
model 207), one thread, oneDNN over MKL: ``[32, 64] x [64, 256]`` (the recurrent step of
``ppo_lstm_masked_cartpole.py``) 2.5x, ``[8, 64] x [64, 256]`` 3.4x, ``[512, 64] x
[64, 256]`` 1.15x, ``[32, 256] x [256, 1024]`` 1.1x; that example ran 1.3-1.8x faster
with ``mm``.

So by default (``RL_RECURRENT_ONEDNN`` unset or ``auto``) float32 CPU products go
through ``torch.ops.mkldnn._linear_pointwise`` (the op torch.compile's inductor emits
for linear layers on the CPU) on AMD CPUs only (``vendor_id`` ``AuthenticAMD`` in
``/proc/cpuinfo``), when this build of torch has it, outside ``torch.compile`` (a traced
graph keeps ``mm``, which inductor lowers itself) and while
``torch.backends.mkldnn.enabled`` holds (``torch.backends.mkldnn.flags(enabled=False)``
turns it off for a block); elsewhere (Intel, other or unknown vendors) they stay in
``mm``. ``RL_RECURRENT_ONEDNN=1`` uses oneDNN whatever the CPU, ``=0`` never; the
variable is read at import. The results differ from ``mm``'s in the last bits (another
summation order), as two BLAS libraries' do.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

__all__ = ["ENV_VAR", "ONEDNN", "addlinear", "choose_onednn", "cpu_vendor", "linear"]

ENV_VAR = "RL_RECURRENT_ONEDNN"


def cpu_vendor(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's ``vendor_id`` (``"GenuineIntel"``, ``"AuthenticAMD"``), ``""`` if unknown.

    Args:
        cpuinfo: the file to read (Linux's ``/proc/cpuinfo``; absent elsewhere).

    Returns:
        The first ``vendor_id`` field's value, or ``""`` when the file or field is absent.
    """
    try:
        with open(cpuinfo, encoding="ascii", errors="replace") as lines:
            for line in lines:
                if line.startswith("vendor_id"):
                    return line.partition(":")[2].strip()
    except OSError:
        pass
    return ""


def choose_onednn(setting: str | None, vendor: str, available: bool = True) -> bool:
    """Whether the scan's float32 CPU products use oneDNN (see the module docstring).

    Args:
        setting: ``RL_RECURRENT_ONEDNN``'s value: ``None`` / ``"auto"`` (oneDNN on AMD
            CPUs only), ``"1"`` / ``"true"`` / ``"yes"`` / ``"on"`` (always),
            ``"0"`` / ``"false"`` / ``"no"`` / ``"off"`` (never).
        vendor: the CPU's vendor id (:func:`cpu_vendor`).
        available: whether this torch build has oneDNN's linear op.

    Returns:
        ``True`` to use oneDNN.

    Raises:
        ValueError: ``setting`` is none of those values.

    Examples:
        >>> choose_onednn(None, "AuthenticAMD"), choose_onednn(None, "GenuineIntel")
        (True, False)
        >>> choose_onednn("1", "GenuineIntel"), choose_onednn("1", "AuthenticAMD", False)
        (True, False)
    """
    value = "auto" if setting is None else setting.strip().lower()
    if value in ("0", "false", "no", "off"):
        return False
    if value in ("1", "true", "yes", "on"):
        return available
    if value != "auto":
        raise ValueError(f"{ENV_VAR}: expected auto, 1 or 0, got {setting!r}")
    return available and vendor == "AuthenticAMD"


def _onednn_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


ONEDNN: bool = choose_onednn(os.environ.get(ENV_VAR), cpu_vendor(), _onednn_available())
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
