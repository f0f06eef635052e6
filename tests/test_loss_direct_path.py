"""The losses' direct call of plain tensordict modules equals tensordict's generic call.

``ProbabilisticActor.get_dist`` (rl-modules) and the actor-critic losses' critic call
(rl-objectives) run a plain ``TensorDictModule``'s network on its tensors directly
(issue 40: PPO's eager step within 15% of plain torch). A module with a hook, a
``SafeModule``, a method, keyword in-keys or ``skip_existing`` goes through tensordict's
``forward``. Here the same loss runs both ways: identical outputs and gradients, bit for
bit (the same ops in the same order).
"""

from __future__ import annotations

import copy

import pytest
import rl_modules._actors as actors_impl
import rl_objectives._actor_critic as loss_impl
import torch
from rl_modules import ProbabilisticActor, SafeModule, ValueOperator
from rl_objectives import A2CLoss, ClipPPOLoss, KLPENPPOLoss
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    TensorDictModule,
    set_skip_existing,
)
from torch import nn

N = 16


def _batch(seed: int, discrete: bool) -> TensorDict:
    g = torch.Generator().manual_seed(seed)
    action = (torch.randint(0, 3, (N,), generator=g) if discrete
              else torch.randn(N, 2, generator=g))
    return TensorDict({
        "observation": torch.randn(N, 4, generator=g), "action": action,
        "sample_log_prob": -torch.rand(N, generator=g) - 0.5,
        "advantage": torch.randn(N, 1, generator=g),
        "value_target": torch.randn(N, 1, generator=g),
        "state_value": torch.randn(N, 1, generator=g)}, [N])


def _loss(cls, discrete: bool):
    torch.manual_seed(0)
    if discrete:
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
        actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["logits"]), ["logits"],
                                   distribution_class=torch.distributions.Categorical)
    else:
        net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4), NormalParamExtractor())
        actor = ProbabilisticActor(
            TensorDictModule(net, ["observation"], ["loc", "scale"]), ["loc", "scale"],
            distribution_class=torch.distributions.Normal)
    critic = ValueOperator(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
    kwargs = {"clip_value": 0.3} if cls is not A2CLoss else {}
    return cls(actor, critic, critic_coef=0.5, loss_critic_type="l2", **kwargs)


def _hook(module, args):  # changes nothing, but makes the module not plain
    return None


def _spied(monkeypatch):
    """Count the direct calls the actor and the critic take."""
    taken = {"actor": 0, "critic": 0}

    def spy(name, module, fn):
        def wrapper(*args):
            out = fn(*args)
            # a SafeModule's own forward runs its network directly too: counted apart
            key = "safe" if isinstance(args[0], SafeModule) else name
            taken[key] = taken.get(key, 0) + (out is not None)
            return out

        monkeypatch.setattr(module, fn.__name__, wrapper)

    spy("actor", actors_impl, actors_impl.call_plain)
    spy("critic", loss_impl, loss_impl.plain_output)
    return taken


@pytest.mark.parametrize("discrete", [True, False], ids=["categorical", "normal"])
@pytest.mark.parametrize("cls", [ClipPPOLoss, KLPENPPOLoss, A2CLoss])
def test_direct_and_generic_calls_give_identical_outputs_and_gradients(cls, discrete,
                                                                        monkeypatch):
    direct = _loss(cls, discrete)
    generic = copy.deepcopy(direct)
    generic.actor_network.module[0].register_forward_pre_hook(_hook)
    generic.critic_network.register_forward_pre_hook(_hook)
    taken = _spied(monkeypatch)
    for seed in range(2):
        td = _batch(seed, discrete)
        outs = []
        for loss in (direct, generic):
            loss.zero_grad(set_to_none=True)
            out = loss(td.clone())
            sum(v for k, v in out.items() if k.startswith("loss_")).backward()
            outs.append(out)
        assert set(outs[0].keys()) == set(outs[1].keys())
        for key in outs[0].keys():  # noqa: SIM118 (a TensorDict)
            assert torch.equal(outs[0][key], outs[1][key]), key
        for (name, p), q in zip(direct.named_parameters(), generic.parameters(), strict=True):
            assert torch.equal(p.grad, q.grad), name
    assert taken == {"actor": 2, "critic": 2}  # the direct loss took both, the generic none


def test_a_module_that_is_not_plain_takes_the_generic_call(monkeypatch):
    loss = _loss(ClipPPOLoss, discrete=True)
    loss.critic_network = SafeModule(loss.critic_network.module, ["observation"],
                                     ["state_value"])  # a spec guard: its own forward
    taken = _spied(monkeypatch)
    loss(_batch(0, discrete=True))
    # the loss calls the critic through its forward; that forward runs the network directly
    assert taken == {"actor": 1, "critic": 0, "safe": 1}
    with set_skip_existing(True):  # tensordict may skip a module whose outputs exist
        loss(_batch(1, discrete=True))
    assert taken == {"actor": 1, "critic": 0, "safe": 1}


def test_a_missing_input_raises_tensordicts_own_error():
    loss = _loss(ClipPPOLoss, discrete=True)
    td = _batch(0, discrete=True).exclude("observation")
    with pytest.raises(KeyError):
        loss(td)


def test_a_probabilistic_module_with_its_own_get_dist_is_respected():
    class Shifted(ProbabilisticTensorDictModule):
        def get_dist(self, tensordict):
            return torch.distributions.Categorical(logits=tensordict["logits"] + 100.0)

    net = nn.Linear(4, 3)
    actor = ProbabilisticActor(TensorDictModule(net, ["observation"], ["logits"]), ["logits"],
                               distribution_class=torch.distributions.Categorical)
    actor.module[-1].__class__ = Shifted
    td = _batch(0, discrete=True)
    dist = actor.get_dist(td)
    assert torch.allclose(dist.logits, torch.log_softmax(net(td["observation"]) + 100.0, -1))
