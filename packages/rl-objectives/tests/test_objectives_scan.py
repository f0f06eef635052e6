"""The chunked scan's two paths (in place time-major, functional) against the loops."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_objectives.value import functional as F
from rl_objectives.value._time_major import chunk_shape


def _loop64(a, b, time_dim):
    a, b = a.double().expand_as(b).movedim(time_dim, 0), b.double().movedim(time_dim, 0)
    out, running = torch.empty_like(b), torch.zeros_like(b[0])
    for t in range(b.shape[0] - 1, -1, -1):
        running = b[t] + a[t] * running
        out[t] = running
    return out.movedim(0, time_dim)


def _close(actual, expected, dtype):
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    scale = max(1.0, float(expected.abs().max()))
    torch.testing.assert_close(actual.double(), expected.double(), rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("steps", [1, 2, 3, 7, 16, 97, 100, 1000, 1021])
def test_chunk_shape_covers_the_steps_in_about_two_sqrt_t_operations(steps):
    chunk, n_chunks = chunk_shape(steps)
    assert chunk * n_chunks >= steps > (n_chunks - 1) * chunk
    assert chunk + n_chunks <= 2 * math.isqrt(steps) + 3
    if steps in (16, 100, 1000):  # a divisor near sqrt(T) exists: no padding
        assert chunk * n_chunks == steps


@pytest.mark.parametrize("steps", [1, 2, 5, 64, 97, 1000])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_both_paths_equal_the_float64_loop(steps, dtype):
    g = torch.Generator().manual_seed(steps)
    b = torch.randn(3, steps, generator=g, dtype=dtype)
    a = torch.rand(3, steps, generator=g, dtype=dtype) * (torch.rand(3, steps, generator=g) > 0.05)
    a[:, ::4] = 0.0  # cuts at every chunk boundary of the small chunk sizes
    want = _loop64(a, b, -1)
    _close(F.reverse_linear_scan(a, b), want, dtype)
    graph = F.reverse_linear_scan(a, b.clone().requires_grad_())
    assert graph.requires_grad  # the functional path ran
    _close(graph.detach(), want, dtype)


def test_scan_layouts_expanded_coefficients_and_features():
    g = torch.Generator().manual_seed(0)
    b = torch.randn(50, 2, 3, generator=g)  # time first, two feature dims
    a = torch.full((1, 1, 1), 0.9).expand_as(b)
    _close(F.reverse_linear_scan(a, b, time_dim=0), _loop64(a, b, 0), torch.float32)
    bt = torch.randn(2, 3, 40, generator=g).transpose(1, 2)  # non-contiguous, time in the middle
    at = torch.rand(2, 40, 3, generator=g)
    _close(F.reverse_linear_scan(at, bt, time_dim=1), _loop64(at, bt, 1), torch.float32)


def test_products_that_underflow_stay_exact():
    g = torch.Generator().manual_seed(1)
    b = torch.randn(2, 1000, generator=g)
    a = torch.full((2, 1000), 1e-3)  # chunk products reach 1e-75: 0 in float32
    _close(F.reverse_linear_scan(a, b), _loop64(a, b, -1), torch.float32)


@st.composite
def _layouts(draw):
    steps = draw(st.integers(1, 150))
    features = draw(st.sampled_from([1, 2]))
    time_first = draw(st.booleans())
    p_done = draw(st.sampled_from([0.0, 0.02, 0.3, 1.0]))
    coefs = draw(st.sampled_from(["float", "0-d", "per-step"]))
    seed = draw(st.integers(0, 2**31 - 1))
    return steps, features, time_first, p_done, coefs, seed


def _rollout(steps, features, time_first, p_done, coefs, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (steps, 2, features) if time_first else (2, steps, features)
    v, nv, r = (torch.randn(shape, generator=g) for _ in range(3))
    done = torch.rand(shape, generator=g) < p_done
    term = done & (torch.rand(shape, generator=g) < 0.5)
    gamma, lmbda = 0.99, 0.95
    if coefs == "0-d":
        gamma, lmbda = torch.tensor(0.99), torch.tensor(0.95)
    elif coefs == "per-step":
        gamma = 0.5 + 0.5 * torch.rand(shape, generator=g)
        lmbda = torch.rand(shape, generator=g)
    return gamma, lmbda, v, nv, r, done, term, (0 if time_first else 1)


def _f64(x):
    return x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x


@settings(max_examples=40, deadline=None)
@given(_layouts())
def test_in_place_estimators_equal_the_loops_for_any_layout(case):
    gamma, lmbda, v, nv, r, done, term, time_dim = _rollout(*case)
    inputs = [x.clone() for x in (v, nv, r, done, term)]
    adv, target = F.vec_generalized_advantage_estimate(gamma, lmbda, v, nv, r, done, term,
                                                       time_dim=time_dim)
    ref_adv, ref_target = F.generalized_advantage_estimate(
        *map(_f64, (gamma, lmbda, v, nv, r)), done, term, time_dim=time_dim)
    _close(adv, ref_adv, torch.float32)
    _close(target, ref_target, torch.float32)
    ret = F.vec_td_lambda_return_estimate(gamma, lmbda, nv, r, done, term, time_dim=time_dim)
    ref_ret = F.td_lambda_return_estimate(*map(_f64, (gamma, lmbda, nv, r)), done, term,
                                          time_dim=time_dim)
    _close(ret, ref_ret, torch.float32)
    for before, after in zip(inputs, (v, nv, r, done, term), strict=True):
        assert torch.equal(before, after)  # nothing written into the inputs


def test_in_place_and_functional_paths_agree_on_a_long_rollout():
    g = torch.Generator().manual_seed(2)
    v, nv, r = (torch.randn(16, 1000, 1, generator=g) for _ in range(3))
    done = torch.rand(16, 1000, 1, generator=g) < 0.01
    eager, _ = F.vec_generalized_advantage_estimate(0.99, 0.95, v, nv, r, done)
    graph, _ = F.vec_generalized_advantage_estimate(0.99, 0.95, v.requires_grad_(), nv, r, done)
    ref, _ = F.generalized_advantage_estimate(0.99, 0.95, v.double(), nv.double(), r.double(),
                                              done)
    _close(eager, ref.detach(), torch.float32)
    _close(graph.detach(), ref.detach(), torch.float32)


@pytest.mark.parametrize("steps", [1000, 1021])  # 1021: padded buffers (no divisor near sqrt)
def test_outputs_do_not_live_in_the_reused_scratch_memory(steps):
    """The scan's temporaries are reused from call to call: a result must survive the
    next call (of any estimator) unchanged, and equal the float64 loop."""
    def inputs(seed):
        g = torch.Generator().manual_seed(seed)
        v, nv, r = (torch.randn(4, steps, 1, generator=g) for _ in range(3))
        done = torch.rand(4, steps, 1, generator=g) < 0.05
        return v, nv, r, done, done & (torch.rand(4, steps, 1, generator=g) < 0.5)

    first = F.vec_generalized_advantage_estimate(0.99, 0.95, *inputs(0))
    kept = [t.clone() for t in first]
    v, nv, r, done, term = inputs(1)
    F.vec_generalized_advantage_estimate(0.9, 0.5, v, nv, r, done, term)
    F.vec_td_lambda_return_estimate(0.9, 0.5, nv, r, done, term)
    F.reverse_linear_scan(torch.rand(4, steps), torch.randn(4, steps))
    for got, was in zip(first, kept, strict=True):
        assert torch.equal(got, was)
    expected = F.generalized_advantage_estimate(0.99, 0.95, *(t.double() for t in inputs(0)))
    for got, ref in zip(first, expected, strict=True):
        _close(got, ref, torch.float32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["rows", "features", "transposed"])
def test_compiled_kernels_equal_the_in_place_scan(dtype, layout):
    """The numba pass (CPU, float coefficients) and the chunked scan agree on every
    layout: time contiguous, dims after time, and a non-contiguous view."""
    from rl_objectives.value import _gae, _kernels, _td

    g = torch.Generator().manual_seed(3)
    shape = {"rows": (8, 300, 1), "features": (3, 200, 4), "transposed": (300, 8, 1)}[layout]
    v, nv, r = (torch.randn(shape, generator=g, dtype=dtype) for _ in range(3))
    done = torch.rand(shape, generator=g) < 0.03
    term = done & (torch.rand(shape, generator=g) < 0.5)
    if layout == "transposed":  # [T, B, 1] storage seen as [B, T, 1]
        v, nv, r, done, term = (x.transpose(0, 1) for x in (v, nv, r, done, term))
    assert not _kernels.usable(0.99, 0.95, v, nv, r)  # small: the scan (called here anyway)
    adv, target = _kernels.gae_kernel(0.99, 0.95, v, nv, r, done, term, 1)
    scan_adv, scan_target = _gae._gae_time_major(0.99, 0.95, v, nv, r, done, term, 1)
    _close(adv, scan_adv.double(), dtype)
    _close(target, scan_target.double(), dtype)
    ret = _kernels.td_lambda_kernel(0.99, 0.95, nv, r, done, term, 1)
    scan_ret = _td._td_lambda_time_major(0.99, 0.95, nv, r, done, term, 1)
    _close(ret, scan_ret.double(), dtype)


def test_compiled_kernels_are_not_used_where_they_do_not_apply():
    from rl_objectives.value import _kernels

    x = torch.zeros(2, _kernels.MIN_NUMEL // 2, 1)
    assert _kernels.usable(0.99, 0.95, x, x)
    assert not _kernels.usable(0.99, 0.95, x[:, 1:], x[:, 1:])  # below MIN_NUMEL
    assert not _kernels.usable(torch.tensor(0.99), 0.95, x, x)  # tensor coefficient
    assert not _kernels.usable(0.99, 0.95, x, x.double())  # mixed dtypes
    assert not _kernels.usable(0.99, 0.95, x.half(), x.half())  # no half kernel


LOAD_CHECK = """
import sys
import torch
from tensordict import TensorDict
from rl_objectives import GAE, TDLambdaEstimator
from rl_objectives.value import _kernels

