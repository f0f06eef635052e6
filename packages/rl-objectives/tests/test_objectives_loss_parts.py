"""TorchRL's per-part loss methods (``TD3Loss.value_loss``, ``CrossQLoss.qvalue_loss``, ...):
the same terms as ``forward`` on the same input and seed, TorchRL's metadata keys, and each
term's gradient reaching only its own parameters."""

from __future__ import annotations

import copy

import pytest
import torch
from rl_objectives import (
    CrossQLoss,
    DDPGLoss,
    DiscreteSACLoss,
    IQLLoss,
    MissingKeyError,
    SACLoss,
    TD3BCLoss,
    TD3Loss,
)
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

OBS, ACT, B = 3, 2, 8


class Q(torch.nn.Module):
    def __init__(self, norm: bool = False):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(OBS + ACT) if norm else torch.nn.Identity()
        self.net = torch.nn.Linear(OBS + ACT, 1)

    def forward(self, obs, act):
        return self.net(self.norm(torch.cat([obs, act], -1)))


def _critic(norm=False):
    return TensorDictModule(Q(norm), ["observation", "action"], ["state_action_value"])


def _deterministic_actor():
    net = torch.nn.Sequential(torch.nn.Linear(OBS, ACT), torch.nn.Tanh())
    return TensorDictModule(net, ["observation"], ["action"])


def _stochastic_actor():
    net = torch.nn.Sequential(torch.nn.Linear(OBS, 2 * ACT), NormalParamExtractor())
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=torch.distributions.Normal),
    )


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict({
        "observation": torch.randn(B, OBS, generator=g),
        "action": torch.rand(B, ACT, generator=g) * 2 - 1,
        "next": {"observation": torch.randn(B, OBS, generator=g),
                 "reward": torch.randn(B, 1, generator=g),
                 "done": (torch.arange(B) % 4 == 0).unsqueeze(-1),
                 "terminated": (torch.arange(B) % 8 == 0).unsqueeze(-1)},
    }, [B])


def _discrete_batch(seed=0):
    td = _batch(seed)
    td["action"] = torch.arange(B) % 3
    return td


def _discrete_sac():
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(torch.nn.Linear(OBS, 3), ["observation"], ["logits"]),
        ProbabilisticTensorDictModule(["logits"], ["action"],
                                      distribution_class=torch.distributions.Categorical),
    )
    q = TensorDictModule(torch.nn.Linear(OBS, 3), ["observation"], ["action_value"])
    return DiscreteSACLoss(actor, q, action_space="categorical")


def _td3():
    return TD3Loss(_deterministic_actor(), _critic(), bounds=(-1.0, 1.0), loss_function="l2")


def _td3bc():
    return TD3BCLoss(_deterministic_actor(), _critic(), bounds=(-1.0, 1.0), alpha=2.5)


def _ddpg():
    return DDPGLoss(_deterministic_actor(), _critic())


def _sac():
    value = TensorDictModule(torch.nn.Linear(OBS, 1), ["observation"], ["state_value"])
    return SACLoss(_stochastic_actor(), _critic(), value, delay_actor=True)


def _iql():
    value = TensorDictModule(torch.nn.Linear(OBS, 1), ["observation"], ["state_value"])
    return IQLLoss(_stochastic_actor(), _critic(), value, expectile=0.7, temperature=3.0)


def _crossq():
    return CrossQLoss(_stochastic_actor(), _critic(norm=True))


def _td3_parts(loss, td):
    q, q_meta = loss.value_loss(td)
    a, a_meta = loss.actor_loss(td)
    return {"loss_qvalue": q, "loss_actor": a}, {**q_meta, **a_meta}


def _td3bc_parts(loss, td):
    q, q_meta = loss.qvalue_loss(td)
    a, a_meta = loss.actor_loss(td)
    return {"loss_qvalue": q, "loss_actor": a}, {**q_meta, **a_meta}


def _ddpg_parts(loss, td):
    v, v_meta = loss.loss_value(td)
    a, a_meta = loss.loss_actor(td)
    return {"loss_value": v, "loss_actor": a}, {**v_meta, **a_meta}


