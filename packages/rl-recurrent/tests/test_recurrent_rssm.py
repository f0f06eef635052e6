"""RSSMPrior, RSSMPosterior and RSSMRollout: keys, resets, and loop == scan == compiled."""

from __future__ import annotations

import sys

import pytest
import torch
from rl_recurrent._rssm import RSSMPosterior, RSSMPrior, RSSMRollout
from rl_recurrent.exceptions import BackendUnavailableError
from tensordict import TensorDict

A, H, R, S, E = 2, 8, 6, 4, 5  # action, MLP width, belief, state, embedding sizes
LAZY_WARNING = "ignore:Lazy modules are a new feature"


def make_pair(latent: str = "normal", seed: int = 0) -> tuple[RSSMPrior, RSSMPosterior]:
    torch.manual_seed(seed)
    extra = {"latent": latent, "num_classes": 2} if latent == "categorical" else {}
    prior = RSSMPrior(action_dim=A, hidden_dim=H, rnn_hidden_dim=R, state_dim=S, **extra)
    post = RSSMPosterior(H, S, rnn_hidden_dim=R, obs_embedding_dim=E, **extra)
    return prior, post


def make_batch(b: int = 3, t: int = 5, resets: tuple = ((1, 2),), seed: int = 1) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    is_init = torch.zeros(b, t, 1, dtype=torch.bool)
    for i, j in resets:
        is_init[i, j] = True
    return TensorDict(
        {
            "state": torch.randn(b, t, S, generator=g),
            "belief": torch.randn(b, t, R, generator=g),
            "action": torch.randn(b, t, A, generator=g),
            ("next", "encoded_latents"): torch.randn(b, t, E, generator=g),
            "is_init": is_init,
        },
        [b, t],
    )


def run(rollout: RSSMRollout, td: TensorDict) -> tuple[TensorDict, list[torch.Tensor]]:
    """Roll out with seeded noise; return outputs and parameter + input gradients."""
    td = td.clone()
    td["action"].requires_grad_(True)
    out = rollout(td, generator=torch.Generator().manual_seed(2))
    loss = sum((out[k] * (i + 1)).sin().sum() for i, k in enumerate(rollout.out_keys))
    grads = torch.autograd.grad(loss, [*rollout.parameters(), td["action"]])
    return out, list(grads)


def test_prior_and_posterior_keys_shapes_and_noise():
    prior, post = make_pair()
    td = TensorDict(
        state=torch.randn(3, S), belief=torch.randn(3, R), action=torch.randn(3, A), batch_size=[3]
    )
    td["next", "prior_noise"] = torch.randn(3, S)
    td["next", "encoded_latents"] = torch.randn(3, E)
    post(prior(td))
    assert prior.out_keys == [("next", k) for k in ("prior_mean", "prior_std", "state", "belief")]
    assert td["next", "belief"].shape == (3, R)
    assert (td["next", "prior_std"] >= 0.1).all() and (td["next", "posterior_std"] >= 0.1).all()
    # the posterior overwrote ("next", "state") with its own sample; rerun the prior alone
    prior(td)
    expected = td["next", "prior_mean"] + td["next", "prior_std"] * td["next", "prior_noise"]
    torch.testing.assert_close(td["next", "state"], expected)


