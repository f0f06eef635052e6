"""The "triton" backend equals the float64 cell loop, run with Triton's CPU interpreter.

``TRITON_INTERPRET=1`` is read when the kernels are wrapped with ``triton.jit``, which
rl_recurrent does lazily and per interpreter setting, so setting the variable with
``monkeypatch`` before the first call is enough. Sizes are tiny: the interpreter runs
every block operation in numpy.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from rl_recurrent import (
    BackendUnavailableError,
    GRUModule,
    LSTMModule,
    _scan,
    _triton_kernels,
    set_recurrent_mode,
)
from rl_recurrent._triton import BLOCK_B, BLOCK_H, BLOCK_K

from ._batches import random_batch

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("triton") is None, reason="needs the [triton] extra"
)


@pytest.fixture
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _module(kind, num_layers=1, recompute="none", bias=True, hidden=5, **kwargs):
    cls = LSTMModule if kind == "lstm" else GRUModule
    torch.manual_seed(0)
    return cls(
        3, hidden, num_layers, bias=bias, in_key="x", out_key="y", recurrent_backend="triton",
        recurrent_recompute=recompute, **kwargs,
    )  # fmt: skip


def _check(module, reference, is_init, seed=1):
    """Outputs, segment-final states and every gradient vs the float64 reference."""
    td, x, states0 = random_batch(module, is_init, seed)
    with set_recurrent_mode(True):
        out = module(td)
    cells, y_ref, nxt_ref = reference(module.rnn, x, is_init, states0)
    outs = [out["y"], *(out[k] for k in module.out_keys[1:])]
    refs = [y_ref, *nxt_ref]
    for o, r in zip(outs, refs, strict=True):
        torch.testing.assert_close(o.double(), r, atol=2e-5, rtol=1e-4)
    gen = torch.Generator().manual_seed(seed + 100)
    weights = [torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in refs]
    loss = sum((o.double() * w).sum() for o, w in zip(outs, weights, strict=True))
    loss_ref = sum((r * w).sum() for r, w in zip(refs, weights, strict=True))
    names = [name for name, _ in module.rnn.named_parameters()]
    ref_params = [getattr(cells[int(n.rsplit("_l", 1)[1])], n.rsplit("_l", 1)[0]) for n in names]
    grads = torch.autograd.grad(loss, [x, *states0, *module.rnn.parameters()])
    grads_ref = torch.autograd.grad(loss_ref, [x, *states0, *ref_params])
    labels = ["x", *(f"state{i}" for i in range(len(states0))), *names]
    for label, g, g_ref in zip(labels, grads, grads_ref, strict=True):
        torch.testing.assert_close(
            g.double(), g_ref.double(), atol=1e-4, rtol=1e-3, msg=lambda m, lb=label: f"{lb}: {m}"
        )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_triton_matches_reference_two_layers(kind, interpret, recurrent_reference, make_is_init):
    """Random resets, including at t=0 and at the last step, through two layers."""
    is_init = make_is_init(4, 9, 0.25, seed=0)
    _check(_module(kind, num_layers=2), recurrent_reference, is_init)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_triton_several_blocks(kind, interpret, recurrent_reference, make_is_init):
    """Batch and hidden sizes over one block: several programs, masked tails, GRU no bias."""
    n, hidden = BLOCK_B + 1, BLOCK_H + 1
    is_init = make_is_init(n, 4, 0.3, seed=1)
    module = _module(kind, hidden=hidden, bias=kind == "lstm")
    _check(module, recurrent_reference, is_init)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_triton_across_chunks(
    kind, recompute, interpret, monkeypatch, recurrent_reference, make_is_init
):
    """States and gradients carried across chunks (shortened to 4 steps to keep the
    interpreter fast); ``recompute="full"`` replays each chunk with the forward kernel."""
    monkeypatch.setattr(_scan, "CHUNK", 4)
    is_init = make_is_init(2, 10, 0.1, seed=7)
    is_init[1, 4] = True
    _check(_module(kind, recompute=recompute), recurrent_reference, is_init)


@pytest.mark.timeout(120)
def test_triton_kernels_compile_for_a_gpu(tmp_path, monkeypatch):
    """The interpreter does not check GPU lowering: compile every kernel for sm_90 here."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    values = {"SAVE": True, "HAS_BHH": True, "PRECISION": "ieee"}
    values.update(BLOCK_B=BLOCK_B, BLOCK_H=BLOCK_H, BLOCK_K=BLOCK_K)
    kernels = _triton_kernels.kernels(False)
    for name in ("lstm_fwd", "gru_fwd", "lstm_bwd", "gru_bwd"):
        fn = getattr(kernels, name)
        sig = {p.name: "*fp32" for p in fn.params}
        sig.update(n_steps="i32", batch="i32", hidden="i32")
        consts = {}
        for i, p in enumerate(fn.params):
            if p.is_constexpr:
                sig[p.name] = "constexpr"
                consts[(i,)] = values[p.name]
        src = ASTSource(fn=fn, signature=sig, constexprs=consts)
        compiled = triton.compile(
            src, target=GPUTarget("cuda", 90, 32), options={"enable_fp_fusion": True}
        )
        assert "ptx" in compiled.asm, name


def test_triton_matmul_precision_is_passed(interpret, make_is_init):
    """Every precision runs (the interpreter computes all three in float32)."""
    is_init = make_is_init(2, 3, 0.3, seed=2)
    ys = []
    for precision in ("ieee", "tf32", "tf32x3"):
        module = _module("lstm", recurrent_matmul_precision=precision)
        td, _, _ = random_batch(module, is_init)
        with set_recurrent_mode(True), torch.no_grad():
            ys.append(module(td)["y"])
    torch.testing.assert_close(ys[0], ys[2], atol=1e-5, rtol=1e-5)


def test_triton_rejects_float64_compute(interpret, make_is_init):
    module = _module("gru", recurrent_compute_dtype=torch.float64)
    td, _, _ = random_batch(module, make_is_init(2, 3, 0.3, seed=3))
    with set_recurrent_mode(True), pytest.raises(ValueError, match="compute dtype"):
        module(td)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only error")
def test_triton_without_cuda_or_interpreter_says_what_to_do(monkeypatch, make_is_init):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(BackendUnavailableError, match="TRITON_INTERPRET=1"):
        _module("lstm")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    module = _module("lstm")
    td, _, _ = random_batch(module, make_is_init(2, 3, 0.3, seed=4))
    monkeypatch.delenv("TRITON_INTERPRET")
    with set_recurrent_mode(True), pytest.raises(BackendUnavailableError, match="cpu data"):
        module(td)
