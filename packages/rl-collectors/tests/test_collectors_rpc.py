"""RPCDataCollector on a real torch.distributed.rpc group (TensorPipe over loopback).

One collector (trainer + 2 spawned RPC workers, async) starts in this file: exact frame
counts, unique trajectory ids, a weight update observed by the workers with its version,
timings, then a worker killed mid-run reported by rank, and nothing left running.
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
from rl_collectors._rpc import RPCDataCollector
from rl_collectors.exceptions import CollectorClosedError, WorkerError

HERE = str(Path(__file__).parent)
sys.path.insert(0, HERE)
from collectors_helpers import children  # noqa: E402

sys.path.remove(HERE)


def test_rpc_rejects_a_launcher_it_cannot_use():
    with pytest.raises(ValueError, match="launcher: expected 'mp' or 'submitit'"):
        RPCDataCollector(lambda: None, frames_per_batch=8, launcher="submitit_delayed")


@pytest.mark.timeout(400)
def test_rpc_async_collects_updates_weights_and_reports_a_killed_worker():
    sys.path.insert(0, HERE)
    import collectors_helpers as helpers

    before = children()
    collector = RPCDataCollector(
        partial(helpers.make_cartpole, 2),
        helpers.greedy_policy(prefer=1),
        frames_per_batch=8,
        total_frames=20,
        num_collectors=2,
        sync=False,
        collector_kwargs={"exploration_type": "deterministic"},
        start_timeout=300.0,
        timeout=120.0,
    )
    pids = [info["pid"] for info in collector.rank_info]
    try:
        batches = list(collector)
        assert sum(b.numel() for b in batches) == 20 and batches[-1].batch_size == torch.Size(
            [2, 2]
        )
        ids = torch.cat([b["collector", "traj_ids"].reshape(-1) for b in batches])
        assert set((ids % 2).tolist()) <= {0, 1} and all((b["action"] == 1).all() for b in batches)
        version = collector.update_policy_weights_(helpers.greedy_policy(prefer=0))
        collector.total_frames = (
            -1
        )  # keep collecting: the first fresh batch carries the new weights
        it = iter(collector)
        fresh = [
            b
            for b in (next(it) for _ in range(4))
            if (b["collector", "policy_version"] == version).all()
        ]
        assert fresh and all((b["action"] == 0).all() for b in fresh)
        assert "Collector RPC workers (sum over 2)" in collector.timing_report()
        os.kill(pids[1], signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(WorkerError, match="rank 2") as err:
            for _ in range(10_000):
                next(it)
        assert time.monotonic() - start < 15.0 and err.value.worker_index == 1
        with pytest.raises(CollectorClosedError):
            collector.map_fn("os.getpid", [(), ()])
    finally:
        collector.shutdown()
        sys.path.remove(HERE)
    deadline = time.monotonic() + 15
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert children() - before == set()
