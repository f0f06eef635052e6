"""RayCollector on a real Ray: a local instance, then a two-node cluster on loopback.

Ray starts twice in this file (one class-scoped fixture per class, so the first is shut
down before the second starts). Helpers defined here and in ``collectors_helpers`` reach
the actors by value (``cloudpickle.register_pickle_by_value``).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from functools import partial
from pathlib import Path

import psutil
import pytest
import torch
from rl_collectors._ray import RayCollector, RayWeightUpdater
from rl_collectors.exceptions import CollectorError, WorkerError
from rl_collectors.weight_sync import VanillaWeightUpdater

HERE = str(Path(__file__).parent)
sys.path.insert(0, HERE)
import collectors_helpers  # noqa: E402
from collectors_helpers import greedy_policy, set_preference  # noqa: E402

sys.path.remove(HERE)

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*pkg_resources is deprecated.*"),
    pytest.mark.filterwarnings("ignore:.*RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO.*"),
    pytest.mark.filterwarnings("ignore:.*subprocess .* is still running.*:ResourceWarning"),
]

ACTOR = {"num_cpus": 0.5}  # two collectors' actors fit on num_cpus=2
RAY_PROCESSES = ("raylet", "gcs_server", "default_worker.py", "ray::")


# -- helpers shipped to the actors ---------------------------------------------------------------
def cartpole(num_envs: int = 2):
    from rl_envs import GymEnv

    return GymEnv("CartPole-v1", num_envs=num_envs, categorical_action_encoding=True)


def crashing_cartpole(after: int):
    """A CartPole whose step raises once it has stepped ``after`` times."""
    from rl_envs import GymEnv

    class Crashing(GymEnv):
        def fast_step(self, action):
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls > after:
                raise RuntimeError(f"env crashed on purpose after {after} steps")
            return super().fast_step(action)

    return Crashing("CartPole-v1", num_envs=2, categorical_action_encoding=True)


def broken_env():
    raise ValueError("no such simulator")


def profiling_state() -> tuple[str | None, bool]:
    import rl_profiling

    return os.environ.get("RL_PROFILING"), rl_profiling.ARMED


# -- Ray start / stop ---------------------------------------------------------------------------
def import_ray_for_tests():
    """Import Ray with its `uv run` hook off: the tests run under `uv run`, the actors
    must use this very virtual environment (see docs/distributed.md)."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    import ray
    import ray._private.ray_constants as constants

    constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False  # in case ray was imported before
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.cloudpickle.register_pickle_by_value(collectors_helpers)
    return ray


def ray_children() -> list[str]:
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            line = " ".join(proc.cmdline()) or proc.name()
            if proc.status() != psutil.STATUS_ZOMBIE and any(n in line for n in RAY_PROCESSES):
                out.append(f"{proc.pid} {line[:80]}")
        except psutil.NoSuchProcess:
            pass
    return out


