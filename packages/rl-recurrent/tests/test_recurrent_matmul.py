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


HAS_ONEDNN = _matmul._onednn_available()
BOTH = [False, pytest.param(True, marks=pytest.mark.skipif(
    not HAS_ONEDNN, reason="this torch build has no oneDNN linear"))]


@pytest.mark.parametrize("onednn", BOTH, ids=["mm", "onednn"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_linear_and_addlinear_equal_the_float64_product(dtype, onednn, monkeypatch):
    monkeypatch.setattr(_matmul, "ONEDNN", onednn)  # both paths, whatever this CPU picks
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


@pytest.mark.parametrize("onednn", BOTH, ids=["mm", "onednn"])
def test_transposed_operands_and_accumulation_into_the_base(onednn, monkeypatch):
    monkeypatch.setattr(_matmul, "ONEDNN", onednn)
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
    if not HAS_ONEDNN:
        pytest.skip("this torch build has no oneDNN linear")
    monkeypatch.setattr(_matmul, "ONEDNN", True)  # as on an AMD CPU
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


@pytest.mark.parametrize(("setting", "expected"), [("0", "False"), ("1", str(HAS_ONEDNN))])
def test_the_environment_variable_forces_onednn_off_or_on(setting, expected):
    code = "from rl_recurrent import _matmul; print(_matmul.ONEDNN)"
    env = {**os.environ, _matmul.ENV_VAR: setting}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == expected


def test_by_default_onednn_only_on_amd_cpus():
    # MKL runs AVX2 kernels on AMD (oneDNN twice as fast) and AVX-512 ones on Intel
    # (oneDNN 1.1-3.4x slower at the scan's products): measured, see rl_recurrent._matmul
    for setting in (None, "auto", " AUTO "):
        assert _matmul.choose_onednn(setting, "AuthenticAMD") is True
        assert _matmul.choose_onednn(setting, "GenuineIntel") is False
        assert _matmul.choose_onednn(setting, "") is False
    assert _matmul.choose_onednn(None, "AuthenticAMD", available=False) is False
    assert _matmul.choose_onednn("on", "GenuineIntel") is True
    assert _matmul.choose_onednn("off", "AuthenticAMD") is False
    expected = _matmul.choose_onednn(None, _matmul.cpu_vendor(), HAS_ONEDNN)
    if _matmul.ENV_VAR not in os.environ:
        assert _matmul.ONEDNN is expected


def test_a_bad_setting_is_named():
    with pytest.raises(ValueError, match="RL_RECURRENT_ONEDNN: expected auto, 1 or 0, got '2'"):
        _matmul.choose_onednn("2", "AuthenticAMD")


def test_cpu_vendor_reads_the_first_vendor_id(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n"
                    "processor\t: 1\nvendor_id\t: GenuineIntel\n")
    assert _matmul.cpu_vendor(str(info)) == "GenuineIntel"
    assert _matmul.cpu_vendor(str(tmp_path / "absent")) == ""
    info.write_text("processor\t: 0\n")
    assert _matmul.cpu_vendor(str(info)) == ""


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
