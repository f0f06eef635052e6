"""``OneDNNLinear``: ``nn.Linear`` whose large float32 CPU products run on oneDNN.

``F.linear`` on the CPU calls MKL's ``sgemm``, which picks its code path by CPU vendor: on
AMD CPUs with AVX-512 (Zen 4, Zen 5) it runs the AVX2 kernels, about half the machine's
float32 rate. torch ships oneDNN too (``torch.ops.mkldnn._linear_pointwise``, the kernel
Inductor uses for frozen CPU linears), which picks by instruction set. On the 2-CPU AMD
EPYC (Zen 5) these docs were measured on, one 256x256x256 product costs 306 us through MKL
and 145 us through oneDNN. oneDNN's call costs ~10 us more than MKL's for any size, so
only products of at least ``OneDNNLinear.min_macs`` multiply-adds go to it (the whole
layer on a training batch of 256 rows; a policy's one-row call stays on ``F.linear``).

The three products of a layer (forward ``x W^T``, backward ``g W`` and ``g^T x``) all go
to oneDNN, in one ``torch.autograd.Function``; the bias gradient is ``g``'s column sum, as
in torch's own backward. The results are not bitwise those of ``F.linear`` (another
kernel, another summation order: ~1e-6 relative apart in float32).

What stays on ``F.linear``: other devices and dtypes, smaller products, autocast, a call
that torch.compile traces (Inductor picks its own kernels), functorch transforms (vmap,
grad) and double backward (the Function is once differentiable).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd.function import once_differentiable

__all__ = ["OneDNNLinear", "onednn_linears"]

_AVAILABLE = torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                               "_linear_pointwise")


def _product(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """``x @ w^T + b`` on oneDNN, for 2-D ``x`` ``[m, k]`` and ``w`` ``[n, k]`` (strided
    views taken as they are: a transposed operand costs no copy)."""
    return torch.ops.mkldnn._linear_pointwise(x, w, b, "none", [], "")


class _OneDNNLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None):
        rows = x.reshape(-1, x.shape[-1])
        ctx.save_for_backward(rows, weight)
        ctx.in_shape, ctx.has_bias = x.shape, bias is not None
        return _product(rows, weight, bias).reshape(*x.shape[:-1], weight.shape[0])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor):
        rows, weight = ctx.saved_tensors
        g = grad.reshape(-1, weight.shape[0])
        need_x, need_w, need_b = ctx.needs_input_grad
        grad_x = _product(g, weight.t(), None).reshape(ctx.in_shape) if need_x else None
        grad_w = _product(g.t(), rows.t(), None) if need_w else None
        grad_b = g.sum(0) if ctx.has_bias and need_b else None
        return grad_x, grad_w, grad_b


class OneDNNLinear(nn.Linear):
    """``nn.Linear`` (same arguments, parameters and state dict) whose products of at least
    :attr:`min_macs` multiply-adds, in float32 on the CPU, run on oneDNN (module docstring).

    Use it as an ``MLP``'s ``layer_class``, or turn a built module's linears into it with
    :func:`onednn_linears`.

    Examples:
        >>> import torch
        >>> from rl_modules import MLP, OneDNNLinear
        >>> net = MLP(23, 1, num_cells=256, depth=2, layer_class=OneDNNLinear)
        >>> net(torch.randn(256, 23)).shape
        torch.Size([256, 1])
    """

    min_macs: int = 1 << 20
    """The smallest product (rows x in x out multiply-adds) sent to oneDNN: below it MKL's
    lower call cost wins (measured from 1 to 256 rows of 17-, 23- and 256-wide layers)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if self._onednn(input):
            return _OneDNNLinearFn.apply(input, self.weight, self.bias)
        return F.linear(input, self.weight, self.bias)

    def _onednn(self, x: torch.Tensor) -> bool:
        w = self.weight
        if not _AVAILABLE or x.numel() * w.shape[0] < self.min_macs:
            return False  # first: a policy's small call returns before the slower checks
        return (x.device.type == "cpu" and x.dtype == torch.float32
                and w.dtype == torch.float32 and x.dim() >= 1 and x.shape[-1] == w.shape[1]
                and not torch.is_autocast_enabled("cpu")
                and not torch.compiler.is_compiling()
                and not torch._C._are_functorch_transforms_active())


def onednn_linears(module: nn.Module) -> nn.Module:
    """Turn every plain ``nn.Linear`` in ``module`` (itself included) into a
    :class:`OneDNNLinear`, in place, and return ``module``.

    The layers keep their parameter objects, hooks and state-dict keys (only the class
    changes, which adds no state), so an optimiser, a loss's parameter copies or a
    checkpoint made before or after the call stay valid. Subclasses of ``nn.Linear``
    (``NoisyLinear``, ``LazyLinear`` before its first call) are left alone.

    Examples:
        >>> from torch import nn
        >>> from rl_modules import OneDNNLinear, onednn_linears
        >>> net = onednn_linears(nn.Sequential(nn.Linear(17, 256), nn.ReLU()))
        >>> type(net[0]) is OneDNNLinear
        True
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"onednn_linears: module: expected an nn.Module, got "
                        f"{type(module).__name__}")
    for layer in module.modules():
        if type(layer) is nn.Linear:
            layer.__class__ = OneDNNLinear
    return module
