"""Multi-process collectors with real spawned workers and real gymnasium envs."""

from __future__ import annotations

import json
import os
import time
from functools import partial
from pathlib import Path

import psutil
import pytest
import torch
from rl_collectors import AsyncCollector, MultiAsyncCollector, MultiSyncCollector, WorkerError

HERE = str(Path(__file__).parent)
START = {"start_timeout": 300.0}  # spawn + torch import; generous for loaded CI machines


def children() -> list[psutil.Process]:
    """Live child processes, without multiprocessing's own resource tracker."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(
                p.cmdline()
            ):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def assert_gone(pids: list[int], timeout: float = 10.0) -> None:
    """The given worker processes no longer exist (or are reaped zombies)."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if p in {c.pid for c in children()}]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in pids if p in {c.pid for c in children()}]
    assert alive == []


def new_children(before: set[int]) -> set[int]:
    return {c.pid for c in children()} - before


@pytest.fixture(scope="module")
def helpers():
    import sys

    sys.path.insert(0, HERE)
    import collectors_helpers

    yield collectors_helpers
    sys.path.remove(HERE)


@pytest.fixture(scope="module")
def sync_collector(helpers):
    collector = MultiSyncCollector(
        [partial(helpers.make_cartpole, 2)] * 2,
        helpers.greedy_policy(prefer=1),
        frames_per_batch=40,
        total_frames=-1,
        exploration_type="deterministic",
        **START,
    )
    pids = collector.map_fn("os.getpid", [(), ()])
    yield collector
    collector.shutdown()
    assert_gone(pids)


@pytest.mark.timeout(600)
def test_sync_layout_and_traj_ids_unique_across_workers(sync_collector) -> None:
    it = iter(sync_collector)
    a, b = next(it), next(it)
    assert a.batch_size == torch.Size([2, 2, 10])
    ids_a = a["collector", "traj_ids"]
    assert set(ids_a[0].unique().tolist()).isdisjoint(ids_a[1].unique().tolist())
    assert ids_a[0].remainder(2).eq(0).all() and ids_a[1].remainder(2).eq(1).all()
    finished = set(ids_a[..., :-1][a["next", "done"][..., :-1, 0]].tolist())
    assert finished.isdisjoint(b["collector", "traj_ids"].unique().tolist())


@pytest.mark.timeout(600)
def test_weight_update_changes_what_workers_do(sync_collector, helpers) -> None:
    helpers.check_weight_update(sync_collector, sync_collector.update_policy_weights_)


@pytest.mark.timeout(600)
def test_map_fn_timing_and_state_dict(sync_collector) -> None:
    pids = sync_collector.map_fn("os.getpid", [(), ()])
    assert len(set(pids)) == 2 and set(pids) <= {p.pid for p in children()}
    assert sync_collector.map_fn("rl_profiling.profiling_enabled", [(), ()]) == [False, False]
    next(iter(sync_collector))
    report = sync_collector.timing_report()
    assert "Collector workers" in report and "env_step" in report and "wait" in report
    state = sync_collector.state_dict()
    assert set(state) == {"frames", "num_workers", "policy_version", "worker0", "worker1"}
    assert state["worker1"]["frames"] > 0 and state["num_workers"] == 2


@pytest.mark.timeout(600)
def test_exact_total_frames_async_versions_and_no_orphans(helpers) -> None:
    before = {c.pid for c in children()}
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    collector = MultiAsyncCollector(
        [partial(helpers.make_cartpole, 2)] * 2, helpers.greedy_policy(), frames_per_batch=20,
        total_frames=130, update_at_each_batch=True, **START,
    )
    batches = list(collector)
    assert sum(b.numel() for b in batches) == 130 and batches[-1].batch_size == torch.Size([2, 5])
    assert all(b.batch_size[0] == 2 for b in batches)
    versions = [int(b["collector", "policy_version"][0, 0]) for b in batches]
    assert (
        versions[0] == 0 and max(versions) >= 1
    )  # a worker picks new weights up at its next batch
    workers = new_children(before)
    assert len(workers) == 2
    collector.shutdown()
    collector.shutdown()
    assert_gone(list(workers))
    del batches
    shm_after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert {n for n in shm_after - shm_before if "torch" in n} == set()