def _sac_parts(loss, td):
    q, q_meta = loss.qvalue_v2_loss(td)
    a, a_meta = loss.actor_loss(td)
    losses = {"loss_qvalue": q, "loss_actor": a,
              "loss_alpha": loss.alpha_loss(a_meta["log_prob"]).mean()}
    if loss.value_network is not None:
        losses["loss_value"], v_meta = loss.value_loss(td)
        assert v_meta == {}
    return losses, {**q_meta, **a_meta}


def _discrete_sac_parts(loss, td):
    q, q_meta = loss.qvalue_loss(td)
    a, a_meta = loss.actor_loss(td)
    return {"loss_qvalue": q, "loss_actor": a,
            "loss_alpha": loss.alpha_loss(a_meta["log_prob"]).mean()}, {**q_meta, **a_meta}


def _iql_parts(loss, td):
    v, v_meta = loss.value_loss(td)
    a, a_meta = loss.actor_loss(td)
    q, q_meta = loss.qvalue_loss(td)
    assert v_meta == a_meta == {}
    return {"loss_value": v, "loss_actor": a, "loss_qvalue": q}, q_meta


def _crossq_parts(loss, td):
    q, q_meta = loss.qvalue_loss(td)
    a, a_meta = loss.actor_loss(td)
    return {"loss_qvalue": q, "loss_actor": a,
            "loss_alpha": loss.alpha_loss(log_prob=a_meta["log_prob"])}, {**q_meta, **a_meta}


# (builder, parts in forward's order, TorchRL's metadata keys, forward's entries that are
# the means of metadata entries)
CASES = {
    "TD3Loss": (_td3, _td3_parts,
                {"td_error", "next_state_value", "pred_value", "target_value",
                 "state_action_value_actor"},
                ("next_state_value", "pred_value", "target_value", "state_action_value_actor")),
    "TD3BCLoss": (_td3bc, _td3bc_parts,
                  {"td_error", "next_state_value", "pred_value", "target_value",
                   "state_action_value_actor", "bc_loss", "lmbd"},
                  ("next_state_value", "pred_value", "target_value", "state_action_value_actor",
                   "bc_loss", "lmbd")),
    "DDPGLoss": (_ddpg, _ddpg_parts,
                 {"td_error", "pred_value", "target_value", "pred_value_max",
                  "target_value_max"},
                 ("pred_value", "target_value")),
    "SACLoss": (_sac, _sac_parts, {"td_error", "log_prob"}, ()),
    "CrossQLoss": (_crossq, _crossq_parts, {"td_error", "log_prob"}, ()),
    "DiscreteSACLoss": (_discrete_sac, _discrete_sac_parts, {"td_error", "log_prob"}, ()),
    "IQLLoss": (_iql, _iql_parts, {"td_error"}, ()),
}
BATCHES = {"DiscreteSACLoss": _discrete_batch}


@pytest.mark.parametrize("name", list(CASES))
def test_each_part_equals_forwards_entry_on_the_same_seed(name):
    build, parts, meta_keys, means = CASES[name]
    torch.manual_seed(0)
    loss = build()
    twin = copy.deepcopy(loss)  # CrossQ's batch norm statistics move on each pass
    batch = BATCHES.get(name, _batch)
    td_forward, td_parts = batch(), batch()
    torch.manual_seed(1)
    out = loss(td_forward)
    torch.manual_seed(1)
    losses, meta = parts(twin, td_parts)
    assert set(meta) == meta_keys
    for key, value in losses.items():
        torch.testing.assert_close(value, out[key], msg=key)
    for key in means:
        torch.testing.assert_close(meta[key].mean(), out[key], msg=key)
    assert all(not v.requires_grad for v in meta.values())
    # forward writes the priority; the parts give it in their metadata
    per_critic = name.startswith("TD3") or name == "IQLLoss"
    td_error = meta["td_error"].amax(0) if per_critic else meta["td_error"]
    torch.testing.assert_close(td_error, td_forward["td_error"])
    written = set(td_parts.keys()) - set(_batch().keys())
    assert written == ({"td_error"} if name == "DDPGLoss" else set())  # TorchRL's rule


