"""Distributions against torch's references and float64 numeric integrals."""

from __future__ import annotations

import math

import pytest
import torch
from rl_modules import (
    Delta,
    IndependentNormal,
    MaskedCategorical,
    OneHotCategorical,
    TanhNormal,
    TruncatedNormal,
)
from torch import distributions as D


def _tanh_reference(loc, scale, low, high):
    base = D.Independent(D.Normal(loc, scale), 1)
    half, mid = (high - low) / 2, (high + low) / 2
    return D.TransformedDistribution(base, [D.TanhTransform(), D.AffineTransform(mid, half)])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tanh_normal_log_prob_matches_torch_inside(dtype):
    g = torch.Generator().manual_seed(0)
    loc, scale = (
        torch.randn(64, 3, generator=g, dtype=dtype),
        torch.rand(64, 3, generator=g, dtype=dtype) + 0.2,
    )
    low, high = (
        torch.tensor([-2.0, 0.0, -1.0], dtype=dtype),
        torch.tensor([2.0, 5.0, 0.5], dtype=dtype),
    )
    ours, ref = TanhNormal(loc, scale, low=low, high=high), _tanh_reference(loc, scale, low, high)
    y = torch.rand(64, 3, generator=g, dtype=dtype) * 1.8 - 0.9  # tanh(u) well inside (-1, 1)
    value = (high + low) / 2 + (high - low) / 2 * y
    tol = 1e-4 if dtype == torch.float32 else 1e-10
    torch.testing.assert_close(ours.log_prob(value), ref.log_prob(value), atol=tol, rtol=tol)


def test_tanh_normal_density_integrates_to_one_float64():
    loc, scale = torch.tensor([0.7], dtype=torch.float64), torch.tensor([0.8], dtype=torch.float64)
    d = TanhNormal(loc, scale, low=-3.0, high=1.0)
    a = torch.linspace(-3.0, 1.0, 400_001, dtype=torch.float64)[1:-1].unsqueeze(-1)
    density = d.log_prob(a).exp()
    assert torch.trapezoid(density, a.squeeze(-1)).item() == pytest.approx(1.0, abs=1e-6)


def test_tanh_normal_sampling_moments_match_the_numeric_mean():
    loc, scale = torch.tensor([0.5, -1.0]), torch.tensor([0.3, 1.5])
    d = TanhNormal(loc.expand(200_000, 2), scale.expand(200_000, 2), low=0.0, high=4.0)
    samples = d.sample()
    u = torch.linspace(-12, 12, 200_001, dtype=torch.float64).unsqueeze(-1)
    weights = D.Normal(loc.double(), scale.double()).log_prob(u).exp()
    expected = torch.trapezoid(weights * (2.0 + 2.0 * torch.tanh(u)), u.squeeze(-1), dim=0)
    torch.testing.assert_close(samples.double().mean(0), expected, atol=0.01, rtol=0)
    assert bool(((samples > 0) & (samples < 4)).all())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tanh_normal_log_prob_finite_at_and_near_the_bounds(dtype):
    low, high = torch.tensor([-1.0, 0.0], dtype=dtype), torch.tensor([1.0, 10.0], dtype=dtype)
    d = TanhNormal(
        torch.zeros(4, 2, dtype=dtype), torch.full((4, 2), 0.5, dtype=dtype), low=low, high=high
    )
    near = torch.stack([low, low + 1e-6, high - 1e-6, high])
    lp = d.log_prob(near)
    assert torch.isfinite(lp).all(), lp


def test_tanh_normal_saturated_sample_has_finite_log_prob_and_gradient():
    loc = torch.full((5, 1), 12.0, requires_grad=True)  # tanh(u) rounds to 1 in float32
    d = TanhNormal(loc, torch.full((5, 1), 0.1))
    a = d.rsample()
    lp = d.log_prob(a)  # the cached pre-tanh value, not atanh(1)
    assert torch.isfinite(lp).all() and (a < 1).all()
    lp.sum().backward()
    assert torch.isfinite(loc.grad).all()


def test_tanh_normal_cached_and_recomputed_log_prob_agree():
    d = TanhNormal(torch.randn(100, 2), torch.rand(100, 2) + 0.5, low=-2.0, high=2.0)
    a = d.rsample()
    torch.testing.assert_close(d.log_prob(a), d.log_prob(a.clone()), atol=1e-3, rtol=1e-4)


