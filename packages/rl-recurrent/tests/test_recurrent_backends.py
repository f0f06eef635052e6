"""Every backend equals the float64 cell loop: outputs, segment-final states, gradients."""

from __future__ import annotations

import pytest
import torch
from rl_recurrent import GRUModule, LSTMModule, set_recurrent_mode
from rl_recurrent._scan import CHUNK

from ._batches import random_batch

BACKENDS = ["pad", "scan"]


def _module(kind, backend, num_layers=2, recompute="none", bias=True, in_size=3, hidden=5):
    cls = LSTMModule if kind == "lstm" else GRUModule
    torch.manual_seed(0)
    return cls(
        in_size, hidden, num_layers, bias=bias, in_key="x", out_key="y",
        recurrent_backend=backend, recurrent_recompute=recompute,
    )  # fmt: skip


def check_against_reference(module, reference, is_init, seed=1, atol=2e-5):
    td, x, states0 = random_batch(module, is_init, seed)
    with set_recurrent_mode(True):
        out = module(td)
    next_keys = module.out_keys[1:]
    cells, y_ref, nxt_ref = reference(module.rnn, x, is_init, states0)
    torch.testing.assert_close(out["y"].double(), y_ref, atol=atol, rtol=1e-4)
    for key, ref in zip(next_keys, nxt_ref, strict=True):
        torch.testing.assert_close(out[key].double(), ref, atol=atol, rtol=1e-4)
    gen = torch.Generator().manual_seed(seed + 100)
    ws = [torch.randn(r.shape, generator=gen, dtype=torch.float64) for r in (y_ref, *nxt_ref)]
    loss = sum(
        (o.double() * w).sum()
        for o, w in zip([out["y"], *(out[k] for k in next_keys)], ws, strict=True)
    )
    loss_ref = sum((r * w).sum() for r, w in zip([y_ref, *nxt_ref], ws, strict=True))
    params = list(module.rnn.parameters())
    names = [name for name, _ in module.rnn.named_parameters()]
    ref_params = [getattr(cells[int(nm.rsplit("_l", 1)[1])], nm.rsplit("_l", 1)[0]) for nm in names]
    grads = torch.autograd.grad(loss, [x, *states0, *params])
    grads_ref = torch.autograd.grad(loss_ref, [x, *states0, *ref_params])
    for name, g, g_ref in zip(
        ["x", *(f"state{i}" for i in range(len(states0))), *names], grads, grads_ref, strict=True
    ):
        torch.testing.assert_close(
            g.double(),
            g_ref.double(),
            atol=1e-4,
            rtol=1e-3,
            msg=lambda m, name=name: f"{name}: {m}",
        )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("seed", range(3))
def test_backend_matches_reference(backend, kind, seed, recurrent_reference, make_is_init):
    module = _module(kind, backend)
    is_init = make_is_init(4, 9, 0.25, seed)
    check_against_reference(module, recurrent_reference, is_init, seed)


@pytest.mark.parametrize("kind", ["lstm", "gru"])
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_scan_across_chunks(kind, recompute, recurrent_reference, make_is_init):
    """Sequences longer than a chunk, with and without recompute, one layer, no bias."""
    module = _module(kind, "scan", num_layers=1, recompute=recompute, bias=False)
    is_init = make_is_init(3, CHUNK + 6, 0.05, seed=7)
    is_init[1, CHUNK] = True
    check_against_reference(module, recurrent_reference, is_init)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_resets_and_all_resets(backend, recurrent_reference):
    module = _module("lstm", backend)
    check_against_reference(module, recurrent_reference, torch.zeros(2, 6, dtype=torch.bool))
    check_against_reference(module, recurrent_reference, torch.ones(2, 6, dtype=torch.bool))


def test_auto_is_scan_on_cpu_and_equals_pad(make_is_init):
    is_init = make_is_init(3, 12, 0.2, 3)
    outs = []
    for backend in ("auto", "pad"):
        module = _module("lstm", backend)
        td, _, _ = random_batch(module, is_init, grad=False)
        with set_recurrent_mode(True):
            outs.append(module(td))
    torch.testing.assert_close(outs[0]["y"], outs[1]["y"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_compute_dtype_float64(backend, make_is_init):
    """A compute dtype changes the precision, not the result, and keeps the output dtype."""
    is_init = make_is_init(2, 7, 0.3, 5)
    ref = _module("gru", backend)
    low = _module("gru", backend)
    low.recurrent_compute_dtype = torch.float64
    td, _, _ = random_batch(ref, is_init, grad=False)
    with set_recurrent_mode(True):
        a, b = ref(td.clone())["y"], low(td.clone())["y"]
    assert b.dtype == torch.float32
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_batch_dims_before_time(make_is_init):
    """Batch [2, 3, T]: leading dims are flattened and restored."""
    module = _module("lstm", "scan")
    is_init = make_is_init(6, 5, 0.2, 0)
    td, _, _ = random_batch(module, is_init, grad=False)
    with set_recurrent_mode(True):
        flat = module(td.clone())
        nested = module(td.reshape(2, 3, 5))
    assert nested["y"].shape == (2, 3, 5, 5)
    torch.testing.assert_close(nested["y"].reshape(6, 5, 5), flat["y"])
