"""BatchRenorm1d against a numpy transcription of Ioffe (2017), Alg. 1, train and eval."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rl_modules import BatchRenorm1d


class NumpyBatchRenorm:
    """The paper's algorithm in float64 numpy (biased batch variance, as the layer)."""

    def __init__(self, c, momentum, eps, max_r, max_d, warmup):
        self.mean, self.var = np.zeros(c), np.ones(c)
        self.momentum, self.eps, self.max_r, self.max_d = momentum, eps, max_r, max_d
        self.warmup, self.steps = warmup, 0
        self.weight, self.bias = np.ones(c), np.zeros(c)

    def train(self, x):
        mu, var = x.mean(0), x.var(0)
        sigma = np.sqrt(var + self.eps)
        running_sigma = np.sqrt(self.var + self.eps)
        r = np.clip(sigma / running_sigma, 1 / self.max_r, self.max_r)
        d = np.clip((mu - self.mean) / running_sigma, -self.max_d, self.max_d)
        if self.steps < self.warmup:
            r, d = np.ones_like(r), np.zeros_like(d)
        y = (x - mu) / sigma * r + d
        self.mean += self.momentum * (mu - self.mean)
        self.var += self.momentum * (var - self.var)
        self.steps += 1
        return self.weight * y + self.bias

    def eval(self, x):
        return self.weight * (x - self.mean) / np.sqrt(self.var + self.eps) + self.bias


def test_matches_numpy_in_train_and_eval_across_the_warmup():
    rng = np.random.default_rng(0)
    layer = BatchRenorm1d(3, momentum=0.3, max_r=1.5, max_d=0.5, warmup_steps=2).double()
    ref = NumpyBatchRenorm(3, 0.3, 1e-5, 1.5, 0.5, 2)
    for step in range(6):
        # batches far from the running statistics, so r and d are clipped after warm-up
        x = rng.normal(loc=3.0 * step, scale=1 + step, size=(32, 3))
        out = layer.train()(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(out, ref.train(x), rtol=1e-10, atol=1e-10)
        x_eval = rng.normal(size=(5, 3))
        out_eval = layer.eval()(torch.from_numpy(x_eval)).detach().numpy()
        np.testing.assert_allclose(out_eval, ref.eval(x_eval), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(layer.running_mean.numpy(), ref.mean, rtol=1e-12)
    np.testing.assert_allclose(layer.running_var.numpy(), ref.var, rtol=1e-12)
    assert int(layer.num_batches_tracked) == 6


def test_warmup_is_batch_norm_and_eval_ignores_the_batch():
    torch.manual_seed(0)
    layer = BatchRenorm1d(4, warmup_steps=10)
    x = torch.randn(64, 4) * 5 + 2
    expected = torch.nn.functional.batch_norm(x, None, None, training=True, eps=1e-5)
    torch.testing.assert_close(layer(x), expected)
    layer.eval()
    one = layer(x[:1])
    torch.testing.assert_close(one, layer(x)[:1])  # a row's output does not depend on others


def test_leading_dims_and_vmap():
    layer = BatchRenorm1d(2, warmup_steps=0)
    x = torch.randn(3, 5, 2)
    assert layer(x).shape == (3, 5, 2)
    params = torch.func.stack_module_state([BatchRenorm1d(2), BatchRenorm1d(2)])
    params = {**params[0], **params[1]}

    def call(p, inp):
        return torch.func.functional_call(layer, p, (inp,))

    assert torch.vmap(call, (0, None))(params, x).shape == (2, 3, 5, 2)


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="momentum"):
        BatchRenorm1d(3, momentum=0.0)
    with pytest.raises(ValueError, match="num_features"):
        BatchRenorm1d(0)
    with pytest.raises(ValueError, match="last dim of size 3"):
        BatchRenorm1d(3)(torch.zeros(4, 2))
