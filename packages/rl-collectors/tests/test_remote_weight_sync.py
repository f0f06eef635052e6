"""RemoteModuleWeightUpdater: TorchRL's per-worker hooks drive a push."""

from __future__ import annotations

import pytest
import torch
from rl_collectors import Collector, CollectorError, RemoteModuleWeightUpdater
from rl_envs import GymEnv
from tensordict.nn import TensorDictModule


class ToPolicies(RemoteModuleWeightUpdater):
    """Workers are policies addressed by id; weights are sent as a CPU copy (mapped once)."""

    def __init__(self, source, workers):
        super().__init__(source)
        self.workers, self.mapped, self.sent = workers, 0, []

    def all_worker_ids(self):
        return list(self.workers)

    def _maybe_map_weights(self, server_weights):
        self.mapped += 1
        return server_weights.detach().clone()

    def _sync_weights_with_worker(self, worker_id, server_weights):
        self.sent.append(worker_id)
        server_weights.to_module(self.workers[worker_id])


def policy() -> TensorDictModule:
    return TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"])


def test_push_maps_once_and_syncs_the_chosen_workers() -> None:
    trainer = torch.nn.Linear(3, 1)
    workers = {"a": torch.nn.Linear(3, 1), "b": torch.nn.Linear(3, 1)}
    updater = ToPolicies(trainer, workers)
    assert updater.update_weights(worker_ids=["b"]) == 1
    assert updater.sent == ["b"] and updater.mapped == 1
    assert torch.equal(workers["b"].weight, trainer.weight)
    assert not torch.equal(workers["a"].weight, trainer.weight)
    with torch.no_grad():
        trainer.weight.add_(1.0)
    assert updater() == 2
    assert updater.sent == ["b", "a", "b"] and updater.mapped == 2
    assert all(torch.equal(w.weight, trainer.weight) for w in workers.values())
    with pytest.raises(CollectorError, match="worker_ids"):
        updater.push(worker_ids=["c"])
    assert updater.version == 2


def test_a_collector_binds_it_and_update_policy_weights_reaches_the_workers() -> None:
    trainer, remote = policy(), policy()
    updater = ToPolicies(None, {0: remote})
    collector = Collector(GymEnv("Pendulum-v1", num_envs=2), trainer, frames_per_batch=8,
                          total_frames=-1, weight_updater=updater)
    with torch.no_grad():
        trainer.module.weight.mul_(0.0)
    collector.update_policy_weights_()
    collector.shutdown()
    assert updater.sent == [0]
    assert torch.equal(remote.module.weight, torch.zeros(1, 3))


def test_missing_hooks_are_named() -> None:
    updater = RemoteModuleWeightUpdater(torch.nn.Linear(2, 1))
    with pytest.raises(NotImplementedError, match="all_worker_ids"):
        updater.push()

    class NoSync(RemoteModuleWeightUpdater):
        def all_worker_ids(self):
            return [0]

    with pytest.raises(NotImplementedError, match="_sync_weights_with_worker"):
        NoSync(torch.nn.Linear(2, 1)).push()
