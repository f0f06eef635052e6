"""``DQNLoss(action_space=<spec>)`` with rl-envs' real specs, as TorchRL takes it.

rl-objectives may not import rl-envs, so the loss reads a spec by its class names; these
tests give it the specs real envs build (``env.action_spec``, ``env.full_action_spec``,
TorchRL's old aliases) and check both the kind it reads and the loss it computes.
"""

from __future__ import annotations

import pytest
import torch
from rl_envs import (
    Binary,
    Categorical,
    Composite,
    DiscreteTensorSpec,
    GymEnv,
    MultiCategorical,
    OneHot,
    OneHotDiscreteTensorSpec,
)
from rl_modules import MLP, QValueActor
from rl_objectives import DQNLoss
from torch import nn


@pytest.fixture(scope="module", params=[True, False], ids=["categorical", "one-hot"])
def cartpole(request):
    env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=request.param)
    env.set_seed(0)
    yield env
    env.close()


def _qnet(spec) -> QValueActor:
    torch.manual_seed(0)
    return QValueActor(MLP(4, 2, num_cells=8, depth=1, activation_class=nn.ReLU), spec=spec)


def test_env_specs_give_the_kind_of_action(cartpole):
    kind = "categorical" if isinstance(cartpole.action_spec, Categorical) else "one-hot"
    for spec in (cartpole.action_spec, cartpole.full_action_spec,
                 cartpole.action_spec_unbatched):
        assert DQNLoss(_qnet(cartpole.action_spec), action_space=spec).action_space == kind
    alias = DiscreteTensorSpec if kind == "categorical" else OneHotDiscreteTensorSpec
    assert DQNLoss(_qnet(cartpole.action_spec), action_space=alias(2)).action_space == kind


def test_loss_from_a_spec_equals_the_loss_from_its_name(cartpole):
    """A real rollout; the spec and the name give one loss. A one-hot action read as an
    index (the wrong kind) would gather other values or fail."""
    qnet = _qnet(cartpole.action_spec)
    with torch.no_grad():
        data = cartpole.rollout(6, qnet, break_when_any_done=False)
    kind = "categorical" if isinstance(cartpole.action_spec, Categorical) else "one-hot"
    by_spec = DQNLoss(qnet, action_space=cartpole.action_spec, gamma=0.9)(data.clone())
    by_name = DQNLoss(qnet, action_space=kind, gamma=0.9)(data.clone())
    torch.testing.assert_close(by_spec["loss"], by_name["loss"], rtol=0, atol=0)
    index = data.clone()
    if kind == "one-hot":
        index["action"] = data["action"].argmax(-1)
    by_index = DQNLoss(qnet, action_space="categorical", gamma=0.9)(index)
    torch.testing.assert_close(by_spec["loss"], by_index["loss"], rtol=0, atol=0)


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        (Binary(3), "received a Binary spec"),
        (MultiCategorical(torch.tensor([2, 3])), "received a MultiCategorical spec"),
        (Composite({"observation": OneHot(2)}), "without an 'action' entry"),
        ("mult_one_hot", "TorchRL's action space"),
        ("onehot!", "an unknown name"),
    ],
    ids=["binary", "multi-categorical", "composite-without-action", "mult-one-hot", "typo"],
)
def test_other_kinds_are_refused_naming_the_argument(spec, match):
    with pytest.raises(ValueError, match=rf"DQNLoss: action_space.*{match}"):
        DQNLoss(_qnet(Categorical(2)), action_space=spec)


def test_a_non_spec_is_a_type_error():
    with pytest.raises(TypeError, match="DQNLoss: action_space must be .* received int"):
        DQNLoss(_qnet(Categorical(2)), action_space=2)
    nested = Composite({"agent": Composite({"action": OneHot(2)})})
    assert DQNLoss(_qnet(OneHot(2)), action_space=nested).action_space == "one-hot"
