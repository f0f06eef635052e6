"""OneDNNLinear: the same products as ``F.linear`` (to float32 rounding), forward and
backward, on oneDNN for large CPU products only; onednn_linears swaps classes in place."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from rl_modules import MLP, NoisyLinear, OneDNNLinear, onednn_linears
from rl_modules._onednn import _AVAILABLE
from torch import nn

needs_onednn = pytest.mark.skipif(not _AVAILABLE, reason="this torch build has no oneDNN "
                                  "(torch.ops.mkldnn._linear_pointwise)")


def _pair(n_in: int, n_out: int, bias: bool = True) -> tuple[nn.Linear, OneDNNLinear]:
    torch.manual_seed(0)
    ref = nn.Linear(n_in, n_out, bias=bias)
    layer = OneDNNLinear(n_in, n_out, bias=bias)
    layer.load_state_dict(ref.state_dict())
    return ref, layer


def _grads(module: nn.Module, x: torch.Tensor, g: torch.Tensor):
    x = x.detach().clone().requires_grad_()
    y = module(x)
    y.backward(g)
    return y.detach(), x.grad, [p.grad for p in module.parameters()]


@needs_onednn
@pytest.mark.parametrize("shape", [(256, 23), (256, 256), (4, 64, 256)])
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_linear_matches_f_linear_forward_and_backward(shape, bias):
    n_in, n_out = shape[-1], 256
    ref, layer = _pair(n_in, n_out, bias)
    torch.manual_seed(1)
    x, g = torch.randn(shape), torch.randn(*shape[:-1], n_out)
    assert layer._onednn(x)  # large enough: it does go to oneDNN
    y_ref, gx_ref, gp_ref = _grads(ref, x, g)
    y, gx, gp = _grads(layer, x, g)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-5, atol=1e-4)
    for got, want in zip(gp, gp_ref, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-3)
    assert type(layer(x.requires_grad_()).grad_fn).__name__ == "_OneDNNLinearFnBackward"


@needs_onednn
def test_onednn_linear_takes_strided_inputs_and_partial_gradients():
    ref, layer = _pair(256, 256)
    torch.manual_seed(2)
    x = torch.randn(256, 512)[:, ::2]  # not contiguous
    assert not x.is_contiguous()
    torch.testing.assert_close(layer(x), ref(x), rtol=1e-5, atol=1e-5)
    layer.weight.requires_grad_(False)  # a frozen weight: only the bias and input move
    xg = x.clone().requires_grad_()
    layer(xg).sum().backward()
    assert layer.weight.grad is None and layer.bias.grad is not None and xg.grad is not None
    torch.testing.assert_close(layer.bias.grad, torch.full((256,), 256.0))


def test_small_products_and_other_dtypes_stay_on_f_linear():
    ref, layer = _pair(17, 256)
    x = torch.randn(1, 17)  # a policy's one-row call: 4,352 multiply-adds
    assert not layer._onednn(x)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))  # bitwise: same call
    double = copy.deepcopy(layer).double()
    xd = torch.randn(512, 17, dtype=torch.float64)
    assert not double._onednn(xd)
    assert torch.equal(double(xd), F.linear(xd, double.weight, double.bias))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert not layer._onednn(torch.randn(512, 17))


@needs_onednn
def test_onednn_linear_is_once_differentiable():
    _, layer = _pair(256, 256)
    x = torch.randn(256, 256, requires_grad=True)
    (gx,) = torch.autograd.grad(layer(x).square().sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice .*once_differentiable"):
        gx.sum().backward()  # an error, never a silently wrong second derivative


@needs_onednn
def test_vmap_falls_back_to_f_linear():
    ref, layer = _pair(256, 256)
    x = torch.randn(3, 256, 256)
    out = torch.vmap(layer)(x)  # the Function has no vmap rule: F.linear under functorch
    torch.testing.assert_close(out, torch.vmap(ref)(x), rtol=1e-5, atol=1e-5)


def test_onednn_linears_swaps_plain_linears_in_place():
    torch.manual_seed(0)
    net = MLP(17, 6, num_cells=64, depth=2, layer_class=nn.Linear)
    net.append(NoisyLinear(6, 3))
    before = {name: p for name, p in net.named_parameters()}
    keys = list(net.state_dict())
    x = torch.randn(8, 17)
    y = net(x)
    assert onednn_linears(net) is net
    kinds = [type(m).__name__ for m in net.modules() if isinstance(m, nn.Linear)]
    assert kinds == ["OneDNNLinear"] * 3 + ["NoisyLinear"]  # a subclass is left alone
    lazy = onednn_linears(nn.LazyLinear(3))  # not materialised: a subclass, left alone
    assert type(lazy) is nn.LazyLinear
    assert {name: p for name, p in net.named_parameters()} == before  # the same objects
    assert list(net.state_dict()) == keys
    torch.testing.assert_close(net(x), y)
    clone = copy.deepcopy(net)
    assert type(clone[0]) is OneDNNLinear and clone[0].weight is not net[0].weight


def test_onednn_linears_rejects_a_non_module():
    with pytest.raises(TypeError, match=r"onednn_linears: module: expected an nn.Module, "
                                        r"got Tensor"):
        onednn_linears(torch.zeros(3))


@needs_onednn
def test_an_mlp_of_onednn_linears_trains_like_one_of_linears():
    """Twenty Adam steps on one regression: the two nets stay within float32 drift (Adam
    moves each parameter by up to 2e-2 here; a wrong gradient would move it elsewhere)."""
    def trained(layer_class: type[nn.Module]) -> torch.Tensor:
        torch.manual_seed(0)
        net = MLP(23, 1, num_cells=256, depth=2, activation_class=nn.ReLU,
                  layer_class=layer_class)
        opt = torch.optim.Adam(net.parameters(), lr=1e-3)
        x, target = torch.randn(256, 23), torch.randn(256, 1)
        for _ in range(20):
            opt.zero_grad()
            F.mse_loss(net(x), target).backward()
            opt.step()
        return torch.cat([p.detach().flatten() for p in net.parameters()])

    theirs, ours = trained(nn.Linear), trained(OneDNNLinear)
    torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-3)


@needs_onednn
def test_torch_compile_traces_f_linear():
    """Under torch.compile the layer is ``F.linear`` (Inductor picks its own kernels)."""
    ref, layer = _pair(256, 256)
    x = torch.randn(256, 256)
    compiled = torch.compile(layer, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), ref(x), rtol=1e-5, atol=1e-5)