def assert_no_ray_processes(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while ray_children() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray_children() == []


def kill_and_wait(ray, actor, timeout: float = 60.0) -> None:
    """``ray.kill``, then wait until a call on the actor fails: the kill is asynchronous,
    and a request that reaches the actor before it lands is still served (seen once in a
    CI run on a fast 2-core VM, where the test's next batch then came back whole)."""
    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.ready.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError(f"the actor still answers {timeout} s after ray.kill")


def assert_pids_gone(pids: list[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    alive = [
        p
        for p in pids
        if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
    ]
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [
            p
            for p in alive
            if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
        ]
    assert alive == []


# -- no Ray needed ------------------------------------------------------------------------------
def test_arguments_validated_before_ray_starts() -> None:
    with pytest.raises(ValueError, match="num_collectors"):
        RayCollector(cartpole, frames_per_batch=8, num_collectors=0)
    with pytest.raises(ValueError, match="remote_config: expected a dict or a list of 2 dicts"):
        RayCollector(cartpole, frames_per_batch=8, num_collectors=2, remote_config=[{}])
    with pytest.raises(ValueError, match="frames_per_batch"):
        RayCollector(cartpole, frames_per_batch=7, num_collectors=2)
    with pytest.raises(CollectorError, match="no weights"):
        RayWeightUpdater(lambda td: td)
    assert RayWeightUpdater(torch.nn.Linear(2, 2)).latest() is None
    with pytest.raises(ValueError, match="weight_updater: expected a RayWeightUpdater"):
        RayCollector(
            cartpole, frames_per_batch=8, num_collectors=2, weight_updater=VanillaWeightUpdater()
        )


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install rl-collectors\[ray\]"):
        RayCollector(cartpole, frames_per_batch=8, num_collectors=2)


# -- a local Ray -------------------------------------------------------------------------------
@pytest.fixture(scope="class")
def ray():
    ray = import_ray_for_tests()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    assert_no_ray_processes()


@pytest.fixture(scope="class")
def trainer_policy():
    return greedy_policy(prefer=1)


@pytest.fixture(scope="class")
def sync_collector(ray, trainer_policy):
    collector = RayCollector(
        partial(cartpole, 2),
        trainer_policy,
        frames_per_batch=40,
        total_frames=-1,
        num_collectors=2,
        remote_config=ACTOR,
        collector_kwargs={"exploration_type": "deterministic"},
        # TorchRL's zero-argument form: the collector binds the policy
        weight_updater=RayWeightUpdater(),
    )
    yield collector
    pids = [info["pid"] for info in collector.actor_info]
    collector.shutdown()
    assert ray.is_initialized()  # not ours to stop
    assert_pids_gone(pids)


class TestLocalRay:
    @pytest.mark.timeout(300)
    def test_sync_batches_layout_and_traj_ids(self, sync_collector) -> None:
        it = iter(sync_collector)
        a, b = next(it), next(it)
        assert a.batch_size == b.batch_size == torch.Size([4, 10])  # [2 actors * 2 envs, T]
        assert (a["action"] == 1).all() and (a["collector", "policy_version"] == 0).all()
        ids = torch.stack([a["collector", "traj_ids"], b["collector", "traj_ids"]], -1)
        assert (
            ids[:2].remainder(2).eq(0).all() and ids[2:].remainder(2).eq(1).all()
        )  # actor 0, actor 1
        assert set(ids[:2].unique().tolist()).isdisjoint(ids[2:].unique().tolist())
        pids = sync_collector.map_fn("os.getpid", [(), ()])
        assert pids == [info["pid"] for info in sync_collector.actor_info] and len(set(pids)) == 2

    @pytest.mark.timeout(300)
    def test_weight_update_observed_by_actors(self, sync_collector, trainer_policy) -> None:
        set_preference(trainer_policy, 0)
        assert (
            sync_collector.weight_updater.update_weights() == 1
        )  # TorchRL's name, on the bound updater
        batch = next(iter(sync_collector))
        assert (batch["action"] == 0).all()
        assert (batch["collector", "policy_version"] == 1).all()
        report = sync_collector.timing_report()
        assert (
            "Collector actors (sum over 2)" in report and "rollout" in report and "wait" in report
        )

    @pytest.mark.timeout(300)
    def test_profile_trace_seed_and_map_fn_through_the_shared_base(
        self, sync_collector, tmp_path
    ) -> None:
        path = str(tmp_path / "trace_{worker_idx}.json")
        sync_collector.enable_profile(
            workers=[1], num_rollouts=1, warmup_rollouts=0, save_path=path
        )
        next(iter(sync_collector))
        written = sync_collector.disable_profile()
        assert written == [str(tmp_path / "trace_1.json")] and os.path.getsize(written[0]) > 0
        assert sync_collector.disable_profile() == []  # nothing profiled any more
        assert isinstance(sync_collector.set_seed(7), int)
        with pytest.raises(ValueError, match="list_of_args: expected 2 entries"):
            sync_collector.map_fn("os.getpid", [()])
        assert [len(t.report()) > 0 for t in sync_collector.worker_timings()] == [True, True]

    @pytest.mark.timeout(300)
    def test_async_exact_frames_and_profiling_env_in_actors(self, ray, monkeypatch) -> None:
        from rl_profiling import _ranges

        monkeypatch.setattr(_ranges, "ARMED", True)  # as if the driver ran with RL_PROFILING=1
        monkeypatch.setitem(_ranges._state, "enabled", True)
        with RayCollector(
            partial(cartpole, 2),
            greedy_policy(1),
            frames_per_batch=20,
            total_frames=50,
            num_collectors=2,
            sync=False,
            remote_config=ACTOR,
        ) as collector:
            assert collector.map_fn(profiling_state, [(), ()]) == [("1", True)] * 2
            batches = list(collector)
        assert [b.batch_size for b in batches] == [torch.Size([2, 10])] * 2 + [torch.Size([2, 5])]
        for batch in batches:  # one actor per batch: every id has that actor's residue
            assert batch["collector", "traj_ids"].remainder(2).unique().numel() == 1
        assert collector.actors == []

    @pytest.mark.timeout(300)
    def test_actor_crash_names_the_actor_and_kills_the_others(self, ray) -> None:
        collector = RayCollector(
            [partial(cartpole, 2), partial(crashing_cartpole, 12)],
            greedy_policy(1),
            frames_per_batch=20,
            total_frames=-1,
            remote_config=ACTOR,
        )
        pids = [info["pid"] for info in collector.actor_info]
        it = iter(collector)
        next(it)  # 5 steps per actor and batch: the third batch crashes actor 1
        next(it)
        with pytest.raises(
            WorkerError, match=r"Ray actor 1 .* raised RuntimeError: env crashed on purpose"
        ) as err:
            next(it)
        assert (
            err.value.worker_index == 1 and "env crashed on purpose" in err.value.remote_traceback
        )
        assert collector.actors == []
        assert_pids_gone(pids)
        with pytest.raises(CollectorError, match="after shutdown"):
            next(iter(collector))


    @pytest.mark.timeout(300)
    def test_actor_that_fails_to_start_is_reported(self, ray) -> None:
        with pytest.raises(
            WorkerError, match=r"Ray actor 0 failed to start: ValueError: no such simulator"
        ):
            RayCollector(broken_env, frames_per_batch=8, num_collectors=1, remote_config=ACTOR)


# -- a two-node cluster on this machine ------------------------------------------------------------
@pytest.fixture(scope="class")
def cluster():
    ray = import_ray_for_tests()
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"node_a": 1}, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, resources={"node_b": 1})
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        yield ray
    finally:
        ray.shutdown()
        cluster.shutdown()
        assert_no_ray_processes()


class TestTwoNodeCluster:
    @pytest.mark.timeout(300)
    def test_actors_on_both_nodes_collect_and_a_killed_actor_is_reported(self, cluster) -> None:
        ray = cluster
        placement = [
            {"num_cpus": 1, "resources": {"node_a": 1}},
            {"num_cpus": 1, "resources": {"node_b": 1}},
        ]
        collector = RayCollector(
            partial(cartpole, 2),
            greedy_policy(1),
            frames_per_batch=20,
            total_frames=-1,
            num_collectors=2,
            remote_config=placement,
        )
        try:  # a failure here must not leave live actors to the tests after this one
            nodes = [info["node_id"] for info in collector.actor_info]
            assert len(set(nodes)) == 2 and set(nodes) == {
                n["NodeID"] for n in ray.nodes() if n["Alive"]
            }
            it = iter(collector)
            batch = next(it)
            assert batch.batch_size == torch.Size([4, 5]) and (batch["action"] == 1).all()
            kill_and_wait(ray, collector.actors[1])
            with pytest.raises(
                WorkerError, match=r"Ray actor 1 \(pid \d+ on node .*\) died"
            ) as err:
                next(it)
            assert err.value.worker_index == 1
            assert collector.actors == []
        finally:
            collector.shutdown()

    @pytest.mark.timeout(300)
    def test_a_collector_shut_down_after_ray_does_not_start_ray_again(self, cluster) -> None:
        # last in its class: it stops Ray, which the fixture's teardown then finds down
        ray = cluster
        collector = RayCollector(partial(cartpole, 2), greedy_policy(1), frames_per_batch=20,
                                 total_frames=-1, num_collectors=2)
        next(iter(collector))
        ray.shutdown()
        collector.shutdown()  # ray.kill on its actors would start a new local Ray
        assert not ray.is_initialized()
