"""SACLoss: outputs, gradient routing, the soft Q target by hand, alpha, a short training run."""

from __future__ import annotations

import math

import pytest
import torch
from rl_objectives import HardUpdate, MissingKeyError, SACLoss, SoftUpdate
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)
from torch import distributions as D

OBS, ACT = 3, 1  # Pendulum-v1: (cos, sin, theta dot) -> torque in [-2, 2]


class _Q(torch.nn.Module):
    def __init__(self, obs=OBS, act=ACT, hidden=16):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(obs + act, hidden), torch.nn.Tanh(),
                                       torch.nn.Linear(hidden, 1))

    def forward(self, observation, action):
        return self.net(torch.cat([observation, action], -1))


def _tanh_normal(loc, scale):
    """A TanhNormal scaled to Pendulum's [-2, 2] torque range."""
    base = D.Independent(D.Normal(loc, scale), 1)
    return D.TransformedDistribution(
        base, [D.TanhTransform(cache_size=1), D.AffineTransform(0.0, 2.0, cache_size=1)]
    )


def _actor(distribution_class=_tanh_normal):
    net = torch.nn.Sequential(torch.nn.Linear(OBS, 16), torch.nn.Tanh(),
                              torch.nn.Linear(16, 2 * ACT), NormalParamExtractor())
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=distribution_class),
    )


def _qvalue():
    return TensorDictModule(_Q(), ["observation", "action"], ["state_action_value"])


def _value():
    return TensorDictModule(torch.nn.Linear(OBS, 1), ["observation"], ["state_value"])


def _batch(*batch, seed=0):
    """Random Pendulum-like transitions."""
    g = torch.Generator().manual_seed(seed)
    theta = (torch.rand(*batch, 1, generator=g) * 2 - 1) * math.pi
    speed = (torch.rand(*batch, 1, generator=g) * 2 - 1) * 8
    action = (torch.rand(*batch, ACT, generator=g) * 2 - 1) * 2
    obs = torch.cat([theta.cos(), theta.sin(), speed], -1)
    next_obs = obs + 0.05 * torch.randn(obs.shape, generator=g)
    done = torch.rand(*batch, 1, generator=g) < 0.2
    return TensorDict({
        "observation": obs, "action": action,
        "next": {"observation": next_obs,
                 "reward": -(theta**2 + 0.1 * speed**2 + 0.001 * action**2),
                 "done": done, "terminated": done & (torch.rand(*batch, 1, generator=g) < 0.5)},
    }, list(batch))


@pytest.mark.parametrize("batch", [(6,), (3, 4)])
@pytest.mark.parametrize("with_value", [False, True])
def test_sac_outputs_on_flat_and_time_batches(batch, with_value):
    loss = SACLoss(_actor(), _qvalue(), _value() if with_value else None)
    td = _batch(*batch)
    out = loss(td)
    expected = {"alpha", "entropy", "loss_actor", "loss_alpha", "loss_qvalue"}
    assert set(out.keys()) == expected | ({"loss_value"} if with_value else set())
    assert all(v.shape == () and torch.isfinite(v) for v in out.values())
    assert td["td_error"].shape == batch and torch.all(td["td_error"] >= 0)
    assert set(td.keys()) == {"observation", "action", "next", "td_error"}  # no leftovers
    assert loss.target_entropy == -ACT
    weights = loss.qvalue_network_params["module", "net", "0", "weight"]
    assert weights.shape[0] == 2 and not torch.equal(weights[0], weights[1])


def _grads(loss, term, groups):
    out = loss(_batch(5))
    flat = [p for params in groups.values() for p in params]
    grads = torch.autograd.grad(out[term], flat, allow_unused=True)
    reached, i = set(), 0
    for name, params in groups.items():
        if any(g is not None and g.abs().sum() > 0 for g in grads[i:i + len(params)]):
            reached.add(name)
        i += len(params)
    return reached


def test_sac_gradients_reach_only_the_parameters_of_each_term():
    torch.manual_seed(0)
    loss = SACLoss(_actor(), _qvalue(), _value(), delay_actor=True)
    groups = {"actor": list(loss.actor_network.parameters()),
              "qvalue": list(loss.qvalue_network_params.parameters()),
              "value": list(loss.value_network.parameters()),
              "alpha": [loss.log_alpha]}
    assert _grads(loss, "loss_actor", groups) == {"actor"}
    assert _grads(loss, "loss_qvalue", groups) == {"qvalue"}
    assert _grads(loss, "loss_alpha", groups) == {"alpha"}
    assert _grads(loss, "loss_value", groups) == {"value"}
    targets = [loss.target_actor_network, loss.target_qvalue_network_params,
               loss.target_value_network]
    assert not any(p.requires_grad for t in targets for p in t.parameters())


class _PointMass(D.Distribution):
    """``rsample`` returns ``loc``; ``log_prob(a) = -|a|^2``: a deterministic actor."""

    has_rsample = True
    arg_constraints: dict = {}

    def __init__(self, loc):
        self.loc = loc
        super().__init__(loc.shape[:-1], loc.shape[-1:], validate_args=False)

    def rsample(self, sample_shape=()):
        return self.loc.expand(*sample_shape, *self.loc.shape)

    def log_prob(self, value):
        return -(value**2).sum(-1)


