"""DiscreteSACLoss and DistributionalDQNLoss (C51) against hand-written references."""

from __future__ import annotations

import math

import pytest
import torch
from rl_objectives import DiscreteSACLoss, DistributionalDQNLoss, MissingKeyError
from rl_objectives._distributional_dqn import project_distribution
from tensordict import TensorDict
from tensordict.nn import (
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

OBS, N_ACT, B = 4, 3, 5


def _actor():
    return ProbabilisticTensorDictSequential(
        TensorDictModule(torch.nn.Linear(OBS, N_ACT), ["observation"], ["logits"]),
        ProbabilisticTensorDictModule(["logits"], ["action"],
                                      distribution_class=torch.distributions.Categorical),
    )


def _q():
    return TensorDictModule(torch.nn.Linear(OBS, N_ACT), ["observation"], ["action_value"])


def _batch(seed=0, one_hot=False):
    g = torch.Generator().manual_seed(seed)
    action = torch.randint(N_ACT, (B,), generator=g)
    if one_hot:
        action = torch.nn.functional.one_hot(action, N_ACT)
    return TensorDict({
        "observation": torch.randn(B, OBS, generator=g), "action": action,
        "next": {"observation": torch.randn(B, OBS, generator=g),
                 "reward": torch.randn(B, 1, generator=g),
                 "done": torch.tensor([[False], [True], [False], [True], [False]]),
                 "terminated": torch.tensor([[False], [True], [False], [False], [False]])},
    }, [B])


def _lin(params, i, obs):
    return obs @ params["module", "weight"][i].T + params["module", "bias"][i]


@pytest.mark.parametrize("one_hot", [False, True])
def test_discrete_sac_matches_the_reference(one_hot):
    torch.manual_seed(0)
    loss = DiscreteSACLoss(_actor(), _q(), action_space="one-hot" if one_hot else "categorical",
                           num_actions=N_ACT, alpha_init=0.5, loss_function="l2", gamma=0.9)
    td = _batch(one_hot=one_hot)
    out = loss(td)
    lin = loss.actor_network.module[0].module
    nxt, obs = td["next"], td["observation"]
    logp_next = torch.log_softmax(lin(nxt["observation"]), -1)
    tp, p = loss.target_qvalue_network_params, loss.qvalue_network_params
    q_next = torch.minimum(_lin(tp, 0, nxt["observation"]), _lin(tp, 1, nxt["observation"]))
    v_next = (logp_next.exp() * (q_next - 0.5 * logp_next)).sum(-1)
    y = nxt["reward"].squeeze(-1) + 0.9 * (~nxt["terminated"].squeeze(-1)) * v_next
    index = td["action"].argmax(-1) if one_hot else td["action"]
    q_all = torch.stack([_lin(p, i, obs) for i in range(2)])  # [2, B, n]
    pred = q_all.gather(-1, index.expand(2, B).unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out["loss_qvalue"], ((pred - y) ** 2).sum(0).mean())
    logp = torch.log_softmax(lin(obs), -1)
    actor_ref = (logp.exp() * (0.5 * logp - q_all.amin(0))).sum(-1).mean()
    torch.testing.assert_close(out["loss_actor"], actor_ref)
    entropy = -(logp.exp() * logp).sum(-1)
    target_entropy = 0.98 * math.log(N_ACT)
    assert loss.target_entropy == pytest.approx(target_entropy)
    torch.testing.assert_close(out["entropy"], entropy.mean())
    torch.testing.assert_close(out["loss_alpha"],
                               -(math.log(0.5) * (-entropy + target_entropy)).mean())


def test_discrete_sac_terms_move_only_their_parameters_and_learn_n_from_the_batch():
    loss = DiscreteSACLoss(_actor(), _q(), action_space="categorical")
    assert loss.target_entropy is None
    groups = {"actor": list(loss.actor_network.parameters()),
              "critic": [loss.qvalue_network_params[k] for k in
                         loss.qvalue_network_params.keys(True, True)],
              "alpha": [loss.log_alpha]}
    owner = {"loss_actor": "actor", "loss_qvalue": "critic", "loss_alpha": "alpha"}
    for key, name in owner.items():
        loss.zero_grad(set_to_none=True)
        for p in groups["critic"]:
            p.grad = None
        loss(_batch())[key].backward()
        for group, params in groups.items():
            got = [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in params]
            assert all(got) if group == name else not any(got), (key, group)
    assert loss.target_entropy == pytest.approx(0.98 * math.log(N_ACT))


def _project_loop(probs, reward, discount, support):
    """C51's Algorithm 1, one atom at a time."""
    n = len(support)
    v_min, v_max = support[0].item(), support[-1].item()
    dz = (v_max - v_min) / (n - 1)
    out = torch.zeros_like(probs)
    for row in range(probs.shape[0]):
        for j in range(n):
            tz = min(max(reward[row].item() + discount[row].item() * support[j].item(), v_min),
                     v_max)
            b = (tz - v_min) / dz
            lo, up = math.floor(b), math.ceil(b)
            if lo == up:
                out[row, lo] += probs[row, j]
            else:
                out[row, lo] += probs[row, j] * (up - b)
                out[row, up] += probs[row, j] * (b - lo)
    return out


def test_c51_projection_at_the_support_edges():
    support = torch.tensor([-1.0, 0.0, 1.0])
    probs = torch.tensor([[0.2, 0.3, 0.5]] * 5)
    reward = torch.tensor([5.0, -5.0, 0.5, 0.0, 0.0])
    discount = torch.tensor([0.9, 0.9, 0.0, 1.0, 0.0])
    m = project_distribution(probs, reward, discount, support)
    expected = torch.tensor([
        [0.0, 0.0, 1.0],    # beyond v_max: all the mass on the top atom
        [1.0, 0.0, 0.0],    # beyond v_min: all on the bottom atom
        [0.0, 0.5, 0.5],    # Tz = 0.5 everywhere: split between 0 and 1
        [0.2, 0.3, 0.5],    # Tz = z: b an integer, the mass stays (l == u)
        [0.0, 1.0, 0.0],    # terminal with r = 0: all on z = 0
    ])
    torch.testing.assert_close(m, expected)
    g = torch.Generator().manual_seed(0)
    support = torch.linspace(-10, 10, 51)
    probs = torch.softmax(torch.randn(64, 51, generator=g), -1)
    reward = torch.randn(64, generator=g) * 6
    discount = torch.rand(64, generator=g).round() * 0.99
    m = project_distribution(probs, reward, discount, support)
    torch.testing.assert_close(m, _project_loop(probs, reward, discount, support))
    torch.testing.assert_close(m.sum(-1), torch.ones(64))


def _c51_net(atoms=5):
    net = torch.nn.Sequential(torch.nn.Linear(OBS, atoms * 2), torch.nn.Unflatten(-1, (atoms, 2)),
                              torch.nn.LogSoftmax(dim=-2))
    module = TensorDictModule(net, ["observation"], ["action_value"])
    module.support = torch.linspace(-2, 2, atoms)
    return module


def test_c51_loss_matches_the_reference_and_moves_only_the_online_net():
    torch.manual_seed(0)
    loss = DistributionalDQNLoss(_c51_net(), gamma=0.9)
    td = _batch()
    td["action"] = td["action"] % 2
    td["next", "steps_to_next_obs"] = torch.tensor([1, 1, 2, 3, 1])
    out = loss(td)
    nxt = td["next"]
    probs_next = loss.target_value_network.module(nxt["observation"]).exp()  # [B, N, 2]
    best = (probs_next * loss.support[:, None]).sum(-2).argmax(-1)
    p_best = probs_next[torch.arange(B), :, best]
    discount = 0.9 ** nxt["steps_to_next_obs"] * (~nxt["terminated"].squeeze(-1))
    m = _project_loop(p_best, nxt["reward"].squeeze(-1), discount, loss.support)
    logp = loss.value_network.module(td["observation"])[torch.arange(B), :, td["action"]]
    per_sample = -(m * logp).sum(-1)
    torch.testing.assert_close(out["loss"], per_sample.mean())
    torch.testing.assert_close(td["td_error"], per_sample.detach())
    out["loss"].backward()
    assert all(p.grad is not None for p in loss.value_network.parameters())
    assert all(p.grad is None for p in loss.target_value_network.parameters())


@pytest.mark.parametrize("space", ["mult-one-hot", "binary"])
def test_c51_several_choices_match_the_per_choice_reference(space):
    torch.manual_seed(0)
    blocks = [2, 2] if space == "binary" else [2, 3]
    # what the loss reads of rl_modules.DistributionalQValueActor: support, action_space
    # and action_blocks (each choice's columns), on log-probabilities [B, N, sum(blocks)]
    net = torch.nn.Sequential(torch.nn.Linear(OBS, 5 * sum(blocks)),
                              torch.nn.Unflatten(-1, (5, sum(blocks))),
                              torch.nn.LogSoftmax(dim=-2))
    actor = TensorDictModule(net, ["observation"], ["action_value"])
    actor.support, actor.action_space, actor.action_blocks = (
        torch.linspace(-2, 2, 5), space, blocks)
    support = actor.support
    loss = DistributionalDQNLoss(actor, gamma=0.9)
    td = _batch()
    g = torch.Generator().manual_seed(1)
    index = torch.stack([torch.randint(n, (B,), generator=g) for n in blocks], -1)  # [B, K]
    td["action"] = (index.to(torch.int8) if space == "binary" else torch.cat(
        [torch.nn.functional.one_hot(index[:, k], n) for k, n in enumerate(blocks)], -1))
    out = loss(td)
    nxt, per_choice, start = td["next"], [], 0
    probs_all = loss.target_value_network(nxt.copy())["action_value"].exp()
    logp_all = loss.value_network(td.copy())["action_value"]
    discount = 0.9 * (~nxt["terminated"].squeeze(-1))
    for k, n in enumerate(blocks):  # each choice: C51 on its own block
        probs = probs_all[..., start:start + n]
        best = (probs * support[:, None]).sum(-2).argmax(-1)
        m = _project_loop(probs[torch.arange(B), :, best], nxt["reward"].squeeze(-1),
                          discount, support)
        logp = logp_all[torch.arange(B), :, start + index[:, k]]
        per_choice.append(-(m * logp).sum(-1))
        start += n
    per_sample = torch.stack(per_choice, -1).mean(-1)
    torch.testing.assert_close(out["loss"], per_sample.mean())
    torch.testing.assert_close(td["td_error"], per_sample.detach())
    out["loss"].backward()
    assert all(p.grad is not None for p in loss.value_network.parameters())
    assert all(p.grad is None for p in loss.target_value_network.parameters())


def test_c51_bad_input():
    plain = TensorDictModule(torch.nn.Linear(OBS, 2), ["observation"], ["action_value"])
    with pytest.raises(TypeError, match="support"):
        DistributionalDQNLoss(plain)
    uneven = _c51_net()
    uneven.support = torch.tensor([0.0, 1.0, 3.0, 4.0, 5.0])
    with pytest.raises(ValueError, match="evenly spaced"):
        DistributionalDQNLoss(uneven)
    td = _batch()
    del td["action"]
    with pytest.raises(MissingKeyError, match="DistributionalDQNLoss needs the key 'action'"):
        DistributionalDQNLoss(_c51_net())(td)
    # a support set as a plain attribute stays behind on .to(device): named, not a device clash
    stranded = DistributionalDQNLoss(_c51_net())
    stranded.value_network.support = stranded.support.to("meta")
    with pytest.raises(ValueError, match=r"support is on meta.*register the support as a buffer"):
        stranded(_batch())
    with pytest.raises(ValueError, match="action_space"):
        DiscreteSACLoss(_actor(), _q(), action_space="binary")
