"""TorchRL's collector names and forms: ``BaseCollector`` and the older aliases,
``num_workers_per_collector``, zero-argument weight updaters with ``update_weights``,
``weight_updater=`` on multi-process collectors and ``map_fn`` by a bare name."""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

import pytest
import rl_collectors
import torch
from rl_collectors import (
    AsyncBatchedCollector,
    AsyncCollector,
    BaseCollector,
    Collector,
    CollectorError,
    DataCollectorBase,
    DistributedDataCollector,
    MultiAsyncCollector,
    MultiCollector,
    MultiSyncCollector,
    RayCollector,
    RPCDataCollector,
    SyncDataCollector,
    WorkerError,
)
from rl_collectors._options import TORCHRL_ONLY
from rl_collectors.weight_sync import MultiProcessedWeightUpdater, VanillaWeightUpdater
from rl_envs import GymEnv

HERE = str(Path(__file__).parent)


@pytest.fixture(scope="module")
def helpers():
    import sys

    sys.path.insert(0, HERE)  # spawn hands sys.path to the workers
    import collectors_helpers

    yield collectors_helpers
    sys.path.remove(HERE)


def _cartpole():
    return GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)


def _children() -> set[int]:
    import sys

    sys.path.insert(0, HERE)
    from collectors_helpers import children

    sys.path.remove(HERE)
    return children()


# -- names -----------------------------------------------------------------------------
@pytest.mark.parametrize(("old", "ours"), [
    ("SyncDataCollector", Collector), ("MultiSyncDataCollector", MultiSyncCollector),
    ("MultiaSyncDataCollector", MultiAsyncCollector), ("aSyncDataCollector", AsyncCollector),
    ("DataCollectorBase", BaseCollector),
])
def test_older_torchrl_names_are_the_same_classes(old, ours):
    assert getattr(rl_collectors, old) is ours and old in rl_collectors.__all__


@pytest.mark.parametrize("cls", [Collector, MultiCollector, MultiSyncCollector, MultiAsyncCollector,
                                 AsyncCollector, AsyncBatchedCollector, RayCollector,
                                 DistributedDataCollector, RPCDataCollector])
def test_every_collector_derives_from_base_collector(cls):
    assert issubclass(cls, BaseCollector) and issubclass(cls, DataCollectorBase)


def test_isinstance_with_an_old_name_and_unsupported_methods_are_named():
    with SyncDataCollector(_cartpole(), frames_per_batch=4, total_frames=4) as collector:
        assert isinstance(collector, DataCollectorBase) and isinstance(collector, BaseCollector)
        assert [b.numel() for b in collector] == [4]
    batched = AsyncBatchedCollector(partial(GymEnv, "CartPole-v1", num_envs=1), num_envs=2,
                                    frames_per_batch=4, total_frames=4)
    with (
        batched,
        pytest.raises(NotImplementedError, match="AsyncBatchedCollector does not support set_seed"),
    ):
        batched.set_seed(0)


# -- num_workers_per_collector ------------------------------------------------------------
def test_num_workers_per_collector_one_is_accepted():
    with MultiCollector([_cartpole] * 2, frames_per_batch=8, total_frames=8, in_process=True,
                        num_workers_per_collector=1) as collector:
        assert [b.batch_size for b in collector] == [torch.Size([2, 2, 2])]


@pytest.mark.parametrize("value", [2, 0, True, "1"])
def test_other_num_workers_per_collector_is_refused_before_any_process(value):
    before = _children()
    with pytest.raises(ValueError, match=r"num_workers_per_collector: expected 1 .*num_envs=N"):
        MultiSyncCollector([_cartpole] * 2, frames_per_batch=8, num_workers_per_collector=value)
    assert _children() == before


# -- weight updaters ------------------------------------------------------------------------
def test_zero_argument_vanilla_updater_is_bound_by_the_collector():
    policy, trainer = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
    module = _greedy_module(policy)
    updater = VanillaWeightUpdater()
    with Collector(_cartpole(), module, frames_per_batch=4, weight_updater=updater) as collector:
        assert collector.weight_updater is updater
        assert updater.update_weights(_greedy_module(trainer)) == 1
        torch.testing.assert_close(policy.weight, trainer.weight)
        assert collector.update_policy_weights_() == 2  # None: the collector's own policy


def test_unbound_vanilla_updater_says_what_to_do():
    with pytest.raises(CollectorError, match=r"not bound to a policy.*weight_updater="):
        VanillaWeightUpdater().update_weights(torch.nn.Linear(2, 2))


def test_single_process_updater_on_a_multi_process_collector_is_refused():
    with pytest.raises(ValueError, match=r"weight_updater: expected a MultiProcessedWeightUpdater.*"
                                         "VanillaWeightUpdater"):
        MultiSyncCollector([_cartpole] * 2, torch.nn.Linear(4, 2), frames_per_batch=8,
                           weight_updater=VanillaWeightUpdater(), in_process=True)