def test_sac_q_target_equals_a_hand_computation():
    policy = torch.nn.Linear(2, 1, bias=False)  # a' = s'_0 - s'_1
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(policy, ["observation"], ["loc"]),
        ProbabilisticTensorDictModule(["loc"], ["action"], distribution_class=_PointMass))
    qvalue = TensorDictModule(_LinearQ(), ["observation", "action"], ["state_action_value"])
    loss = SACLoss(actor, qvalue, loss_function="l2", alpha_init=0.5, fixed_alpha=True,
                   gamma=0.9)
    with torch.no_grad():
        policy.weight.copy_(torch.tensor([[1.0, -1.0]]))
        loss.qvalue_network_params["module", "net", "weight"].copy_(
            torch.tensor([[[1.0, 2.0, 3.0]], [[2.0, 1.0, -1.0]]]))  # Q_i = w_i . [s, a]
        loss.qvalue_network_params["module", "net", "bias"].zero_()
    HardUpdate(loss, value_network_update_interval=1).step()  # targets = online
    td = TensorDict({
        "observation": torch.zeros(3, 2), "action": torch.zeros(3, 1),  # Q_i(s, a) = 0
        "next": {"observation": torch.tensor([[1.0, 0.0], [0.0, 1.0], [2.0, 1.0]]),
                 "reward": torch.tensor([[1.0], [2.0], [3.0]]),
                 "done": torch.tensor([[False], [True], [True]]),  # 2: terminated, 3: truncated
                 "terminated": torch.tensor([[False], [True], [False]])}}, [3])
    out = loss(td)
    # a' = [1, -1, 1], log pi' = -1; Q0' = [4, -1, 7], Q1' = [1, 2, 4], min = [1, -1, 4]
    soft_value = torch.tensor([1.0, -1.0, 4.0]) - 0.5 * -1.0
    target = torch.tensor([1.0, 2.0, 3.0]) + 0.9 * torch.tensor([1.0, 0.0, 1.0]) * soft_value
    torch.testing.assert_close(target, torch.tensor([2.35, 2.0, 7.05]))
    torch.testing.assert_close(td["td_error"], target.abs())
    torch.testing.assert_close(out["loss_qvalue"], 2 * target.pow(2).mean())


class _LinearQ(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(3, 1)

    def forward(self, observation, action):
        return self.net(torch.cat([observation, action], -1))


@pytest.mark.parametrize("target_entropy, grows", [(5.0, True), (-5.0, False)])
def test_sac_alpha_moves_towards_the_target_entropy(target_entropy, grows):
    loss = SACLoss(_actor(), _qvalue(), alpha_init=0.2, target_entropy=target_entropy)
    before = loss.alpha.item()
    opt = torch.optim.SGD([loss.log_alpha], lr=0.1)
    loss(_batch(16))["loss_alpha"].backward()
    opt.step()
    assert (loss.alpha.item() > before) == grows


def test_sac_alpha_bounds_and_fixed_alpha():
    bounded = SACLoss(_actor(), _qvalue(), alpha_init=0.5, max_alpha=0.5, min_alpha=0.1,
                      target_entropy=10.0)
    opt = torch.optim.SGD([bounded.log_alpha], lr=1.0)
    bounded(_batch(8))["loss_alpha"].backward()
    opt.step()
    assert bounded(_batch(8))["alpha"].item() == pytest.approx(0.5)
    fixed = SACLoss(_actor(), _qvalue(), alpha_init=0.3, fixed_alpha=True)
    assert "log_alpha" not in dict(fixed.named_parameters())
    assert not fixed(_batch(4))["loss_alpha"].requires_grad


def test_sac_trains_on_pendulum_like_data_without_nan():
    torch.manual_seed(0)
    loss = SACLoss(_actor(), _qvalue(), delay_actor=True, alpha_init=1.0)
    loss.make_value_estimator(gamma=0.99)
    updater = SoftUpdate(loss, tau=0.1)
    target_before = loss.target_qvalue_network_params.clone()
    optimiser = torch.optim.Adam([{"params": loss.actor_network.parameters()},
                                  {"params": loss.qvalue_network_params.parameters()},
                                  {"params": [loss.log_alpha]}], lr=3e-3)
    first = None
    for step in range(12):
        out = loss(_batch(128, seed=step % 3))
        total = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
        assert all(torch.isfinite(v) for v in out.values()), out
        optimiser.zero_grad()
        total.backward()
        optimiser.step()
        updater.step()
        first = out["loss_qvalue"].item() if first is None else first
    assert out["loss_qvalue"].item() < first  # the critics fit the soft targets
    assert all(torch.isfinite(p).all() for p in loss.parameters())
    after = loss.target_qvalue_network_params
    for key, old in target_before.items(include_nested=True, leaves_only=True):
        assert not torch.equal(after[key], old), key  # SoftUpdate moved every target


def test_sac_set_keys_and_bad_arguments():
    loss = SACLoss(_actor(), _qvalue()).set_keys(reward="rew", priority="prio")
    td = _batch(4)
    with pytest.raises(MissingKeyError, match="'rew'"):
        loss(td)
    td.rename_key_(("next", "reward"), ("next", "rew"))
    loss(td)
    assert td["prio"].shape == (4,)
    with pytest.raises(ValueError, match="num_qvalue_nets"):
        SACLoss(_actor(), _qvalue(), num_qvalue_nets=0)
    with pytest.raises(ValueError, match="min_alpha"):
        SACLoss(_actor(), _qvalue(), min_alpha=1.0, max_alpha=0.5)
    with pytest.raises(TypeError, match="actor_network"):
        SACLoss(_qvalue(), _qvalue())
    with pytest.raises(NotImplementedError, match="TD"):
        SACLoss(_actor(), _qvalue()).make_value_estimator("GAE")
