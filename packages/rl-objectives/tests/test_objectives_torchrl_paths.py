"""VTrace, default_value_kwargs, TorchRL's objectives paths, SoftUpdate's tau/eps and
target updaters over lazy modules."""

from __future__ import annotations

import pytest
import rl_objectives
import rl_objectives.utils
import rl_objectives.value
import torch
from rl_objectives import (
    DQNLoss,
    HardUpdate,
    SoftUpdate,
    ValueEstimators,
    VTrace,
    default_value_kwargs,
)
from rl_objectives.value.functional import vtrace_advantage_estimate
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, ProbabilisticTensorDictModule, TensorDictModule
from tensordict.nn import ProbabilisticTensorDictSequential as Seq


def _actor_critic():
    torch.manual_seed(0)
    actor = Seq(
        TensorDictModule(torch.nn.Sequential(torch.nn.Linear(3, 2), NormalParamExtractor()),
                         ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=torch.distributions.Normal))
    critic = TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["state_value"])
    done = torch.rand(2, 12, 1) < 0.2
    td = TensorDict({"observation": torch.randn(2, 12, 3), "action": torch.randn(2, 12, 1),
                     "sample_log_prob": torch.randn(2, 12, 1) - 1.0,
                     "next": {"observation": torch.randn(2, 12, 3),
                              "reward": torch.randn(2, 12, 1), "done": done,
                              "terminated": done.clone()}}, [2, 12])
    return actor, critic, td


def test_vtrace_matches_the_functional_with_the_learner_log_prob() -> None:
    actor, critic, td = _actor_critic()
    out = VTrace(gamma=0.9, actor_network=actor, value_network=critic, rho_thresh=0.8,
                 c_thresh=0.9)(td.clone())
    with torch.no_grad():
        dist = actor.get_dist(td.clone())
        log_pi = dist.log_prob(td["action"])
        v, nv = critic(td.clone())["state_value"], critic(td["next"].clone())["state_value"]
    adv, target = vtrace_advantage_estimate(
        0.9, log_pi, td["sample_log_prob"], v, nv, td["next", "reward"], td["next", "done"],
        td["next", "terminated"], 0.8, 0.9)
    torch.testing.assert_close(out["advantage"], adv)
    torch.testing.assert_close(out["value_target"], target)


def test_vtrace_refuses_a_deterministic_actor_and_bad_thresholds() -> None:
    _, critic, _ = _actor_critic()
    with pytest.raises(TypeError, match="actor_network"):
        VTrace(gamma=0.9, actor_network=critic)
    actor, _, _ = _actor_critic()
    with pytest.raises(ValueError, match="rho_thresh"):
        VTrace(gamma=0.9, actor_network=actor, rho_thresh=0.0)


def test_default_value_kwargs_are_torchrl_s() -> None:
    assert default_value_kwargs(ValueEstimators.GAE) == {
        "gamma": 0.99, "lmbda": 0.95, "differentiable": True}
    assert default_value_kwargs("VTrace") == {"gamma": 0.99, "differentiable": True}
    kwargs = default_value_kwargs(ValueEstimators.TD0)
    kwargs["gamma"] = 0.5
    assert default_value_kwargs(ValueEstimators.TD0)["gamma"] == 0.99  # a fresh dict
    with pytest.raises(ValueError, match="value_type"):
        default_value_kwargs("Retrace")


def test_torchrl_paths_reexport_the_package_objects() -> None:
    for module in (rl_objectives.utils, rl_objectives.value):
        for name in module.__all__:
            if name != "functional":
                assert getattr(module, name) is getattr(rl_objectives, name), name


def _lazy_dqn():
    net = torch.nn.Sequential(torch.nn.LazyLinear(2))
    return net, DQNLoss(TensorDictModule(net, ["observation"], ["action_value"]),
                        delay_value=True)


@pytest.mark.parametrize("make", [lambda loss: SoftUpdate(loss, eps=0.5),
                                  lambda loss: HardUpdate(loss, value_network_update_interval=1)])
def test_target_updaters_accept_lazy_modules_and_copy_once_initialised(make) -> None:
    net, loss = _lazy_dqn()
    updater = make(loss)
    updater.step()  # nothing initialised yet: nothing to do, no error
    net(torch.zeros(1, 3))
    updater.step()
    target = loss.target_value_network.module[0]
    assert torch.equal(target.weight, net[0].weight) and not target.weight.requires_grad
    with torch.no_grad():
        net[0].weight.add_(1.0)
    updater.step()
    assert not torch.equal(target.weight, net[0].weight - 1.0)  # it moved towards online


def test_soft_update_needs_exactly_one_of_tau_and_eps() -> None:
    net, loss = _lazy_dqn()
    with pytest.raises(ValueError, match="tau, eps: give exactly one"):
        SoftUpdate(loss)
    with pytest.raises(ValueError, match="tau, eps: give exactly one"):
        SoftUpdate(loss, tau=0.1, eps=0.9)
    assert SoftUpdate(loss, eps=0.99).tau == pytest.approx(0.01)


def test_group_optimizers_steps_as_the_separate_optimizers() -> None:
    """TorchRL's ``group_optimizers`` (its SAC/IQL/CQL sota scripts): one optimizer, each
    group with its own lr, the same updates as the optimizers stepped one by one."""
    torch.manual_seed(0)
    nets = [torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)]
    twins = [torch.nn.Linear(3, 2), torch.nn.Linear(3, 1)]
    for net, twin in zip(nets, twins, strict=True):
        twin.load_state_dict(net.state_dict())
    grouped = rl_objectives.utils.group_optimizers(
        torch.optim.Adam(nets[0].parameters(), lr=1e-2), None,
        torch.optim.Adam(nets[1].parameters(), lr=1e-3))
    apart = [torch.optim.Adam(twins[0].parameters(), lr=1e-2),
             torch.optim.Adam(twins[1].parameters(), lr=1e-3)]
    x = torch.randn(8, 3)
    for _ in range(3):
        for ms, opts in ((nets, [grouped]), (twins, apart)):
            sum(m(x).square().sum() for m in ms).backward()
            for o in opts:
                o.step()
                o.zero_grad()
    for net, twin in zip(nets, twins, strict=True):
        torch.testing.assert_close(net.weight, twin.weight, rtol=0, atol=0)
    assert rl_objectives.group_optimizers is rl_objectives.utils.group_optimizers
    with pytest.raises(ValueError, match="one type, received Adam, SGD"):
        rl_objectives.group_optimizers(torch.optim.Adam(nets[0].parameters()),
                                       torch.optim.SGD(nets[1].parameters(), lr=0.1))
    with pytest.raises(TypeError, match="received Linear"):
        rl_objectives.group_optimizers(nets[0])