def test_unbound_multi_processed_updater_without_weights_is_refused():
    with pytest.raises(CollectorError, match="has no weights"):
        MultiSyncCollector([_cartpole] * 2, None, frames_per_batch=8,
                           weight_updater=MultiProcessedWeightUpdater(), in_process=True)
    with pytest.raises(CollectorError, match="no source yet"):
        MultiProcessedWeightUpdater().update_weights()


def _greedy_module(linear):
    from tensordict.nn import TensorDictModule

    return TensorDictModule(_Argmax(linear), ["observation"], ["action"])


class _Argmax(torch.nn.Module):
    def __init__(self, linear):
        super().__init__()
        self.linear = linear

    def forward(self, obs):
        return self.linear(obs).argmax(-1)


# -- real worker processes: one collector for the weight and map_fn checks ---------------
@pytest.fixture(scope="module")
def collector(helpers):
    updater = MultiProcessedWeightUpdater()  # TorchRL's form: the collector binds it
    collector = MultiSyncCollector(
        [partial(helpers.make_cartpole, 2)] * 2, helpers.greedy_policy(prefer=1),
        frames_per_batch=40, exploration_type="deterministic", weight_updater=updater,
        start_timeout=300.0,
    )
    pids = collector.map_fn("os.getpid", [(), ()])
    yield collector
    collector.shutdown()
    deadline = time.monotonic() + 10
    while set(pids) & _children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(pids) & _children()


@pytest.mark.timeout(600)
def test_given_updater_carries_weights_and_version_to_the_workers(collector, helpers):
    updater = collector.weight_updater
    assert isinstance(updater, MultiProcessedWeightUpdater)
    helpers.check_weight_update(collector, updater.update_weights)


@pytest.mark.timeout(600)
def test_map_fn_bare_documented_name_keeps_the_workers(collector):
    assert collector.map_fn("set_profiling_enabled", [False, False]) == [None, None]
    assert collector.map_fn("profiling_enabled", [(), ()]) == [False, False]
    assert next(iter(collector)).batch_size == torch.Size([2, 2, 10])


@pytest.mark.timeout(600)
def test_map_fn_wrong_name_is_refused_here_and_the_collector_stays_usable(collector):
    with pytest.raises(
        ValueError, match=r"map_fn: name: 'set_profiling' is neither a Collector method"
    ):
        collector.map_fn("set_profiling", [True, True])
    with pytest.raises(ValueError, match=r"map_fn: name: 'os' has no function 'nope'"):
        collector.map_fn("os.nope", [(), ()])
    assert next(iter(collector)).numel() == 40


@pytest.mark.timeout(600)
def test_map_fn_call_that_raises_in_a_worker_leaves_it_running(collector):
    with pytest.raises(WorkerError, match="math domain error") as info:
        collector.map_fn("math.sqrt", [4.0, -1.0])  # worker 1 raises, worker 0 answers
    assert info.value.worker_index == 1 and info.value.alive
    assert collector.map_fn("math.sqrt", [4.0, 9.0]) == [2.0, 3.0]  # no stale reply left over
    assert next(iter(collector)).numel() == 40


@pytest.mark.parametrize("name", sorted(TORCHRL_ONLY))
def test_torchrl_collector_arguments_are_refused_with_the_replacement(name):
    from rl_envs import GymEnv

    with pytest.raises(TypeError) as info:
        Collector(partial(GymEnv, "CartPole-v1"), None, frames_per_batch=4, **{name: "cpu"})
    unsupported = "TorchRL's argument is not supported by the collectors here"
    assert str(info.value) == f"{name}: {unsupported}; {TORCHRL_ONLY[name]}"


def test_device_sets_the_three_devices_unless_given():
    # TorchRL's Collector(device=): the default of env_device, policy_device, storing_device
    from rl_collectors import CollectorOptions

    opts = CollectorOptions(device="cpu")
    assert (opts.env_device, opts.policy_device, opts.storing_device) == ("cpu",) * 3
    assert CollectorOptions(device="cpu", storing_device="meta").storing_device == "meta"
    collector = Collector(_cartpole(), None, frames_per_batch=8, total_frames=8, device="cpu")
    assert collector.storing_device == torch.device("cpu")
    assert next(iter(collector)).device == torch.device("cpu")
    collector.shutdown()


def test_len_is_the_number_of_batches_as_torchrls():
    # TorchRL's sota scripts loop `for _ in range(len(collector))`
    with Collector(_cartpole(), frames_per_batch=6, total_frames=20) as collector:
        assert len(collector) == 4 == sum(1 for _ in collector)
    batched = AsyncBatchedCollector(partial(GymEnv, "CartPole-v1", num_envs=1), num_envs=2,
                                    frames_per_batch=4, total_frames=8)
    with batched:
        assert len(batched) == 2
    with Collector(_cartpole(), frames_per_batch=4) as endless:
        with pytest.raises(TypeError, match=r"Collector has no length: total_frames=-1"):
            len(endless)
        assert endless  # still true: bool() does not ask for a length