def batch(t):
    z = torch.zeros(t, 1)
    return TensorDict({"state_value": z, "next": {"state_value": z, "reward": z,
        "done": z.bool(), "terminated": z.bool()}}, [t])

gae, td = GAE(gamma=0.99, lmbda=0.95), TDLambdaEstimator(gamma=0.99, lmbda=0.9)
gae(batch(1000)), td(batch(1000))  # built and used on a small batch: the scan
assert "numba" not in sys.modules, "numba imported where the scan runs"
big = batch(_kernels.MIN_NUMEL)
assert (gae(big)["advantage"] == 0).all()
loaded = {k for k, v in vars(_kernels._kernels()).items() if v.signatures}
assert loaded == {"gae_rows"}, loaded
td(big)
loaded = {k for k, v in vars(_kernels._kernels()).items() if v.signatures}
assert loaded == {"gae_rows", "td_lambda_rows"}, loaded
"""


@pytest.mark.timeout(120)
def test_numba_loads_at_the_first_large_batch_only():
    """In a fresh interpreter: building an estimator and small batches import no numba;
    the first batch of MIN_NUMEL elements loads its own kernel only."""
    import subprocess
    import sys

    pytest.importorskip("numba")
    proc = subprocess.run([sys.executable, "-c", LOAD_CHECK], capture_output=True, text=True,
                          timeout=110, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