def test_tanh_normal_deterministic_sample_is_the_squashed_loc():
    loc = torch.tensor([[0.3, -2.0]])
    d = TanhNormal(
        loc, torch.ones(1, 2), low=torch.tensor([0.0, -4.0]), high=torch.tensor([2.0, 4.0])
    )
    expected = torch.tensor([0.0, -4.0]) + (torch.tanh(loc) + 1) * torch.tensor([1.0, 4.0])
    torch.testing.assert_close(d.deterministic_sample, expected)
    d2 = TanhNormal(torch.full((1, 2), 100.0), torch.ones(1, 2), tanh_loc=True, upscale=2.0)
    torch.testing.assert_close(d2.loc, torch.full((1, 2), 2 * math.tanh(50.0)))


def test_independent_normal_matches_torch():
    loc, scale = torch.randn(10, 3), torch.rand(10, 3) + 0.1
    ours, ref = IndependentNormal(loc, scale), D.Independent(D.Normal(loc, scale), 1)
    x = torch.randn(10, 3)
    torch.testing.assert_close(ours.log_prob(x), ref.log_prob(x))
    torch.testing.assert_close(ours.entropy(), ref.entropy())
    assert torch.equal(ours.deterministic_sample, loc)
    big = IndependentNormal(loc.expand(100_000, 10, 3), scale.expand(100_000, 10, 3)).sample()
    torch.testing.assert_close(big.mean(0), loc, atol=0.03, rtol=0)
    torch.testing.assert_close(big.std(0), scale, atol=0.03, rtol=0)


def _normal_cases():
    """``(loc, scale, value)``: float32/64, a state-independent (expanded) scale, a scale
    to broadcast, a sample shape, tiny and huge scales."""
    g = torch.Generator().manual_seed(1)
    for dtype in (torch.float32, torch.float64):
        for shape in [(1, 3), (7, 17), (4096, 6), (2, 5, 33)]:
            for size in (1e-4, 1.0, 300.0):
                loc = torch.randn(shape, generator=g, dtype=dtype) * size
                scale = (torch.rand(shape, generator=g, dtype=dtype) + 0.05) * size
                value = loc + torch.randn((3, *shape), generator=g, dtype=dtype) * 2 * size
                yield loc, scale, value
                yield loc, scale[..., :1].expand(shape), value[0]
                yield loc, scale[0, ..., :1], value[1]  # a scale to broadcast


def test_independent_normal_draws_and_log_probs_are_torchs_bit_for_bit():
    for loc, scale in ((c[0], c[1]) for c in _normal_cases()):
        ours, ref = IndependentNormal(loc, scale), D.Independent(D.Normal(loc, scale), 1)
        for sample_shape in ((), (2,)):
            torch.manual_seed(3)
            a = ours.rsample(sample_shape)
            torch.manual_seed(3)
            assert torch.equal(a, ref.rsample(sample_shape))
            with torch.no_grad():
                assert torch.equal(ours.log_prob(a), ref.log_prob(a))
    for loc, scale, value in _normal_cases():
        ours, ref = IndependentNormal(loc, scale), D.Independent(D.Normal(loc, scale), 1)
        with torch.no_grad():
            assert torch.equal(ours.log_prob(value), ref.log_prob(value))


@pytest.mark.parametrize("event_dim", [0, 1, 2])
def test_independent_normal_event_dims_and_gradients_are_torchs(event_dim):
    loc = torch.randn(4, 5, 3, requires_grad=True)
    scale = (torch.rand(4, 5, 3) + 0.1).requires_grad_()
    ours = IndependentNormal(loc, scale, event_dim=event_dim)
    ref = D.Independent(D.Normal(loc, scale), event_dim)
    assert ours.batch_shape == ref.batch_shape and ours.event_shape == ref.event_shape
    value = torch.randn(4, 5, 3)
    with torch.no_grad():
        assert torch.equal(ours.log_prob(value), ref.log_prob(value))
    # with autograd on, torch's own log_prob: the same gradients, bit for bit
    grads = torch.autograd.grad(ours.log_prob(value).sum(), (loc, scale))
    ref_grads = torch.autograd.grad(ref.log_prob(value).sum(), (loc, scale))
    assert all(torch.equal(a, b) for a, b in zip(grads, ref_grads, strict=True))
    torch.manual_seed(0)
    a = ours.rsample()
    torch.manual_seed(0)
    b = ref.rsample()
    grads = torch.autograd.grad(a.square().sum(), (loc, scale))
    ref_grads = torch.autograd.grad(b.square().sum(), (loc, scale))
    assert torch.equal(a, b)
    assert all(torch.equal(x, y) for x, y in zip(grads, ref_grads, strict=True))


