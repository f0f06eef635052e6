"""Estimator modules and losses on small tensordict.nn actors and critics."""

from __future__ import annotations

import pytest
import torch
from rl_objectives import (
    GAE,
    A2CLoss,
    ClipPPOLoss,
    DQNLoss,
    HardUpdate,
    KLPENPPOLoss,
    MissingKeyError,
    MultiAgentGAE,
    PPOLoss,
    SoftUpdate,
    compile_with_warmup,
)
from rl_objectives.value import functional as F
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
    TensorDictSequential,
)


def _actor():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor())
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(
            ["loc", "scale"], ["action"], distribution_class=torch.distributions.Normal,
            return_log_prob=True,
        ),
    )


def _critic():
    return TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])


def _rollout(b=4, t=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(b, t, 1, generator=g) < 0.2
    return TensorDict(
        {
            "observation": torch.randn(b, t, 3, generator=g),
            "action": torch.randn(b, t, 2, generator=g),
            "sample_log_prob": torch.randn(b, t, generator=g),
            "next": {
                "observation": torch.randn(b, t, 3, generator=g),
                "reward": torch.randn(b, t, 1, generator=g),
                "done": done,
                "terminated": done & (torch.rand(b, t, 1, generator=g) < 0.5),
            },
        },
        [b, t],
    )


def test_gae_module_runs_critic_and_matches_functional():
    td, critic = _rollout(), _critic()
    GAE(gamma=0.9, lmbda=0.8, value_network=critic)(td)
    adv, target = F.generalized_advantage_estimate(
        0.9, 0.8, td["state_value"], td["next", "state_value"], td["next", "reward"],
        td["next", "done"], td["next", "terminated"],
    )
    torch.testing.assert_close(td["advantage"], adv)
    torch.testing.assert_close(td["value_target"], target)
    assert not td["advantage"].requires_grad


def _chained_rollout(b=3, t=20, seed=1):
    """A rollout as a collector writes it: ``("next", "observation")`` at ``t`` is the root
    observation at ``t + 1``, except after a done (the final observation, then a reset)."""
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(b, t, 1, generator=g) < 0.15
    obs = torch.randn(b, t + 1, 3, generator=g)
    nxt = obs[:, 1:].clone()
    nxt[done.squeeze(-1)] = torch.randn(int(done.sum()), 3, generator=g)  # final observations
    return TensorDict({
        "observation": obs[:, :-1],
        "next": {"observation": nxt, "reward": torch.randn(b, t, 1, generator=g),
                 "done": done, "terminated": done & (torch.rand(b, t, 1, generator=g) < 0.5)},
    }, [b, t])  # fmt: skip


@pytest.mark.parametrize("time_dim", [None, 0])
def test_shifted_gae_equals_two_critic_passes_and_runs_the_critic_on_fewer_rows(time_dim):
    torch.manual_seed(0)
    critic = _critic()
    rows = []
    critic.module.register_forward_hook(lambda m, a, o: rows.append(a[0].shape[:-1].numel()))
    td = _chained_rollout()
    if time_dim == 0:  # time first: [T, B]
        td = td.transpose(0, 1).contiguous()
    out = {}
    for shifted in (False, True):
        rows.clear()
        gae = GAE(gamma=0.97, lmbda=0.9, value_network=critic, shifted=shifted, time_dim=time_dim)
        out[shifted] = (gae(td.clone()), sum(rows))
    (plain, plain_rows), (shift, shift_rows) = out[False], out[True]
    for key in ("advantage", "value_target", ("next", "state_value")):
        torch.testing.assert_close(shift[key], plain[key], rtol=0, atol=1e-6)
    dones, envs = int(td["next", "done"].sum()), 3
    assert plain_rows == 2 * td.numel()
    time = 1 if time_dim is None else time_dim
    last_done = int(td["next", "done"].select(time, -1).sum())  # counted once
    assert shift_rows == td.numel() + envs + dones - last_done


def test_shifted_gae_reuses_root_values_a_collector_wrote():
    critic = _critic()
    rows = []
    critic.module.register_forward_hook(lambda m, a, o: rows.append(a[0].shape[:-1].numel()))
    td = _chained_rollout()
    plain = GAE(gamma=0.97, lmbda=0.9, value_network=critic)(td.clone())
    with_values = td.clone()
    with torch.no_grad():
        critic(with_values)  # the root values, as a collector running the critic writes them
    rows.clear()
    gae = GAE(gamma=0.97, lmbda=0.9, value_network=critic, shifted=True, skip_existing=True)
    out = gae(with_values)
    for key in ("advantage", "value_target", ("next", "state_value")):
        torch.testing.assert_close(out[key], plain[key], rtol=0, atol=1e-6)
    dones, last_done = int(td["next", "done"].sum()), int(td["next", "done"][:, -1].sum())
    assert sum(rows) == 3 + dones - last_done  # the last steps and the resets only


def test_shifted_gae_with_unchained_inputs_computes_every_next_value():
    critic = _critic()
    td = _rollout()  # next observations unrelated to the following root rows
    plain = GAE(gamma=0.9, lmbda=0.8, value_network=critic)(td.clone())
    shifted = GAE(gamma=0.9, lmbda=0.8, value_network=critic, shifted=True)(td.clone())
    torch.testing.assert_close(shifted["advantage"], plain["advantage"], rtol=0, atol=1e-6)
    with pytest.raises(TypeError, match="shifted: expected a bool, received 'yes'"):
        GAE(gamma=0.9, lmbda=0.8, value_network=critic, shifted="yes")


def test_set_keys_renames_and_missing_keys_are_named():
    td = _rollout()
    td.rename_key_(("next", "reward"), ("next", "rew"))
    gae = GAE(gamma=0.9, lmbda=0.8, value_network=_critic())
    with pytest.raises(MissingKeyError, match="'reward'"):
        gae(td)
    gae.set_keys(reward="rew", advantage="adv")
    assert gae(td)["adv"].shape == (4, 12, 1)
    with pytest.raises(ValueError, match="not a key of GAE"):
        gae.set_keys(rewards="x")


def test_multi_agent_gae_keeps_agent_dim_and_equals_per_agent_gae():
    td = _rollout()
    values = torch.randn(4, 12, 3, 1)
    next_values = torch.randn(4, 12, 3, 1)
    td["agents", "state_value"] = values
    td["next", "agents", "state_value"] = next_values
    MultiAgentGAE(gamma=0.9, lmbda=0.8)(td)
    assert td["agents", "advantage"].shape == (4, 12, 3, 1)
    for agent in range(3):
        adv, _ = F.generalized_advantage_estimate(
            0.9, 0.8, values[:, :, agent], next_values[:, :, agent], td["next", "reward"],
            td["next", "done"], td["next", "terminated"],
        )
        torch.testing.assert_close(td["agents", "advantage"][:, :, agent], adv)


@pytest.mark.parametrize("cls", [PPOLoss, ClipPPOLoss, KLPENPPOLoss, A2CLoss])
def test_actor_critic_losses_outputs_and_gradients(cls):
    actor, critic = _actor(), _critic()
    loss = cls(actor, critic, normalize_advantage=True)
    td = _rollout()
    out = loss(td)
    expected = {"loss_objective", "loss_critic", "loss_entropy", "entropy", "explained_variance"}
    if cls is not A2CLoss:
        expected |= {"ESS", "kl_approx"}
    if cls is ClipPPOLoss:
        expected.add("clip_fraction")
    assert expected <= set(out.keys())
    total = sum(v for k, v in out.items() if k.startswith("loss_"))
    total.backward()
    assert all(p.grad is not None for p in actor.parameters())
    assert all(p.grad is not None for p in critic.parameters())
    # the objective alone reaches the actor but not the critic: targets are detached
    critic.zero_grad()
    cls(actor, critic)(td)["loss_objective"].backward()
    assert all(p.grad is None or torch.all(p.grad == 0) for p in critic.parameters())


def _shared_trunk_nets(trunk: TensorDictModule):
    """Actor and critic starting with ``trunk`` (an ActorValueOperator's two operators)."""
    net = torch.nn.Sequential(torch.nn.Linear(8, 4), NormalParamExtractor())
    actor = ProbabilisticTensorDictSequential(
        trunk,
        TensorDictModule(net, ["hidden"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(
            ["loc", "scale"], ["action"], distribution_class=torch.distributions.Normal,
            return_log_prob=True,
        ),
    )
    head = TensorDictModule(torch.nn.Linear(8, 1), ["hidden"], ["state_value"])
    return actor, TensorDictSequential(trunk, head)


@pytest.mark.parametrize("cls", [ClipPPOLoss, A2CLoss])
def test_a_shared_trunk_runs_once_with_the_gradients_of_two_passes(cls):
    torch.manual_seed(0)
    trunk = TensorDictModule(torch.nn.Linear(3, 8), ["observation"], ["hidden"])
    actor, critic = _shared_trunk_nets(trunk)
    # The same parameters behind another wrapper object: the loss cannot tell they are
    # shared, and runs the trunk twice (the reference).
    twice = TensorDictModule(trunk.module, ["observation"], ["hidden"])
    calls = []
    trunk.module.register_forward_hook(lambda *_: calls.append(1))
    td = _rollout()  # advantage given: the value estimator (a third trunk pass) stays out
    td["advantage"], td["value_target"] = torch.randn(4, 12, 1), torch.randn(4, 12, 1)
    grads = []
    for critic_network in (critic, TensorDictSequential(twice, critic.module[1])):
        calls.clear()
        loss = cls(actor, critic_network, normalize_advantage=True, critic_coef=0.5)
        out = loss(td.copy())
        assert len(calls) == (1 if critic_network is critic else 2)
        actor.zero_grad(set_to_none=True)
        critic.zero_grad(set_to_none=True)
        sum(v for k, v in out.items() if k.startswith("loss_")).backward()
        params = (*actor.parameters(), *critic.module[1].parameters())
        grads.append([p.grad.clone() for p in params])
        grads[-1].append(out["loss_critic"].detach())
    for shared, reference in zip(*grads, strict=True):
        torch.testing.assert_close(shared, reference, rtol=1e-5, atol=1e-6)
    # the head is not a registered submodule: the loss's state_dict keys are unchanged
    keys = set(cls(actor, critic).state_dict())
    assert keys == set(cls(actor, TensorDictSequential(twice, critic.module[1])).state_dict())


def test_clip_fraction_and_on_policy_ratio():
    actor, critic = _actor(), _critic()
    td = _rollout()
    with torch.no_grad():
        td["sample_log_prob"] = actor.get_dist(td).log_prob(td["action"]).sum(-1)
    out = ClipPPOLoss(actor, critic)(td)
    assert out["clip_fraction"].item() == 0.0
    torch.testing.assert_close(out["ESS"], torch.tensor(1.0))
    torch.testing.assert_close(out["kl_approx"], torch.tensor(0.0))


@pytest.mark.parametrize("shift", [0.0, 60.0])  # 60: r^2 overflows float32, r does not
def test_ess_and_kl_approx_match_the_logsumexp_reference(shift):
    # off-policy weights: the diagnostics, computed from the ratio the objective has,
    # equal the float64 log-sum-exp forms (ESS over N, E[r - 1 - log r])
    actor, critic = _actor(), _critic()
    td = _rollout()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        log_prob = actor.get_dist(td).log_prob(td["action"]).sum(-1)
    log_weight = torch.randn(log_prob.shape, generator=g) * 1.5
    log_weight[0, 0] += shift
    td["sample_log_prob"] = log_prob - log_weight
    out = ClipPPOLoss(actor, critic)(td)
    lw = (log_prob - td["sample_log_prob"]).double().flatten()
    ess = (2 * lw.logsumexp(0) - (2 * lw).logsumexp(0)).exp() / lw.numel()
    torch.testing.assert_close(out["ESS"].double(), ess, rtol=1e-4, atol=1e-6)
    if shift == 0.0:
        kl = (lw.exp() - 1 - lw).mean()
        torch.testing.assert_close(out["kl_approx"].double(), kl, rtol=1e-4, atol=1e-6)
    assert 0.0 < out["ESS"].item() <= 1.0


def test_ppo_missing_key_error_names_the_key():
    td = _rollout().exclude("sample_log_prob")
    with pytest.raises(MissingKeyError, match="sample_log_prob"):
        ClipPPOLoss(_actor(), _critic())(td)


def _q():
    return TensorDictModule(torch.nn.Linear(3, 2), ["observation"], ["action_value"])


@pytest.mark.parametrize("double_dqn", [False, True])
def test_dqn_target_td_error_and_one_hot_equals_categorical(double_dqn):
    q = _q()
    g = torch.Generator().manual_seed(0)
    td = TensorDict({
        "observation": torch.randn(6, 3, generator=g),
        "action": torch.randint(0, 2, (6,), generator=g),
        "next": {"observation": torch.randn(6, 3, generator=g), "reward": torch.randn(6, 1),
                 "done": torch.tensor([True, False] * 3).unsqueeze(-1)},
    }, [6])
    loss = DQNLoss(q, gamma=0.9, double_dqn=double_dqn)
    out = loss(td)
    with torch.no_grad():
        qs = q.module(td["observation"]).gather(-1, td["action"].unsqueeze(-1)).squeeze(-1)
        nq = q.module(td["next", "observation"]).max(-1).values
        target = td["next", "reward"].squeeze(-1) + 0.9 * nq * (~td["next", "done"].squeeze(-1))
    torch.testing.assert_close(td["td_error"], (qs - target).abs())
    torch.testing.assert_close(out["loss"], ((qs - target) ** 2).mean())
    one_hot = td.clone()
    one_hot["action"] = torch.nn.functional.one_hot(td["action"], 2).float()
    torch.testing.assert_close(DQNLoss(q, gamma=0.9)(one_hot)["loss"], out["loss"])


def test_dqn_reduction_none_gives_per_sample_losses_to_weight():
    q = _q()
    g = torch.Generator().manual_seed(1)
    td = TensorDict({
        "observation": torch.randn(5, 3, generator=g),
        "action": torch.randint(0, 2, (5,), generator=g),
        "next": {"observation": torch.randn(5, 3, generator=g),
                 "reward": torch.randn(5, 1, generator=g),
                 "done": torch.zeros(5, 1, dtype=torch.bool)},
    }, [5])
    per_sample = DQNLoss(q, gamma=0.9, delay_value=False, reduction="none")(td)["loss"]
    assert per_sample.shape == (5,)
    torch.testing.assert_close(per_sample, td["td_error"] ** 2)  # l2: |TD error| squared
    torch.testing.assert_close(td["chosen_action_value"], q.module(td["observation"]).gather(
        -1, td["action"].unsqueeze(-1)).squeeze(-1).detach())
    mean = DQNLoss(q, gamma=0.9, delay_value=False)(td.clone())["loss"]
    total = DQNLoss(q, gamma=0.9, delay_value=False, reduction="sum")(td.clone())["loss"]
    torch.testing.assert_close(mean, per_sample.mean())
    torch.testing.assert_close(total, per_sample.sum())
    weight = torch.rand(5, generator=g)  # e.g. prioritized replay's priority_weight
    (per_sample * weight).mean().backward()
    assert q.module.weight.grad is not None
    with pytest.raises(ValueError, match="reduction"):
        DQNLoss(q, reduction="avg")


def test_soft_and_hard_updates_move_targets():
    loss = DQNLoss(_q())
    with torch.no_grad():
        for p in loss.value_network.parameters():
            p.add_(1.0)
    online = [p.clone() for p in loss.value_network.parameters()]
    before = [p.clone() for p in loss.target_value_network.parameters()]
    SoftUpdate(loss, tau=0.25).step()
    for o, b, t in zip(online, before, loss.target_value_network.parameters(), strict=True):
        torch.testing.assert_close(t, b + 0.25 * (o - b))
    hard = HardUpdate(loss, value_network_update_interval=2)
    hard.step()
    assert not torch.equal(next(loss.target_value_network.parameters()), online[0])
    hard.step()
    for o, t in zip(online, loss.target_value_network.parameters(), strict=True):
        torch.testing.assert_close(t, o)
    with pytest.raises(ValueError, match="tau must be in"):
        SoftUpdate(loss, tau=0.0)


def test_compiled_loss_equals_eager():
    # aot_eager, not inductor: see test_compiled_estimators_have_no_graph_break_and_match_eager
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    actor, critic = _actor(), _critic()
    loss = ClipPPOLoss(actor, critic)
    td = _rollout(2, 8)
    td["advantage"] = torch.randn(2, 8, 1)
    td["value_target"] = torch.randn(2, 8, 1)
    eager = loss(td.clone())
    compiled = compile_with_warmup(loss, warmup=1, backend="aot_eager")
    compiled(td.clone())
    got = compiled(td.clone())
    assert compiled.compiled is not None
    for key in ("loss_objective", "loss_critic", "loss_entropy", "ESS"):
        torch.testing.assert_close(got[key], eager[key])
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
