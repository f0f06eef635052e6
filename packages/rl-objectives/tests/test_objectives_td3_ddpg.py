"""TD3Loss and DDPGLoss against hand-written references on small fixed tensors."""

from __future__ import annotations

import types

import pytest
import torch
from rl_objectives import DDPGLoss, MissingKeyError, TD3Loss
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

OBS, ACT, B = 3, 2, 6


class Q(torch.nn.Module):
    """``Q(s, a) = W [s, a] + b``."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Linear(OBS + ACT, 1)

    def forward(self, obs, act):
        return self.net(torch.cat([obs, act], -1))


def _actor():
    return TensorDictModule(torch.nn.Linear(OBS, ACT), ["observation"], ["action"])


def _critic():
    return TensorDictModule(Q(), ["observation", "action"], ["state_action_value"])


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        "observation": torch.randn(B, OBS, generator=g),
        "action": torch.rand(B, ACT, generator=g) - 0.5,
        "next": {"observation": torch.randn(B, OBS, generator=g),
                 "reward": torch.randn(B, 1, generator=g),
                 "done": torch.tensor([[False], [True], [False], [False], [True], [False]]),
                 "terminated": torch.tensor([[False], [True], [False]] * 2)},
    }, [B])


def _linear_q(params, i, obs, act):
    """Critic ``i`` of stacked parameters, written out."""
    w, b = params["module", "net", "weight"][i], params["module", "net", "bias"][i]
    return (torch.cat([obs, act], -1) @ w.T + b).squeeze(-1)


def test_td3_smoothed_target_matches_the_reference():
    torch.manual_seed(0)
    low, high = torch.tensor([-0.3, -0.2]), torch.tensor([0.3, 0.25])
    loss = TD3Loss(_actor(), _critic(), bounds=(low, high), policy_noise=0.3,
                   noise_clip=0.1, loss_function="l2", gamma=0.9)
    td = _batch()
    torch.manual_seed(123)
    out = loss(td)
    # the target noise is the loss's only random draw: redraw it
    torch.manual_seed(123)
    nxt = td["next"]
    mu_next = loss.target_actor_network(nxt.select("observation"))["action"].detach()
    noise = (torch.randn_like(mu_next) * 0.3).clamp(-0.1, 0.1)
    smoothed = torch.maximum(torch.minimum(mu_next + noise, high), low)
    assert (smoothed == high).any() or (smoothed == low).any()  # the spec clip is exercised
    tp = loss.target_qvalue_network_params
    q_next = torch.minimum(*(_linear_q(tp, i, nxt["observation"], smoothed) for i in range(2)))
    y = nxt["reward"].squeeze(-1) + 0.9 * (~nxt["terminated"].squeeze(-1)) * q_next
    p = loss.qvalue_network_params
    pred = torch.stack([_linear_q(p, i, td["observation"], td["action"]) for i in range(2)])
    torch.testing.assert_close(out["loss_qvalue"], ((pred - y) ** 2).sum(0).mean())
    torch.testing.assert_close(td["td_error"], (pred - y).abs().amax(0))
    torch.testing.assert_close(out["target_value"], y.mean())
    mu = loss.actor_network(td.select("observation"))["action"]
    torch.testing.assert_close(out["loss_actor"], -_linear_q(p, 0, td["observation"], mu).mean())


def test_td3_noise_is_clipped_and_stays_in_the_box():
    loss = TD3Loss(_actor(), _critic(), bounds=(-1.0, 1.0), policy_noise=10.0, noise_clip=0.2)
    action = torch.zeros(1000, ACT)
    smoothed = loss.smoothed_target_action(action)
    assert smoothed.abs().max() <= 0.2 + 1e-7 and (smoothed.abs() == 0.2).float().mean() > 0.9
    near_edge = loss.smoothed_target_action(torch.full((100, ACT), 0.95))
    assert near_edge.max() <= 1.0
    spec = types.SimpleNamespace(space=types.SimpleNamespace(low=-2.0, high=2.0))
    assert TD3Loss(_actor(), _critic(), action_spec=spec).high.item() == 2.0
    batched = types.SimpleNamespace(low=torch.full((4, ACT), -3.0), high=torch.full((4, ACT), 3.0))
    assert TD3Loss(_actor(), _critic(), action_spec=batched).low.shape == (ACT,)


@pytest.mark.parametrize("cls", [TD3Loss, DDPGLoss])
def test_each_loss_term_moves_only_its_own_network(cls):
    kwargs = {"bounds": (-1.0, 1.0)} if cls is TD3Loss else {}
    loss = cls(_actor(), _critic(), **kwargs)
    out = loss(_batch())
    critic_name = "qvalue_network_params" if cls is TD3Loss else "value_network"
    critic = [p for n, p in loss.named_parameters() if n.startswith(critic_name)]
    actor = list(loss.actor_network.parameters())
    value_key = "loss_qvalue" if cls is TD3Loss else "loss_value"
    for key, moved, still in (("loss_actor", actor, critic), (value_key, critic, actor)):
        loss.zero_grad(set_to_none=True)
        out = loss(_batch())
        out[key].backward()
        assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in moved), key
        assert all(p.grad is None for p in still), key
    targets = [p for n, p in loss.named_parameters() if n.startswith("target_")]
    assert all(not p.requires_grad for p in targets)


def test_ddpg_matches_the_reference():
    torch.manual_seed(0)
    loss = DDPGLoss(_actor(), _critic(), delay_actor=True, gamma=0.8)
    td = _batch(1)
    out = loss(td)
    nxt = td["next"]
    tq = loss.target_value_network.module.net
    mu_next = loss.target_actor_network.module(nxt["observation"])
    y = nxt["reward"].squeeze(-1) + 0.8 * (~nxt["terminated"].squeeze(-1)) * tq(
        torch.cat([nxt["observation"], mu_next], -1)).squeeze(-1)
    q = loss.value_network.module.net
    pred = q(torch.cat([td["observation"], td["action"]], -1)).squeeze(-1)
    torch.testing.assert_close(out["loss_value"], ((pred - y) ** 2).mean())
    mu = loss.actor_network.module(td["observation"])
    torch.testing.assert_close(out["loss_actor"],
                               -q(torch.cat([td["observation"], mu], -1)).mean())
    torch.testing.assert_close(td["td_error"], (pred - y).abs().detach())
    assert set(out.keys()) == {"loss_actor", "loss_value", "pred_value", "target_value",
                               "pred_value_max", "target_value_max"}


def test_contract_errors_keys_and_estimator():
    with pytest.raises(ValueError, match="action_spec .*bounds"):
        TD3Loss(_actor(), _critic())
    with pytest.raises(ValueError, match="exactly one"):
        TD3Loss(_actor(), _critic(), bounds=(-1, 1), action_spec=object())
    with pytest.raises(TypeError, match="actor_network"):
        DDPGLoss(torch.nn.Linear(2, 2), _critic())
    with pytest.raises(ValueError, match="reduction"):
        DDPGLoss(_actor(), _critic(), reduction="max")
    for loss in (TD3Loss(_actor(), _critic(), bounds=(-1, 1)), DDPGLoss(_actor(), _critic())):
        td = _batch()
        del td["next", "reward"]
        with pytest.raises(MissingKeyError, match=f"{type(loss).__name__} needs the key 'reward'"):
            loss(td)
        td = _batch()
        td["next", "rew"] = td["next"].pop("reward")
        loss.set_keys(reward="rew")
        assert loss(td)["loss_actor"].shape == ()
        with pytest.raises(NotImplementedError, match="TD\\(0\\)"):
            loss.make_value_estimator("TD1")
        assert loss.make_value_estimator(gamma=0.5).gamma == 0.5
    per_sample = TD3Loss(_actor(), _critic(), bounds=(-1, 1), reduction="none")(_batch())
    assert per_sample["loss_qvalue"].shape == (B,) and per_sample["loss_actor"].shape == (B,)
