"""IQLLoss, CQLLoss and TD3BCLoss against hand-written references of their equations on
small fixed tensors, and through ``make_update_step``."""

from __future__ import annotations

import math
import types

import pytest
import torch
from rl_objectives import CQLLoss, IQLLoss, SoftUpdate, TD3BCLoss, make_update_step
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

OBS, ACT, B = 3, 2, 6


class Q(torch.nn.Module):
    """``Q(s, a) = W [s, a] + b``."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(OBS + ACT, 1)

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], -1))


def _critic():
    return TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])


def _value():
    return TensorDictModule(torch.nn.Linear(OBS, 1), ["observation"], ["state_value"])


def _stochastic_actor():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(torch.nn.Sequential(torch.nn.Linear(OBS, 2 * ACT),
                                             NormalParamExtractor()),
                         ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=torch.distributions.Normal))


def _deterministic_actor():
    return TensorDictModule(torch.nn.Sequential(torch.nn.Linear(OBS, ACT), torch.nn.Tanh()),
                            ["observation"], ["action"])


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        "observation": torch.randn(B, OBS, generator=g),
        "action": torch.rand(B, ACT, generator=g) * 1.6 - 0.8,
        "next": {"observation": torch.randn(B, OBS, generator=g),
                 "reward": torch.randn(B, 1, generator=g),
                 "done": torch.tensor([[False], [True], [False], [False], [True], [False]]),
                 "terminated": torch.tensor([[False], [True], [False]] * 2)},
    }, [B])


def _q(params, i, obs, act):
    """Critic ``i`` of stacked parameters, written out (any leading dims)."""
    w, b = params["module", "net", "weight"][i], params["module", "net", "bias"][i]
    return (torch.cat([obs, act], -1) @ w.T + b).squeeze(-1)


def _dist(actor, obs):
    loc_scale = actor[0].module(obs)
    return torch.distributions.Normal(*loc_scale)


def test_iql_matches_the_reference():
    torch.manual_seed(0)
    loss = IQLLoss(_stochastic_actor(), _critic(), _value(), expectile=0.7, temperature=3.0,
                   loss_function="l2", gamma=0.9)
    with torch.no_grad():  # the target critics differ from the online ones
        loss.target_qvalue_network_params["module", "net", "weight"].add_(0.3)
    td = _batch()
    out = loss(td)
    obs, act, nxt = td["observation"], td["action"], td["next"]
    tp, p = loss.target_qvalue_network_params, loss.qvalue_network_params
    q_t = torch.minimum(_q(tp, 0, obs, act), _q(tp, 1, obs, act))
    v = loss.value_network.module(obs).squeeze(-1)
    u = q_t - v
    ref_value = torch.where(u > 0, 0.7 * u**2, 0.3 * u**2).mean()
    weight = torch.exp(3.0 * (q_t - v)).clamp(max=100.0)
    log_prob = _dist(loss.actor_network, obs).log_prob(act).sum(-1)
    y = nxt["reward"].squeeze(-1) + 0.9 * (~nxt["terminated"].squeeze(-1)) * (
        loss.value_network.module(nxt["observation"]).squeeze(-1))
    pred = torch.stack([_q(p, i, obs, act) for i in range(2)])
    torch.testing.assert_close(out["loss_value"], ref_value)
    torch.testing.assert_close(out["loss_actor"], -(weight * log_prob).mean())
    torch.testing.assert_close(out["loss_qvalue"], ((pred - y) ** 2).sum(0).mean())
    torch.testing.assert_close(out["entropy"], -log_prob.mean())
    torch.testing.assert_close(td["td_error"], (pred - y).abs().amax(0))
    assert (u > 0).any() and (u < 0).any()  # both sides of the expectile are exercised


def test_iql_terms_move_only_their_own_network():
    loss = IQLLoss(_stochastic_actor(), _critic(), _value(), expectile=0.8)
    out = loss(_batch())
    grads = torch.autograd.grad(out["loss_value"], list(loss.actor_network.parameters())
                                + list(loss.qvalue_network_params.values(True, True)),
                                allow_unused=True)
    assert all(g is None for g in grads)
    grads = torch.autograd.grad(out["loss_actor"], list(loss.value_network.parameters()),
                                allow_unused=True)
    assert all(g is None for g in grads)


@pytest.mark.parametrize("kwargs", [{"expectile": 1.0}, {"expectile": 0.0},
                                    {"temperature": 0.0}, {"num_qvalue_nets": 0}])
def test_iql_bad_arguments_are_named(kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=name):
        IQLLoss(_stochastic_actor(), _critic(), _value(), **kwargs)


def test_iql_needs_its_value_network_as_torchrl_does():
    # TorchRL's docs call value_network optional, but its IQLLoss has no default for it and
    # reads it in every term: None is refused here by name, before anything is built
    with pytest.raises(TypeError, match=r"value_network: expected a tensordict module "
                       r"writing state_value .*received None; TorchRL's docs mark it optional"):
        IQLLoss(_stochastic_actor(), _critic(), None)
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'value_network'"):
        IQLLoss(_stochastic_actor(), _critic())


def _cql_reference(loss, td, seed, *, lagrange, half_width=1.0):
    """Redraw the loss's random numbers in its order and write CQL's equations out."""
    torch.manual_seed(seed)
    obs, act, nxt = td["observation"], td["action"], td["next"]
    nobs = nxt["observation"]
    actor, k, p = loss.actor_network, loss.num_random, loss.qvalue_network_params
    tp = loss.target_qvalue_network_params
    alpha = loss.log_alpha.detach().exp()
    a_next = _dist(actor, nobs).rsample()
    q_next = torch.minimum(_q(tp, 0, nobs, a_next), _q(tp, 1, nobs, a_next))
    y = nxt["reward"].squeeze(-1) + 0.9 * (~nxt["terminated"].squeeze(-1)) * q_next
    d_now, d_next = _dist(actor, obs), _dist(actor, nobs)
    a_now = d_now.rsample((k,))
    lp_now = d_now.log_prob(a_now).sum(-1)
    a_nn = d_next.rsample((k,))
    lp_nn = d_next.log_prob(a_nn).sum(-1)
    uni = torch.empty_like(a_now).uniform_(-half_width, half_width)
    obs_k = obs.expand(k, B, OBS)
    gap = 0.0
    pred = torch.stack([_q(p, i, obs, act) for i in range(2)])
    for i in range(2):
        cat = torch.cat([_q(p, i, obs_k, uni) + ACT * math.log(2.0 * half_width),
                         _q(p, i, obs_k, a_now) - lp_now, _q(p, i, obs_k, a_nn) - lp_nn])
        gap = gap + 2.0 * torch.logsumexp(cat / 2.0, dim=0) - pred[i]
    gap = 5.0 * gap  # min_q_weight
    a_pi = d_now.rsample()
    lp_pi = d_now.log_prob(a_pi).sum(-1)
    q_pi = torch.minimum(_q(p, 0, obs, a_pi), _q(p, 1, obs, a_pi))
    ref = {"loss_qvalue": ((pred - y) ** 2).sum(0).mean(),
           "loss_actor": (alpha * lp_pi - q_pi).mean(),
           "loss_alpha": -(loss.log_alpha * (lp_pi - ACT)).mean(),
           "loss_actor_bc": (alpha * lp_pi - d_now.log_prob(act).sum(-1)).mean()}
    if lagrange:
        ap = loss.log_alpha_prime.exp()
        ref["loss_cql"] = (ap * (gap - 2 * 1.5)).mean()
        ref["loss_alpha_prime"] = -ap * (gap.mean() - 2 * 1.5) / 2
    else:
        ref["loss_cql"] = gap.mean()
    return ref


@pytest.mark.parametrize(("lagrange", "half_width"), [(False, 1.0), (True, 1.0), (False, 2.0)])
def test_cql_matches_the_reference(lagrange, half_width):
    torch.manual_seed(0)
    spec = types.SimpleNamespace(low=torch.full((ACT,), -half_width),
                                 high=torch.full((ACT,), half_width), shape=(ACT,))
    loss = CQLLoss(_stochastic_actor(), _critic(), loss_function="l2", gamma=0.9,
                   temperature=2.0, min_q_weight=5.0, num_random=4, alpha_init=0.5,
                   with_lagrange=lagrange, lagrange_thresh=1.5,
                   action_spec=spec if half_width != 1.0 else None)
    if lagrange:
        with torch.no_grad():
            loss.log_alpha_prime.fill_(0.4)
    td = _batch()
    torch.manual_seed(7)
    out = loss(td)
    ref = _cql_reference(loss, td, 7, lagrange=lagrange, half_width=half_width)
    for key, value in ref.items():
        torch.testing.assert_close(out[key], value, msg=key)
    if not lagrange:
        assert float(out["loss_alpha_prime"]) == 0.0


def test_cql_penalty_moves_only_the_critics_and_the_multiplier_only_alpha_prime():
    loss = CQLLoss(_stochastic_actor(), _critic(), with_lagrange=True, num_random=3)
    out = loss(_batch())
    actor = list(loss.actor_network.parameters())
    assert all(g is None for g in torch.autograd.grad(out["loss_cql"], actor,
                                                      allow_unused=True))
    critics = list(loss.qvalue_network_params.values(True, True))
    g = torch.autograd.grad(out["loss_alpha_prime"], critics + [loss.log_alpha_prime],
                            allow_unused=True)
    assert all(x is None for x in g[:-1]) and g[-1] is not None


def test_cql_behaviour_cloning_term_trains_the_actor_as_torchrls_and_can_be_left_out():
    # TorchRL's cql_offline.py trains on loss_actor_bc for its first steps: it has a gradient
    loss = CQLLoss(_stochastic_actor(), _critic(), num_random=3)
    out = loss(_batch())
    actor = list(loss.actor_network.parameters())
    assert any(g is not None and bool(g.abs().sum() > 0)
               for g in torch.autograd.grad(out["loss_actor_bc"], actor, allow_unused=True))
    critics = list(loss.qvalue_network_params.values(True, True))
    assert all(g is None for g in torch.autograd.grad(out["loss_actor_bc"], critics,
                                                      allow_unused=True))
    # an update step leaves it out when told: the actor's gradient is then loss_actor's alone
    terms = ["loss_actor", "loss_qvalue", "loss_cql", "loss_alpha", "loss_alpha_prime"]
    grads = {}
    for keys in (terms, None):
        torch.manual_seed(0)
        loss = CQLLoss(_stochastic_actor(), _critic(), num_random=3)
        params = [p for p in loss.parameters() if p.requires_grad]
        step = make_update_step(loss, torch.optim.SGD(params, lr=0.0), loss_keys=keys)
        torch.manual_seed(1)
        step(_batch())  # gradients are zeroed at the start of a step: they stay readable
        grads[keys is None] = [p.grad.clone() for p in loss.actor_network.parameters()]
    assert any(not torch.equal(a, b) for a, b in zip(grads[False], grads[True], strict=True))
    with pytest.raises(KeyError, match=r"loss_keys: \['loss_bc'\] not in the loss module"):
        make_update_step(loss, torch.optim.SGD(params, lr=0.0), loss_keys=["loss_bc"])(_batch())
    with pytest.raises(TypeError, match="loss_keys: expected a sequence of str"):
        make_update_step(loss, torch.optim.SGD(params, lr=0.0), loss_keys="loss_actor")
    with pytest.raises(ValueError, match="loss_keys: expected at least one entry"):
        make_update_step(loss, torch.optim.SGD(params, lr=0.0), loss_keys=[])


def test_cql_unknown_keyword_is_named():
    with pytest.raises(TypeError, match="alpha_inti"):
        CQLLoss(_stochastic_actor(), _critic(), alpha_inti=0.5)


def test_cql_max_q_backup_takes_the_best_of_the_next_actions():
    torch.manual_seed(0)
    loss = CQLLoss(_stochastic_actor(), _critic(), max_q_backup=True, num_random=5)
    nxt = _batch()["next"]
    torch.manual_seed(3)
    got = loss._next_value(nxt, loss.alpha)
    torch.manual_seed(3)
    acts = _dist(loss.actor_network, nxt["observation"]).rsample((5,))
    tp = loss.target_qvalue_network_params
    nobs = nxt["observation"].expand(5, B, OBS)
    ref = torch.minimum(_q(tp, 0, nobs, acts), _q(tp, 1, nobs, acts)).amax(0)
    torch.testing.assert_close(got, ref)


def test_td3bc_matches_the_reference():
    torch.manual_seed(0)
    low, high = -torch.ones(ACT), torch.ones(ACT)
    loss = TD3BCLoss(_deterministic_actor(), _critic(), bounds=(low, high), alpha=2.5,
                     loss_function="l2", gamma=0.9)
    td = _batch()
    torch.manual_seed(11)
    out = loss(td)
    torch.manual_seed(11)
    obs, act, nxt = td["observation"], td["action"], td["next"]
    mu_next = loss.target_actor_network.module(nxt["observation"]).detach()
    smoothed = (mu_next + (torch.randn_like(mu_next) * 0.2).clamp(-0.5, 0.5)).clamp(-1, 1)
    tp, p = loss.target_qvalue_network_params, loss.qvalue_network_params
    q_next = torch.minimum(_q(tp, 0, nxt["observation"], smoothed),
                           _q(tp, 1, nxt["observation"], smoothed))
    y = nxt["reward"].squeeze(-1) + 0.9 * (~nxt["terminated"].squeeze(-1)) * q_next
    pred = torch.stack([_q(p, i, obs, act) for i in range(2)])
    mu = loss.actor_network.module(obs)
    q1 = _q(p, 0, obs, mu)
    lmbd = 2.5 / q1.abs().mean()
    torch.testing.assert_close(out["loss_qvalue"], ((pred - y) ** 2).sum(0).mean())
    torch.testing.assert_close(out["loss_actor"],
                               -lmbd * q1.mean() + torch.nn.functional.mse_loss(mu, act))
    torch.testing.assert_close(out["lmbd"], lmbd.detach())
    torch.testing.assert_close(out["bc_loss"], torch.nn.functional.mse_loss(mu, act).detach())


def test_td3bc_alpha_zero_is_behaviour_cloning():
    loss = TD3BCLoss(_deterministic_actor(), _critic(), bounds=(-1.0, 1.0), alpha=0.0)
    td = _batch()
    out = loss(td)
    mu = loss.actor_network.module(td["observation"])
    torch.testing.assert_close(out["loss_actor"], torch.nn.functional.mse_loss(mu, td["action"]))
    with pytest.raises(ValueError, match="alpha"):
        TD3BCLoss(_deterministic_actor(), _critic(), bounds=(-1.0, 1.0), alpha=-1.0)


CASES = {
    "IQLLoss": lambda: IQLLoss(_stochastic_actor(), _critic(), _value(), expectile=0.7),
    "CQLLoss": lambda: CQLLoss(_stochastic_actor(), _critic(), num_random=3,
                               with_lagrange=True),
    "TD3BCLoss": lambda: TD3BCLoss(_deterministic_actor(), _critic(), bounds=(-1.0, 1.0)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_offline_loss_runs_through_the_update_step(name):
    torch.manual_seed(0)
    loss = CASES[name]()
    trained = [p for p in loss.parameters() if p.requires_grad]
    before = [p.detach().clone() for p in trained]
    targets = [t for _, ts in loss.target_pairs() for t in ts]
    targets_before = [t.detach().clone() for t in targets]
    step = make_update_step(loss, torch.optim.Adam(trained, lr=1e-2),
                            target_updater=SoftUpdate(loss, tau=0.5), max_grad_norm=10.0)
    out = step(_batch())
    assert torch.isfinite(out["grad_norm"]) and not out["grad_norm"].requires_grad
    assert all(not bool(torch.equal(a, b.detach())) for a, b in zip(before, trained, strict=True))
    assert any(not bool(torch.equal(a, b)) for a, b in zip(targets_before, targets, strict=True))
