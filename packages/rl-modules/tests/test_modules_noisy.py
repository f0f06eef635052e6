"""NoisyLinear: factorised noise, resampled only by reset_noise; mu alone in eval mode."""

from __future__ import annotations

import math

import pytest
import torch
from rl_modules import MLP, NoisyLinear, reset_noise


def test_noise_changes_only_on_reset_noise():
    torch.manual_seed(0)
    layer = NoisyLinear(4, 3, std_init=0.5)
    x = torch.randn(8, 4)
    first = layer(x)
    for _ in range(3):  # forward passes, backward and an optimiser step do not redraw
        torch.testing.assert_close(layer(x), first, rtol=0, atol=0)
    eps = layer.weight_epsilon.clone()
    layer(x).sum().backward()
    assert torch.equal(layer.weight_epsilon, eps)
    layer.reset_noise()
    assert not torch.equal(layer.weight_epsilon, eps)
    assert not torch.allclose(layer(x), first)


def test_noise_is_factorised_and_eval_uses_mu():
    torch.manual_seed(1)
    layer = NoisyLinear(5, 3, std_init=0.1)
    eps_w, eps_b = layer.weight_epsilon, layer.bias_epsilon
    # W_eps = f(eps_out) f(eps_in)^T: rank one, its column factor is the bias noise
    assert torch.linalg.matrix_rank(eps_w) == 1
    f_in = eps_w[0] / eps_b[0]
    torch.testing.assert_close(eps_w, torch.outer(eps_b, f_in))
    torch.testing.assert_close(layer.weight_sigma, torch.full((3, 5), 0.1 / math.sqrt(5)))
    torch.testing.assert_close(layer.bias_sigma, torch.full((3,), 0.1 / math.sqrt(3)))
    x = torch.randn(2, 5)
    torch.testing.assert_close(layer.eval()(x), x @ layer.weight_mu.T + layer.bias_mu)
    torch.testing.assert_close(layer.train()(x), x @ (layer.weight_mu + layer.weight_sigma
                                                      * eps_w).T + layer.bias_mu
                               + layer.bias_sigma * eps_b)


def test_gradient_reaches_mu_and_sigma_and_helper_resets_all():
    net = MLP(3, 2, num_cells=4, depth=1, layer_class=NoisyLinear)
    net(torch.randn(6, 3)).sum().backward()
    layers = [m for m in net if isinstance(m, NoisyLinear)]
    assert len(layers) == 2
    assert all(p.grad is not None for p in net.parameters())
    before = [m.weight_epsilon.clone() for m in layers]
    reset_noise(net)
    assert all(not torch.equal(b, m.weight_epsilon) for b, m in zip(before, layers, strict=True))


def test_no_bias_and_bad_std():
    assert NoisyLinear(2, 2, bias=False)(torch.zeros(1, 2)).abs().sum() == 0
    with pytest.raises(ValueError, match="std_init"):
        NoisyLinear(2, 2, std_init=-1.0)
