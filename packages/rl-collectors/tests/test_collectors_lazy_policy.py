"""Lazy (uninitialised) modules in collectors and weight updaters; the updaters are
importable from rl_collectors as TorchRL exports them from torchrl.collectors."""

from __future__ import annotations

import pytest
import rl_collectors
import torch
from rl_collectors import (
    Collector,
    CollectorError,
    MultiProcessedWeightUpdater,
    VanillaWeightUpdater,
    WeightUpdaterBase,
    weight_sync,
)
from rl_envs import GymEnv
from tensordict.nn import TensorDictModule, TensorDictSequential


class _Argmax(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.argmax(-1)


def _lazy_policy() -> tuple[torch.nn.Module, TensorDictSequential]:
    net = torch.nn.Sequential(torch.nn.LazyLinear(2))
    policy = TensorDictSequential(TensorDictModule(net, ["observation"], ["logits"]),
                                  TensorDictModule(_Argmax(), ["logits"], ["action"]))
    return net, policy


def test_the_weight_updaters_are_exported_as_torchrl_does() -> None:
    for name in ("VanillaWeightUpdater", "MultiProcessedWeightUpdater", "WeightUpdaterBase"):
        assert getattr(rl_collectors, name) is getattr(weight_sync, name)
    assert issubclass(VanillaWeightUpdater, WeightUpdaterBase)


def test_a_collector_runs_a_policy_of_lazy_modules() -> None:
    net, policy = _lazy_policy()
    collector = Collector(lambda: GymEnv("CartPole-v1", num_envs=2,
                                         categorical_action_encoding=True), policy,
                          frames_per_batch=8, total_frames=16)
    try:
        shapes = []
        for batch in collector:
            shapes.append(tuple(batch.shape))
            collector.update_policy_weights_()
        assert shapes == [(2, 4), (2, 4)]
        assert net[0].weight.shape == (2, 4)  # initialised by the first step
    finally:
        collector.shutdown()


def test_vanilla_updater_materialises_a_lazy_target_from_the_source() -> None:
    target = torch.nn.Sequential(torch.nn.LazyLinear(2))
    source = torch.nn.Sequential(torch.nn.LazyLinear(2))
    updater = VanillaWeightUpdater(target, source=source)
    assert updater.push() == 1  # nothing initialised anywhere: nothing to copy
    source(torch.zeros(1, 3))
    assert updater.push() == 2
    assert torch.equal(target[0].weight, source[0].weight)
    with torch.no_grad():
        source[0].bias.fill_(5.0)
    updater.push()
    assert torch.equal(target[0].bias, torch.full((2,), 5.0))


def test_multiprocessed_updater_names_a_lazy_source() -> None:
    _, policy = _lazy_policy()
    with pytest.raises(CollectorError, match="lazy modules not yet initialised"):
        MultiProcessedWeightUpdater(policy)
