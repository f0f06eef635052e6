"""The submitit launchers with submitit's LocalExecutor (no Slurm here), world size 2.

- ``launcher="submitit"``: the trainer (this process) submits one collector rank as a
  local submitit job and collects asynchronously with exact frame counts.
- ``submitit_delayed_launcher``: calling the decorated function submits it as the
  trainer job, then one collector job that connects to it; the function's result comes
  back through submitit.

Each local job is a submitit controller process plus the task process; the tests check
that none is left. Functions shipped to the jobs are pickled by value (cloudpickle).
"""

from __future__ import annotations

import socket
import sys
import time
from functools import partial
from pathlib import Path

import cloudpickle
import pytest
import torch
from rl_collectors._distributed import DistributedDataCollector
from rl_collectors._launchers import SubmititLauncher, submitit_delayed_launcher

HERE = str(Path(__file__).parent)
sys.path.insert(0, HERE)
from collectors_helpers import children  # noqa: E402

sys.path.remove(HERE)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def wait_gone(before: set[int], timeout: float = 20.0) -> set[int]:
    deadline = time.monotonic() + timeout
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    return children() - before


def cartpole():
    """An env constructor the ranks can unpickle (by reference: rl_envs is importable there)."""
    from rl_envs import GymEnv

    return partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=True)


def test_submitit_launcher_validates_its_executor(tmp_path):
    with pytest.raises(ValueError, match="executor: expected 'auto', 'slurm', 'local'"):
        SubmititLauncher("k8s", tmp_path)
    assert SubmititLauncher("local", tmp_path).default_addr == "127.0.0.1"
    with pytest.raises(ValueError, match="num_jobs: expected an int >= 1"):
        submitit_delayed_launcher(0)


@pytest.mark.timeout(400)
def test_submitit_local_executor_runs_an_async_rank(tmp_path):
    before = children()
    collector = DistributedDataCollector(
        cartpole(),
        None,
        frames_per_batch=8,
        total_frames=20,
        num_collectors=1,
        sync=False,
        launcher="submitit",
        submitit_executor="local",
        submitit_folder=str(tmp_path),
        start_timeout=300.0,
        timeout=120.0,
    )
    try:
        assert collector.rank_info[0]["pid"] not in before
        batches = list(collector)
        assert [b.batch_size for b in batches] == [
            torch.Size([2, 4]),
            torch.Size([2, 4]),
            torch.Size([2, 2]),
        ]
        ids = torch.cat([b["collector", "traj_ids"] for b in batches], -1)
        assert ids[0, 0] != ids[1, 0]  # one trajectory per sub-env at the start
    finally:
        collector.shutdown()
    assert wait_gone(before) == set() and not torch.distributed.is_initialized()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def delayed_main(port: int) -> list[list[int]]:
    """The trainer job: collect two batches from the one collector job."""
    collector = DistributedDataCollector(
        cartpole(),
        None,
        frames_per_batch=8,
        total_frames=16,
        num_collectors=1,
        launcher="submitit_delayed",
        tcp_port=port,
        start_timeout=300.0,
    )
    try:
        return [list(b.batch_size) for b in collector]
    finally:
        collector.shutdown()


@pytest.mark.timeout(400)
def test_submitit_delayed_launcher_runs_trainer_and_collector_jobs(tmp_path):
    before = children()
    port = _free_port()
    main = submitit_delayed_launcher(num_jobs=1, tcp_port=port, executor="local", folder=tmp_path)(
        delayed_main
    )
    job = main(port)
    jobs = [job, *job.collector_jobs]
    deadline = time.monotonic() + 300
    while not all(j.done() for j in jobs) and time.monotonic() < deadline:
        time.sleep(0.2)
    try:
        assert job.result() == [[2, 4], [2, 4]]
        assert all(j.state == "FINISHED" for j in jobs)
    finally:
        for j in jobs:
            if not j.done():
                j.cancel()
    assert wait_gone(before) == set()