def test_categorical_latent_is_straight_through_one_hot():
    prior, _ = make_pair("categorical")
    state = torch.zeros(5, S, requires_grad=True)
    td = TensorDict(state=state, belief=torch.randn(5, R), action=torch.randn(5, A), batch_size=[5])
    prior(td)
    sample = td["next", "state"].detach().unflatten(-1, (S // 2, 2))
    torch.testing.assert_close(sample, sample.round())  # one-hot up to float rounding
    torch.testing.assert_close(sample.sum(-1), torch.ones(5, S // 2))
    assert td["next", "prior_logits"].shape == (5, S)
    (grad,) = torch.autograd.grad((td["next", "state"] * torch.randn(5, S)).sum(), state)
    assert grad.abs().sum() > 0  # gradients flow through the straight-through sample


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hidden_dim": H}, "action size"),
        ({"action_dim": 0}, "action_dim must be a positive int, got 0"),
        ({"action_dim": A, "latent": "gaussian"}, "latent must be one of"),
        ({"action_dim": A, "state_dim": 5, "latent": "categorical", "num_classes": 2}, "divides"),
    ],
)
def test_prior_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        RSSMPrior(**kwargs)


def test_rollout_rejects_mismatched_modules_and_missing_time_dim():
    prior, post = make_pair()
    with pytest.raises(ValueError, match="share state_dim"):
        RSSMRollout(prior, RSSMPosterior(H, S + 2, rnn_hidden_dim=R, obs_embedding_dim=E))
    with pytest.raises(ValueError, match="rnn_hidden_dim"):
        RSSMRollout(prior, RSSMPosterior(H, S, rnn_hidden_dim=R + 1, obs_embedding_dim=E))
    with pytest.raises(TypeError, match="rssm_posterior must be an RSSMPosterior"):
        RSSMRollout(prior, prior)
    with pytest.raises(ValueError, match="time dimension"):
        RSSMRollout(prior, post)(TensorDict(action=torch.zeros(A)))


def test_use_scan_without_scan_operator_raises(monkeypatch):
    prior, post = make_pair()
    monkeypatch.setitem(sys.modules, "torch._higher_order_ops.scan", None)  # import fails
    with pytest.raises(BackendUnavailableError, match="use_scan=False"):
        RSSMRollout(prior, post, use_scan=True)


def test_loop_rollout_matches_stepping_the_modules_by_hand():
    prior, post = make_pair()
    td = make_batch()
    out = RSSMRollout(prior, post)(td.clone(), generator=torch.Generator().manual_seed(2))
    g = torch.Generator().manual_seed(2)
    prior_noise, post_noise = torch.randn(3, 5, S, generator=g), torch.randn(3, 5, S, generator=g)
    state, belief = td["state"][:, 0], td["belief"][:, 0]
    for t in range(5):
        keep = ~td["is_init"][:, t]
        state, belief = state * keep, belief * keep
        torch.testing.assert_close(out["state"][:, t], state)
        torch.testing.assert_close(out["belief"][:, t], belief)
        _, _, belief = prior.step(state, belief, td["action"][:, t], prior_noise[:, t])
        (mean, std), state = post.step(
            belief, td["next", "encoded_latents"][:, t], post_noise[:, t]
        )
        torch.testing.assert_close(out["next", "belief"][:, t], belief)
        torch.testing.assert_close(out["next", "state"][:, t], state)
        torch.testing.assert_close(out["next", "posterior_std"][:, t], std)


def test_reset_cuts_the_past_off():
    prior, post = make_pair()
    td = make_batch(resets=((1, 2), (0, 0)))
    rollout = RSSMRollout(prior, post)
    base = rollout(td.clone(), generator=torch.Generator().manual_seed(2))
    changed = td.clone()
    changed["state"][:, 0] += 1.0  # change the initial state of every row
    changed["action"][1:, :2] += 1.0  # and rows 1-2's actions before row 1's reset at t=2
    new = rollout(changed, generator=torch.Generator().manual_seed(2))
    assert (new["state"][0, 0] == 0).all() and (new["belief"][1, 2] == 0).all()
    torch.testing.assert_close(new["next", "state"][0], base["next", "state"][0])
    torch.testing.assert_close(new["next", "state"][1, 2:], base["next", "state"][1, 2:])
    assert not torch.allclose(new["next", "state"][2, 2:], base["next", "state"][2, 2:])
    # is_init without the trailing singleton dimension means the same
    flat = td.clone()
    flat["is_init"] = td["is_init"].squeeze(-1)
    same = rollout(flat, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(same["next", "belief"], base["next", "belief"])


MODES = {
    "scan": {"use_scan": True},
    "compile_step": {"compile_step": True, "compile_options": {"backend": "aot_eager"}},
    "scan_compiled": {
        "use_scan": True,
        "compile_step": True,
        "compile_options": {"backend": "aot_eager"},
    },
    # The default backend: inductor lowers scan to a while_loop and generates C++ for the
    # step (tens of seconds of compilation on a 2-core CPU, hence the longer timeout).
    "scan_inductor": {"use_scan": True, "compile_step": True},
}
_SLOW_MODES = {"scan_inductor"}


@pytest.mark.parametrize(
    "mode",
    [pytest.param(m, marks=pytest.mark.timeout(600 if m in _SLOW_MODES else 300)) for m in MODES],
)
def test_modes_match_the_loop_in_values_and_gradients(mode):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    prior, post = make_pair()
    td = make_batch()
    ref, ref_grads = run(RSSMRollout(prior, post), td)
    rollout = RSSMRollout(prior, post, **MODES[mode])
    for _ in range(2):  # the second call reuses the compiled code
        out, grads = run(rollout, td)
        for key in rollout.out_keys:
            torch.testing.assert_close(out[key], ref[key], rtol=1e-5, atol=1e-5)
        for grad, expected in zip(grads, ref_grads, strict=True):
            torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-5)
    if rollout.compile_step:
        # scan: one graph for the whole rollout. Loop: the step's graph, compiled twice
        # (at t = 0 the carry does not require grad, afterwards it does), reused T times.
        expected = 1 if rollout.use_scan else 2
        assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == expected


@pytest.mark.timeout(300)
@pytest.mark.filterwarnings(LAZY_WARNING)
def test_categorical_scan_and_lazy_posterior_match_the_loop():
    torch._dynamo.reset()
    prior, _ = make_pair("categorical")
    post = RSSMPosterior(H, S, latent="categorical", num_classes=2)  # LazyLinear first layer
    td = make_batch()
    ref, ref_grads = run(RSSMRollout(prior, post), td)
    out, grads = run(RSSMRollout(prior, post, use_scan=True), td)
    for key in ref.keys(True, True):
        torch.testing.assert_close(out[key], ref[key], rtol=1e-5, atol=1e-5)
    for grad, expected in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(grad, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.timeout(300)
def test_scan_traces_one_graph_whatever_the_length():
    prior, post = make_pair()
    nodes = {}
    for use_scan in (False, True):
        rollout = RSSMRollout(prior, post, use_scan=use_scan)
        for t in (2, 4):
            torch._dynamo.reset()
            init, xs = rollout._inputs(make_batch(t=t, resets=()), None)
            explained = torch._dynamo.explain(rollout.rollout_tensors)(init, xs, 1)
            assert explained.graph_count == 1 and explained.graph_break_count == 0
            nodes[use_scan, t] = len(explained.graphs[0].graph.nodes)
    assert nodes[True, 2] == nodes[True, 4]  # the step is traced once, inside scan
    assert nodes[False, 4] > nodes[False, 2]  # the Python loop is unrolled, step by step
