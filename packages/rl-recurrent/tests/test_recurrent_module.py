"""The hidden-state lifecycle, keys, modes and errors of LSTMModule / GRUModule."""

from __future__ import annotations

import threading

import pytest
import torch
from rl_recurrent import (
    GRUModule,
    LSTMModule,
    MissingIsInitError,
    MissingRecurrentStateError,
    recurrent_mode,
    set_recurrent_mode,
)
from tensordict import TensorDict


def _collect(module, n_env, steps, p_done, seed):
    """Drive the module step by step like a collector: carry ("next", k) -> k, reset at done."""
    gen = torch.Generator().manual_seed(seed)
    rows = []
    td = TensorDict({"is_init": torch.ones(n_env, 1, dtype=torch.bool)}, [n_env])
    for key in module.in_keys[1:-1]:  # what the primer writes on reset
        td.set(key, torch.zeros(n_env, module.rnn.num_layers, module.rnn.hidden_size))
    for _ in range(steps):
        td.set("x", torch.randn(n_env, module.rnn.input_size, generator=gen))
        with torch.no_grad():
            module(td)
        rows.append(td.clone())
        done = torch.rand(n_env, 1, generator=gen) < p_done
        nxt = TensorDict({"is_init": done}, [n_env])
        for key in module.in_keys[1:-1]:
            nxt.set(key, torch.where(done[..., None], 0.0, td["next", key]))  # primer on reset
        td = nxt
    return torch.stack(rows, dim=1)  # [n_env, T]: time last


@pytest.mark.parametrize("cls", [LSTMModule, GRUModule])
@pytest.mark.parametrize("backend", ["pad", "scan"])
def test_sequential_rollout_equals_recurrent_mode(cls, backend):
    torch.manual_seed(0)
    module = cls(3, 6, 2, in_key="x", out_key="y", recurrent_backend=backend)
    batch = _collect(module, n_env=4, steps=12, p_done=0.2, seed=1)
    # training sees a later slice too: its t=0 state is the stored (carried) one
    for piece in (batch, batch[:, 5:]):
        with set_recurrent_mode(True), torch.no_grad():
            out = module(piece.exclude("y", "next"))
        torch.testing.assert_close(out["y"], piece["y"], atol=1e-5, rtol=1e-5)
        last = piece[:, -1]
        for key in module.out_keys[1:]:
            torch.testing.assert_close(out[key][:, -1], last[key], atol=1e-5, rtol=1e-5)


def test_sequential_zeroes_state_at_is_init_only():
    torch.manual_seed(0)
    module = LSTMModule(2, 4, in_key="x", out_key="y")
    h = torch.randn(2, 1, 4)
    td = TensorDict(
        {"x": torch.zeros(2, 2), "recurrent_state_h": h, "recurrent_state_c": h.clone(),
         "is_init": torch.tensor([[True], [False]])}, [2],
    )  # fmt: skip
    out = module(td.clone())["y"]
    fresh = module(td.clone().update({"recurrent_state_h": torch.zeros_like(h),
                                      "recurrent_state_c": torch.zeros_like(h)}))["y"]  # fmt: skip
    torch.testing.assert_close(out[0], fresh[0])
    assert not torch.allclose(out[1], fresh[1])


def test_missing_state_allowed_only_at_trajectory_start():
    module = GRUModule(2, 4, in_key="x", out_key="y")
    td = TensorDict({"x": torch.zeros(3, 2), "is_init": torch.ones(3, 1, dtype=torch.bool)}, [3])
    assert module(td)["next", "recurrent_state"].shape == (3, 1, 4)
    td = TensorDict({"x": torch.zeros(3, 2), "is_init": torch.zeros(3, 1, dtype=torch.bool)}, [3])
    with pytest.raises(MissingRecurrentStateError, match="make_tensordict_primer"):
        module(td)
    with set_recurrent_mode(True), pytest.raises(MissingRecurrentStateError):
        module(TensorDict({"x": torch.zeros(3, 5, 2), "is_init": torch.zeros(3, 5, 1)}, [3, 5]))