def _groups(loss):
    critic = getattr(loss, "qvalue_network_params", None)
    critic = (list(critic.values(True, True)) if critic is not None
              else list(loss.value_network.parameters()))
    groups = {"actor": list(loss.actor_network.parameters()),
              "critic": [p for p in critic if p.requires_grad]}
    if hasattr(loss, "log_alpha"):
        groups["alpha"] = [loss.log_alpha]
    if hasattr(loss, "qvalue_network_params") and getattr(loss, "value_network", None):
        groups["value"] = list(loss.value_network.parameters())
    return groups


@pytest.mark.parametrize("name", list(CASES))
def test_each_part_moves_only_its_own_parameters(name):
    build, parts, _, _ = CASES[name]
    torch.manual_seed(0)
    loss = build()
    losses, _ = parts(loss, BATCHES.get(name, _batch)())
    owner = {"loss_actor": "actor", "loss_qvalue": "critic", "loss_alpha": "alpha",
             "loss_value": "critic" if name == "DDPGLoss" else "value"}
    groups = _groups(loss)
    assert len(groups) == len(losses)
    for key in losses:
        group = owner[key]
        loss.zero_grad(set_to_none=True)
        losses[key].backward(retain_graph=True)
        for other, tensors in groups.items():
            got = [p.grad is not None and bool(p.grad.abs().sum() > 0) for p in tensors]
            assert all(got) if other == group else not any(got), (key, other)


def test_missing_keys_and_order_errors_name_the_loss():
    td = _batch().exclude(("next", "reward"))
    with pytest.raises(MissingKeyError, match=r"TD3Loss needs the key 'reward'"):
        _td3().value_loss(td)
    with pytest.raises(MissingKeyError, match=r"DDPGLoss needs the key 'reward'"):
        _ddpg().loss_value(td)
    with pytest.raises(MissingKeyError, match=r"CrossQLoss needs the key 'reward'"):
        _crossq().qvalue_loss(td)
    with pytest.raises(MissingKeyError, match=r"SACLoss needs the key 'action'"):
        _sac().qvalue_v2_loss(_batch().exclude("action"))
    loss = _crossq()
    with pytest.raises(RuntimeError, match=r"CrossQLoss.alpha_loss: target_entropy='auto'"):
        loss.alpha_loss(torch.zeros(B))
    _, meta = loss.actor_loss(_batch())  # the sampled action gives the target entropy
    assert loss.target_entropy == -ACT and loss.alpha_loss(meta["log_prob"]).shape == ()
    with pytest.raises(ValueError, match=r"SACLoss.value_loss needs a value_network"):
        SACLoss(_stochastic_actor(), _critic()).value_loss(_batch())


def test_torchrl_script_surface_params_and_value_estimator_device():
    # TorchRL's td3 / crossq sota scripts build optimisers from `<net>_params` and call
    # make_value_estimator(gamma=..., device=...)
    loss = _td3()
    params = list(loss.actor_network_params.flatten_keys().values())
    assert {id(p) for p in params} == {id(p) for p in loss.actor_network.parameters()}
    ddpg = _ddpg()
    assert {id(p) for p in ddpg.value_network_params.flatten_keys().values()} == {
        id(p) for p in ddpg.value_network.parameters()}
    with pytest.raises(AttributeError, match="value_network_params"):
        _ = loss.value_network_params
    crossq = _crossq()
    assert crossq.make_value_estimator(gamma=0.9, device="cpu") is crossq and crossq.gamma == 0.9
    with pytest.raises(ValueError, match=r"takes only gamma \(and device\), got \['lmbda'\]"):
        crossq.make_value_estimator(lmbda=0.9)


def test_sac_parts_are_refused_where_they_would_compute_sacs_terms():
    from rl_objectives import CQLLoss, REDQLoss

    for loss in (REDQLoss(_stochastic_actor(), _critic(), num_qvalue_nets=3),
                 CQLLoss(_stochastic_actor(), _critic())):
        name = type(loss).__name__
        for method in ("qvalue_v2_loss", "actor_loss", "value_loss"):
            with pytest.raises(NotImplementedError, match=rf"{name}.{method}: SACLoss's"):
                getattr(loss, method)(_batch())
        with pytest.raises(NotImplementedError, match=rf"{name}.alpha_loss"):
            loss.alpha_loss(torch.zeros(B))
        assert set(loss(_batch()).keys()) >= {"loss_actor", "loss_qvalue"}  # forward works
