"""SAC-family entropy targets read from a real batched env's specs (TorchRL's rule)."""

from __future__ import annotations

import pytest
import torch
from rl_envs import GymEnv
from rl_objectives import CrossQLoss, REDQLoss, SACLoss
from tensordict.nn import (
    NormalParamExtractor,
    ProbabilisticTensorDictModule,
    ProbabilisticTensorDictSequential,
    TensorDictModule,
)


class _Q(torch.nn.Module):
    def __init__(self, obs: int, act: int) -> None:
        super().__init__()
        self.net = torch.nn.Linear(obs + act, 1)

    def forward(self, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, act], -1))


@pytest.fixture(scope="module")
def pendulum4():
    env = GymEnv("Pendulum-v1", num_envs=4)
    yield env
    env.close()


@pytest.mark.parametrize("loss_cls", [SACLoss, CrossQLoss, REDQLoss])
def test_auto_target_entropy_counts_the_action_dims_of_a_composite_spec(loss_cls, pendulum4):
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor()),
                         ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=torch.distributions.Normal))
    qvalue = TensorDictModule(_Q(3, 1), ["observation", "action"], ["state_action_value"])
    assert pendulum4.full_action_spec.shape == (4,)
    # the composite's own shape is the env batch: only the action's dim counts
    assert loss_cls(actor, qvalue, action_spec=pendulum4.full_action_spec).target_entropy == -1.0
    # a plain spec counts every dim, the env dim too (TorchRL's rule for a plain spec)
    assert loss_cls(actor, qvalue, action_spec=pendulum4.action_spec).target_entropy == -4.0