def test_truncated_normal_matches_the_float64_formula_and_integral():
    loc, scale = (
        torch.tensor([0.3, -0.5], dtype=torch.float64),
        torch.tensor([0.5, 2.0], dtype=torch.float64),
    )
    low, high = -1.0, 1.0
    d = TruncatedNormal(loc, scale, low=low, high=high)
    x = torch.tensor([0.2, -0.7], dtype=torch.float64)
    normal = D.Normal(loc, scale)
    mass = normal.cdf(torch.tensor(high, dtype=torch.float64)) - normal.cdf(
        torch.tensor(low, dtype=torch.float64)
    )
    expected = (normal.log_prob(x) - mass.log()).sum()
    torch.testing.assert_close(d.log_prob(x), expected, atol=1e-8, rtol=1e-8)
    grid = torch.linspace(low, high, 200_001, dtype=torch.float64)
    per_dim = (normal.log_prob(grid.unsqueeze(-1)) - mass.log()).exp()
    torch.testing.assert_close(
        torch.trapezoid(per_dim, grid, dim=0), torch.ones(2, dtype=torch.float64)
    )
    samples = TruncatedNormal(
        loc.expand(200_000, 2), scale.expand(200_000, 2), low=low, high=high
    ).sample()
    mean = torch.trapezoid(per_dim * grid.unsqueeze(-1), grid, dim=0)
    torch.testing.assert_close(samples.mean(0), mean, atol=0.01, rtol=0)
    assert bool(((samples >= low) & (samples <= high)).all())
    assert torch.equal(d.deterministic_sample, loc)


def _masked():
    logits = torch.tensor([[1.0, 2.0, 0.5, -1.0], [0.0, 0.0, 0.0, 3.0]], requires_grad=True)
    mask = torch.tensor([[True, False, True, True], [False, True, True, False]])
    return logits, mask


def test_masked_categorical_never_samples_masked_actions():
    logits, mask = _masked()
    d = MaskedCategorical(logits=logits, mask=mask)
    draws = d.sample((100_000,))
    assert not bool((~mask.gather(-1, draws.T)).any())
    freq = torch.stack([torch.bincount(draws[:, i], minlength=4) for i in range(2)]).float() / 1e5
    ref = torch.softmax(logits.detach().masked_fill(~mask, -1e9), -1)
    torch.testing.assert_close(freq, ref, atol=0.01, rtol=0)
    assert bool((d.probs[~mask] == 0).all())


def test_masked_categorical_log_prob_entropy_and_gradients():
    logits, mask = _masked()
    d = MaskedCategorical(logits=logits, mask=mask)
    ref = [D.Categorical(logits=logits[i][mask[i]]) for i in range(2)]
    lp = d.log_prob(torch.tensor([2, 2]))
    torch.testing.assert_close(
        lp, torch.stack([ref[0].log_prob(torch.tensor(1)), ref[1].log_prob(torch.tensor(1))])
    )
    assert d.log_prob(torch.tensor([1, 0])).isneginf().all()
    entropy = d.entropy()
    torch.testing.assert_close(entropy, torch.stack([r.entropy() for r in ref]))
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all() and bool((logits.grad[~mask] == 0).all())
    assert d.deterministic_sample.tolist() == [0, 1]


def test_masked_categorical_indices_probs_and_padding():
    d = MaskedCategorical(probs=torch.full((2, 3), 1 / 3), indices=torch.tensor([[0, 2], [1, 1]]))
    torch.testing.assert_close(d.probs, torch.tensor([[0.5, 0.0, 0.5], [0.0, 1.0, 0.0]]))
    padded = MaskedCategorical(
        logits=torch.zeros(2, 3), mask=torch.ones(2, 3, dtype=torch.bool), padding_value=-1
    )
    assert padded.log_prob(torch.tensor([-1, 0])).tolist() == pytest.approx([0.0, -math.log(3)])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (
            {
                "logits": torch.zeros(2, 3),
                "mask": torch.tensor([[True, False, False], [False] * 3]),
            },
            "rows \\[\\[1\\]\\]",
        ),
        (
            {"logits": torch.zeros(2, 3), "mask": torch.ones(2, 4, dtype=torch.bool)},
            "shape \\(2, 3\\)",
        ),
        ({"logits": torch.zeros(2, 3), "mask": torch.ones(2, 3)}, "must be bool"),
        ({"logits": torch.zeros(2, 3)}, "exactly one of mask and indices"),
    ],
)
def test_masked_categorical_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MaskedCategorical(**kwargs)


def test_reexported_tensordict_distributions():
    oh = OneHotCategorical(logits=torch.tensor([[0.0, 5.0, 0.0]]))
    assert oh.sample().sum().item() == 1 and oh.deterministic_sample.tolist() == [[0, 1, 0]]
    delta = Delta(torch.tensor([[1.0, 2.0]]))
    assert torch.equal(delta.sample(), torch.tensor([[1.0, 2.0]]))
