"""DistributedSyncDataCollector on a real torch.distributed group: gloo over 127.0.0.1.

One collector (trainer + 2 spawned ranks, world size 3) starts in this file: each start-up
imports torch in every rank, so the assertions share one class-scoped collector; the last
test kills a rank and checks the report and the teardown. The async schedule, world size 2
and the submitit launchers are in ``test_collectors_submitit.py``; RPC in
``test_collectors_rpc.py``.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch
from rl_collectors._distributed import DistributedDataCollector, DistributedSyncDataCollector
from rl_collectors._flat import FlatLayout
from rl_collectors.exceptions import CollectorClosedError, CollectorError, WorkerError
from rl_collectors.weight_sync import VanillaWeightUpdater
from tensordict import TensorDict

HERE = str(Path(__file__).parent)
sys.path.insert(0, HERE)
from collectors_helpers import children  # noqa: E402

sys.path.remove(HERE)
START = {"start_timeout": 300.0, "timeout": 120.0}  # spawn + torch import on a loaded machine


def assert_gone(pids, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while set(pids) & children() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(pids) & children()


@pytest.fixture(scope="module")
def helpers():
    sys.path.insert(0, HERE)  # spawn hands sys.path to the ranks
    import collectors_helpers

    yield collectors_helpers
    sys.path.remove(HERE)


@pytest.fixture(scope="class")
def sync_collector(helpers):
    collector = DistributedSyncDataCollector(
        partial(helpers.make_cartpole, 2),
        helpers.greedy_policy(prefer=1),
        frames_per_batch=16,
        total_frames=-1,
        num_collectors=2,
        collector_kwargs={"exploration_type": "deterministic"},
        **START,
    )
    pids = [info["pid"] for info in collector.rank_info]
    yield collector
    collector.shutdown()
    assert_gone(pids)
    assert not torch.distributed.is_initialized()


# -- no processes ------------------------------------------------------------------------------
def test_flat_layout_roundtrip_keeps_dtypes_and_views():
    td = TensorDict({"obs": torch.randn(2, 5, 3), "done": torch.rand(2, 5, 1) > 0.5,
                     "nested": {"ids": torch.arange(10).reshape(2, 5)}}, batch_size=[2, 5])
    layout = FlatLayout.of(td)
    flat = layout.pack(td)
    out = layout.unpack(flat)
    assert (out == td).all() and out["done"].dtype == torch.bool
    out["obs"].zero_()  # views into the flat buffer, not copies
    assert (layout.unpack(flat)["obs"] == 0).all()
    short = layout.with_steps(2)
    assert short.unpack(short.pack(td[:, :2]))["nested", "ids"].tolist() == [[0, 1], [5, 6]]
    with pytest.raises(ValueError, match="flat: expected"):
        layout.unpack(flat[:-1])


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"backend": "tcp"}, "backend: expected one of"),
        ({"backend": "nccl"}, "backend: 'nccl' is not supported yet"),
        ({"launcher": "ssh"}, "launcher: expected one of"),
        ({"launcher": "submitit_delayed"}, "tcp_port: launcher='submitit_delayed'"),
        ({"frames_per_batch": 7, "sync": True}, "frames_per_batch: expected a multiple"),
        ({"num_collectors": 0}, "num_collectors: expected an int >= 1"),
        ({"num_workers_per_collector": 0}, "num_workers_per_collector: expected an int >= 1"),
        ({"collector_kwargs": {"max_frames_per_traj": 0}}, "max_frames_per_traj"),
        (
            {"collector_kwargs": {"weight_updater": VanillaWeightUpdater()}},
            "collector_kwargs: weight_updater: the remote collectors push the trainer's weights "
            "themselves",
        ),
    ],
)
def test_bad_arguments_fail_before_anything_starts(kwargs, match):
    before = children()
    args = {"frames_per_batch": 8, "num_collectors": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        DistributedDataCollector(lambda: None, None, **args)
    assert children() == before and not torch.distributed.is_initialized()


# -- sync, world size 3 (trainer + 2 ranks) ------------------------------------------------
class TestSync:
    """One sync collector for these tests; the last one kills a rank."""

    @pytest.mark.timeout(400)
    def test_sync_batches_layout_and_traj_ids_unique_across_ranks(self, sync_collector):
        it = iter(sync_collector)
        batches = [next(it) for _ in range(3)]
        assert all(
            b.batch_size == torch.Size([4, 4]) for b in batches
        )  # 2 ranks x 2 sub-envs, 4 steps
        ids = torch.stack([b["collector", "traj_ids"] for b in batches])
        assert (ids[:, :2] % 2 == 0).all() and (
            ids[:, 2:] % 2 == 1
        ).all()  # rank 1's rows, then rank 2's
        firsts = ids[0, :, 0]
        assert len(set(firsts.tolist())) == 4  # four sub-envs, four trajectories
        assert (batches[0]["action"] == 1).all()  # the greedy policy's preference, run on the ranks
        assert {info["pid"] for info in sync_collector.rank_info}.isdisjoint({os.getpid()})

    @pytest.mark.timeout(400)
    def test_weight_update_reaches_the_ranks_with_its_version(self, sync_collector, helpers):
        trainer = sync_collector.policy
        version = sync_collector.update_policy_weights_(helpers.greedy_policy(prefer=0))
        batch = next(iter(sync_collector))
        assert (batch["collector", "policy_version"] == version).all()
        assert (batch["action"] == 0).all()  # the new weights acted
        assert sync_collector.update_policy_weights_(trainer) == version + 1  # back to preferring 1
        batch = next(iter(sync_collector))
        assert (batch["action"] == 1).all() and (
            batch["collector", "policy_version"] == version + 1
        ).all()

    @pytest.mark.timeout(400)
    def test_map_fn_set_seed_and_timing_report(self, sync_collector):
        pids = sync_collector.map_fn("os.getpid", [(), ()])
        assert pids == [info["pid"] for info in sync_collector.rank_info]
        assert isinstance(sync_collector.set_seed(3), int)
        report = sync_collector.timing_report()
        assert (
            "Collector ranks (sum over 2)" in report and "env_step" in report and "wait" in report
        )
        with pytest.raises(ValueError, match="list_of_args: expected 2 entries"):
            sync_collector.map_fn("os.getpid", [()])

    @pytest.mark.timeout(400)
    def test_enable_profile_writes_a_trace_on_the_rank(self, sync_collector, tmp_path):
        path = str(tmp_path / "trace_{worker_idx}.json")
        sync_collector.enable_profile(
            workers=[1], num_rollouts=1, warmup_rollouts=0, save_path=path
        )
        next(iter(sync_collector))
        written = sync_collector.disable_profile()
        assert written == [str(tmp_path / "trace_1.json")] and Path(written[0]).stat().st_size > 0

    @pytest.mark.timeout(400)
    def test_update_without_weights_is_refused(self, sync_collector):
        with pytest.raises(CollectorError, match="has no weights"):
            sync_collector.update_policy_weights_(lambda td: td)

    @pytest.mark.timeout(400)
    def test_a_killed_rank_is_reported_by_rank_and_everything_stops(self, sync_collector):
        pids = [info["pid"] for info in sync_collector.rank_info]
        it = iter(sync_collector)
        next(it)
        os.kill(pids[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match="rank 2") as err:
            for _ in range(10_000):
                next(it)
        assert time.monotonic() - start < 10.0
        assert err.value.worker_index == 1 and "died" in str(err.value)
        with pytest.raises(CollectorClosedError):
            next(iter(sync_collector))
        assert_gone(pids)
        assert not torch.distributed.is_initialized()


# -- launcher=None: a process group initialised by the user (as under torchrun), world size 2 ----
@pytest.mark.timeout(400)
def test_a_user_initialised_group_is_used_a_raising_rank_reported_and_the_group_left_alone(helpers):
    import datetime

    import torch.distributed as dist
    import torch.multiprocessing as tmp
    from rl_collectors._distributed_worker import run_rank
    from rl_envs import GymEnv

    before = children()
    store = dist.TCPStore("127.0.0.1", 0, 2, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=300))
    # rank 1 does what a torchrun rank does: join the group, then serve_distributed_collector()
    rank = tmp.get_context("spawn").Process(
        target=run_rank, args=("127.0.0.1", store.port, 1, 2, "gloo", 120.0)
    )
    rank.start()
    try:
        dist.init_process_group(
            "gloo", store=store, rank=0, world_size=2, timeout=datetime.timedelta(seconds=300)
        )
        with pytest.raises(ValueError, match="already in a process group; pass launcher=None"):
            DistributedDataCollector(partial(GymEnv, "CartPole-v1", num_envs=2), frames_per_batch=8,
                                     num_collectors=1)
        # the policy raises on its 10th call: the probe, 2 batches of 4 steps, then the 3rd batch
        collector = DistributedDataCollector(
            partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=True),
            helpers.bomb_policy(after=10),
            frames_per_batch=8,
            total_frames=-1,
            num_collectors=1,
            launcher=None,
            **START,
        )
        it = iter(collector)
        assert [next(it).batch_size for _ in range(2)] == [torch.Size([2, 4])] * 2
        with pytest.raises(
            WorkerError, match=r"rank 1 \(pid \d+ on .*\) raised \(in 'collect'\)"
        ) as err:
            next(it)
        assert "boom from the policy" in err.value.remote_traceback
        rank.join(
            60
        )  # the failure shut the collector down: STOP, and rank 1 left serve_distributed_collector
        assert rank.exitcode == 0 and dist.is_initialized()  # our group is still ours
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        if rank.is_alive():
            rank.kill()
            rank.join(10)
    assert children() - before == set()