@pytest.mark.timeout(600)
def test_policy_raising_in_worker_names_worker_with_traceback(helpers) -> None:
    before = {c.pid for c in children()}
    collector = AsyncCollector(
        partial(helpers.make_cartpole, 2),
        helpers.bomb_policy(after=3),
        frames_per_batch=20,
        **START,
    )
    start = time.monotonic()
    with pytest.raises(WorkerError, match="worker 0") as info:
        list(collector)
    assert time.monotonic() - start < 30
    assert "boom from the policy" in str(info.value) and info.value.worker_index == 0
    assert_gone(list(new_children(before)))


@pytest.mark.timeout(600)
def test_killed_worker_and_bad_env_are_reported(helpers, kill_by_design) -> None:
    before = {c.pid for c in children()}
    collector = MultiSyncCollector([partial(helpers.make_cartpole, 2)], frames_per_batch=8, **START)
    victim = psutil.Process(collector.map_fn("os.getpid", [()])[0])
    kill_by_design(victim.pid)  # and its multiprocessing temp dir (it shared its batch's fds)
    victim.wait(10)
    with pytest.raises(WorkerError, match="worker 0.*(died|send)"):
        next(iter(collector))
    assert new_children(before) == set()
    with pytest.raises(WorkerError, match="worker 0") as info:
        MultiSyncCollector(
            [partial(__import__("rl_envs").GymEnv, "NoSuchEnv-v0")], frames_per_batch=8, **START
        )
    assert "NoSuchEnv" in str(info.value)
    assert new_children(before) == set()


@pytest.mark.timeout(600)
def test_enable_profile_writes_trace_with_ranges(helpers, tmp_path, monkeypatch) -> None:
    before = {c.pid for c in children()}
    monkeypatch.setenv("RL_PROFILING", "1")
    with MultiSyncCollector(
        [partial(helpers.make_cartpole, 2)], frames_per_batch=8, total_frames=40, **START
    ) as collector:
        collector.enable_profile(
            workers=[0],
            num_rollouts=2,
            warmup_rollouts=1,
            save_path=str(tmp_path / "w{worker_idx}.json"),
        )
        list(collector)
        paths = collector.disable_profile()
    assert paths == [str(tmp_path / "w0.json")]
    events = json.loads(Path(paths[0]).read_text())["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"Collector.rollout", "Collector.policy", "EnvBase.fast_step"} <= names
    rollout = next(e for e in events if e.get("name") == "Collector.rollout")
    policy = next(e for e in events if e.get("name") == "Collector.policy")
    assert rollout["ts"] <= policy["ts"] <= rollout["ts"] + rollout["dur"]
    assert new_children(before) == set()


def test_in_process_mode_runs_the_same_workers() -> None:
    from rl_envs import GymEnv

    with MultiSyncCollector(
        [partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=True)] * 2,
        frames_per_batch=8,
        total_frames=24,
        in_process=True,
    ) as c:
        assert [b.batch_size for b in c] == [torch.Size([2, 2, 2])] * 3
        assert c.map_fn("os.getpid", [(), ()]) == [os.getpid()] * 2


def test_init_random_frames_counts_the_frames_of_all_workers(helpers) -> None:
    from rl_envs import GymEnv

    # 2 workers x 2 envs x 4 steps = 16 frames a batch; 32 random frames = 2 random batches
    # in all (not 2 per worker), then the policy, which always picks action 0
    with MultiSyncCollector(
        [partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=True)] * 2,
        helpers.greedy_policy(prefer=0),
        frames_per_batch=16,
        total_frames=80,
        init_random_frames=32,
        in_process=True,
    ) as c:
        ones = [int((batch["action"] == 1).sum()) for batch in c]
    assert ones[0] > 0 and ones[1] > 0  # random: both actions (p = 1 - 2^-15 each)
    assert ones[2:] == [0, 0, 0]
