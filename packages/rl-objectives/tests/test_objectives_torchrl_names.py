"""TorchRL 0.11+ keyword names of the actor-critic losses (``critic_coeff``,
``entropy_coeff``) next to ours (``critic_coef``, ``entropy_coef``)."""

from __future__ import annotations

import pytest
import torch
from rl_objectives import GAE, A2CLoss, ClipPPOLoss, KLPENPPOLoss, PPOLoss
from rl_objectives.value._estimator_base import TORCHRL_ONLY as TORCHRL_ONLY_ESTIMATOR
from tensordict import TensorDict
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)

LOSSES = [A2CLoss, PPOLoss, ClipPPOLoss, KLPENPPOLoss]


def _actor():
    net = torch.nn.Sequential(torch.nn.Linear(3, 4), NormalParamExtractor())
    return ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=torch.distributions.Normal),
    )


def _critic():
    return TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])


def _batch(n=16):
    g = torch.Generator().manual_seed(0)
    return TensorDict({
        "observation": torch.randn(n, 3, generator=g), "action": torch.randn(n, 2, generator=g),
        "sample_log_prob": torch.randn(n, generator=g), "advantage": torch.randn(n, 1, generator=g),
        "value_target": torch.randn(n, 1, generator=g),
    }, [n])


@pytest.mark.parametrize("cls", LOSSES)
def test_torchrl_spelling_sets_the_same_weights(cls):
    loss = cls(_actor(), _critic(), critic_coeff=0.25, entropy_coeff=0.05)
    assert (loss.critic_coef, loss.entropy_coef) == (0.25, 0.05)
    assert (loss.critic_coeff, loss.entropy_coeff) == (0.25, 0.05)


@pytest.mark.parametrize("cls", LOSSES)
def test_both_spellings_give_the_same_loss(cls):
    torch.manual_seed(0)
    actor, critic, td = _actor(), _critic(), _batch()
    ours = cls(actor, critic, critic_coef=0.3, entropy_coef=0.02)(td.clone())
    theirs = cls(actor, critic, critic_coeff=0.3, entropy_coeff=0.02)(td.clone())
    for key in ("loss_critic", "loss_objective"):
        torch.testing.assert_close(ours[key], theirs[key])
    # the entropy term is estimated from samples: compare its weight, not a draw
    assert ours["loss_entropy"].abs() > 0 and theirs["loss_entropy"].abs() > 0


def test_defaults_are_unchanged():
    loss = ClipPPOLoss(_actor(), _critic())
    assert (loss.critic_coef, loss.entropy_coef) == (1.0, 0.01)


@pytest.mark.parametrize(("ours", "theirs"), [("critic_coef", "critic_coeff"),
                                              ("entropy_coef", "entropy_coeff")])
def test_both_spellings_at_once_is_an_error_naming_both(ours, theirs):
    with pytest.raises(TypeError, match=rf"{ours}=0.5 and {theirs}=0.5"):
        ClipPPOLoss(_actor(), _critic(), **{ours: 0.5, theirs: 0.5})


def test_negative_torchrl_spelling_is_refused_by_our_name():
    with pytest.raises(ValueError, match="critic_coef must be >= 0"):
        PPOLoss(_actor(), _critic(), critic_coeff=-1.0)


def test_the_alias_attribute_writes_through():
    loss = A2CLoss(_actor(), _critic())
    loss.critic_coeff = 0.7
    assert loss.critic_coef == 0.7


@pytest.mark.parametrize("name", sorted(TORCHRL_ONLY_ESTIMATOR))
def test_torchrl_estimator_arguments_are_refused_with_the_replacement(name):
    with pytest.raises(TypeError) as info:
        GAE(gamma=0.99, lmbda=0.95, **{name: True})
    assert str(info.value) == (f"{name}: TorchRL's argument is not supported here; "
                               f"{TORCHRL_ONLY_ESTIMATOR[name]}")
    with pytest.raises(TypeError, match="GAE: got an unexpected keyword argument 'lambda_'"):
        GAE(gamma=0.99, lmbda=0.95, lambda_=0.9)