@pytest.mark.parametrize("mode", [False, True])
def test_missing_is_init_says_what_to_add(mode):
    module = LSTMModule(2, 4, in_key="x", out_key="y")
    td = TensorDict({"x": torch.zeros(3, 5, 2)}, [3, 5])
    with set_recurrent_mode(mode), pytest.raises(MissingIsInitError, match="InitTracker"):
        module(td)


def test_wrong_feature_size():
    module = LSTMModule(2, 4, in_key="x", out_key="y")
    td = TensorDict({"x": torch.zeros(3, 7), "is_init": torch.ones(3, 1, dtype=torch.bool)}, [3])
    with pytest.raises(ValueError, match="input_size=2.*got shape \\(3, 7\\)"):
        module(td)


def test_wrong_state_shape():
    module = LSTMModule(2, 4, in_key="x", out_key="y")
    td = TensorDict(
        {"x": torch.zeros(3, 2), "is_init": torch.zeros(3, 1, dtype=torch.bool),
         "recurrent_state_h": torch.zeros(3, 4), "recurrent_state_c": torch.zeros(3, 4)}, [3],
    )  # fmt: skip
    with pytest.raises(ValueError, match="num_layers, hidden_size"):
        module(td)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"recurrent_backend": "cudnn"}, "recurrent_backend must be one of"),
        ({"recurrent_recompute": "some"}, "recurrent_recompute must be one of"),
        ({"recurrent_matmul_precision": "fp16"}, "recurrent_matmul_precision must be one of"),
        ({"recurrent_compute_dtype": torch.int32}, "recurrent_compute_dtype"),
        ({"dropout": 1.5}, "dropout"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LSTMModule(2, 4, in_key="x", out_key="y", **kwargs)


def test_keys_follow_torchrl():
    module = LSTMModule(2, 4, in_key="obs", out_key="feat")
    assert module.in_keys == ["obs", "recurrent_state_h", "recurrent_state_c", "is_init"]
    assert module.out_keys == [
        "feat", ("next", "recurrent_state_h"), ("next", "recurrent_state_c")
    ]  # fmt: skip
    custom = GRUModule(2, 4, in_keys=["obs", "hid"], out_keys=["feat", ("next", "hid")])
    assert custom.in_keys == ["obs", "hid", "is_init"]
    with pytest.raises(ValueError, match="must be \\('next', 'hid'\\)"):
        GRUModule(2, 4, in_keys=["obs", "hid"], out_keys=["feat", "hid"])
    with pytest.raises(ValueError, match="exactly one of in_key"):
        GRUModule(2, 4, out_key="feat")


def test_mode_is_per_thread_and_decorates():
    seen = {}

    def worker():
        seen["thread"] = recurrent_mode()

    with set_recurrent_mode(True):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
        assert recurrent_mode()
        with set_recurrent_mode(False):
            assert not recurrent_mode()
        assert recurrent_mode()
    assert seen["thread"] is False

    @set_recurrent_mode(True)
    def inside():
        return recurrent_mode()

    assert inside() and not recurrent_mode()
    with pytest.raises(TypeError, match="bool"):
        set_recurrent_mode("yes")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the triton backend is available on CUDA")
def test_triton_backend_is_reported_unavailable(monkeypatch):
    from rl_recurrent import BackendUnavailableError

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(BackendUnavailableError, match="triton"):
        LSTMModule(2, 4, in_key="x", out_key="y", recurrent_backend="triton")


def test_matmul_precision_global_setting():
    from rl_recurrent import recurrent_matmul_precision, set_recurrent_matmul_precision

    assert recurrent_matmul_precision() == "ieee"
    set_recurrent_matmul_precision("tf32")
    try:
        assert recurrent_matmul_precision() == "tf32"
    finally:
        set_recurrent_matmul_precision("ieee")
    with pytest.raises(ValueError, match="precision must be one of"):
        set_recurrent_matmul_precision("bf16")


def test_make_tensordict_primer_declares_zero_states():
    pytest.importorskip("rl_envs")
    module = LSTMModule(3, 8, 2, in_key="x", out_key="y")
    primer = module.make_tensordict_primer()
    assert sorted(primer.primers) == ["recurrent_state_c", "recurrent_state_h"]
    assert all(tuple(spec.shape) == (2, 8) for spec in primer.primers.values())
    assert primer.default_value == 0.0
