"""The scan backend's products (oneDNN on the CPU in float32) and its CPU tanh."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from rl_recurrent import _matmul
from rl_recurrent._cells import tanh
from rl_recurrent._matmul import addlinear, linear


def _reference(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return (x.double() @ weight.double().t()).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_and_addlinear_equal_the_float64_product(dtype):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(96, 64, generator=gen, dtype=dtype)
    weight = torch.randn(128, 64, generator=gen, dtype=dtype)
    bias = torch.randn(128, generator=gen, dtype=dtype)
    base = torch.randn(96, 128, generator=gen, dtype=dtype)
    tol = {"rtol": 1e-5, "atol": 1e-4} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    torch.testing.assert_close(linear(x, weight), _reference(x, weight), **tol)
    torch.testing.assert_close(linear(x, weight, bias), _reference(x, weight) + bias, **tol)
    out = torch.empty_like(base)
    result = addlinear(base, x, weight, out=out)
    assert result.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out, base + _reference(x, weight), **tol)


def test_transposed_operands_and_accumulation_into_the_base():
    # the weight gradient: acc += d^T x, both operands transposed views, out aliasing base
    gen = torch.Generator().manual_seed(1)
    d, x = torch.randn(256, 32, generator=gen), torch.randn(256, 16, generator=gen)
    acc = torch.randn(32, 16, generator=gen)
    expected = acc.double() + d.double().t() @ x.double()
    addlinear(acc, d.t(), x.t(), out=acc)
    torch.testing.assert_close(acc.double(), expected, rtol=1e-5, atol=1e-4)


# torch.backends.mkldnn.flags() warns about TF32 on Intel GPUs whatever it is given
@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN:UserWarning")
def test_onednn_is_used_for_cpu_float32_only_when_mkldnn_is_enabled(monkeypatch):
    if not _matmul.ONEDNN:
        pytest.skip("this torch build has no oneDNN linear")
    calls = []
    real = torch.ops.mkldnn._linear_pointwise

    class Spy:
        def __call__(self, *args):
            calls.append(args[0].dtype)
            return real(*args)

    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", Spy())
    linear(torch.randn(4, 8), torch.randn(3, 8))
    linear(torch.randn(4, 8, dtype=torch.float64), torch.randn(3, 8, dtype=torch.float64))
    with torch.backends.mkldnn.flags(enabled=False):
        linear(torch.randn(4, 8), torch.randn(3, 8))
    assert calls == [torch.float32]


def test_the_environment_variable_turns_onednn_off():
    code = "from rl_recurrent import _matmul; print(_matmul.ONEDNN)"
    env = {**os.environ, _matmul.ENV_VAR: "0"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("inplace", [False, True])
def test_cpu_tanh_is_within_2e_7_of_torch_tanh(inplace):
    x = torch.linspace(-20, 20, 40001)
    expected = torch.tanh(x)
    given = x.clone()
    result = tanh(given, inplace=inplace)
    assert (result.data_ptr() == given.data_ptr()) == inplace
    assert (result - expected).abs().max().item() <= 2e-7
    assert torch.equal(result.clamp(-1, 1), result)  # never outside [-1, 1]
    assert tanh(torch.tensor([float("inf"), -float("inf")])).tolist() == [1.0, -1.0]
