"""User code as users write it reaches every process-based collector, and start-up
failures come back as the worker's own exception.

This file is imported by pytest from a path that is not on ``sys.path`` (importlib
mode), so what it defines is exactly what a notebook cell defines: a fresh process cannot
import it, and it must travel by value. Nothing here is put on ``sys.path``.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from rl_collectors import (
    AsyncBatchedCollector,
    DistributedDataCollector,
    MultiAsyncCollector,
    MultiSyncCollector,
    RPCDataCollector,
    WorkerError,
)
from rl_envs import GymEnv
from tensordict.nn import TensorDictModule

ROOT = Path(__file__).resolve().parents[3]
HERE = str(Path(__file__).resolve().parent)
sys.path.insert(0, HERE)  # for this import only: the workers must not find this directory
from collectors_helpers import children  # noqa: E402

sys.path.remove(HERE)


def make_env():
    return GymEnv("CartPole-v1", categorical_action_encoding=True)


def broken_env():
    """Builds here (AsyncBatchedCollector probes its specs in this process), fails in a worker."""
    if multiprocessing.parent_process() is None:
        return make_env()
    raise ValueError("no env called Nope-v0 here")


class TinyPolicy(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.linear(obs).argmax(-1)


def policy() -> TensorDictModule:
    return TensorDictModule(TinyPolicy(), in_keys=["observation"], out_keys=["action"])


def build(kind: str, create_env_fn, pol, **extra):
    """Each process-based collector, as small and quick to start as it gets."""
    common = dict(frames_per_batch=8, total_frames=16, **extra)
    if kind == "MultiSyncCollector":
        return MultiSyncCollector([create_env_fn, create_env_fn], pol, start_timeout=120, **common)
    if kind == "MultiAsyncCollector":
        return MultiAsyncCollector([create_env_fn, create_env_fn], pol, start_timeout=120, **common)
    if kind == "AsyncBatchedCollector":
        return AsyncBatchedCollector(
            create_env_fn, pol, num_envs=2, backend="multiprocessing", timeout=120, **common
        )
    if kind == "DistributedDataCollector":
        return DistributedDataCollector(
            create_env_fn, pol, num_collectors=2, backend="gloo", start_timeout=120, **common
        )
    if kind == "RPCDataCollector":
        return RPCDataCollector(create_env_fn, pol, num_collectors=2, start_timeout=120, **common)
    raise AssertionError(kind)


# RPCDataCollector: torch's RPC starts once per process (pytorch/pytorch#46491), so its cases run
# in a fresh interpreter each (test_rpc_in_a_fresh_process below), not in this one.
KINDS = [
    "MultiSyncCollector",
    "MultiAsyncCollector",
    "AsyncBatchedCollector",
    "DistributedDataCollector",
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_lambdas_closures_and_unimportable_code_reach_the_workers(kind: str) -> None:
    before = children()
    env_id = "CartPole-v1"
    seen = []

    def postproc(batch):  # a closure over this test's locals, run in the main process
        seen.append(batch.numel())
        return batch

    extra = (
        {} if kind in ("DistributedDataCollector", "RPCDataCollector") else {"postproc": postproc}
    )
    collector = build(kind, lambda: GymEnv(env_id, categorical_action_encoding=True), policy(),
                      **extra)
    try:
        frames = sum(batch.numel() for batch in collector)
    finally:
        collector.shutdown()
    assert frames == 16
    if extra:
        assert sum(seen) == 16
    assert children() - before == set()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_a_factory_that_raises_is_reported_with_its_own_exception(kind: str) -> None:
    before = children()
    with pytest.raises(WorkerError) as info:
        collector = build(
            kind, broken_env, None
        )  # AsyncBatchedCollector starts lazily: its first batch fails
        try:
            next(iter(collector))
        finally:
            collector.shutdown()
    message = str(info.value)
    first_line = message.splitlines()[0]
    assert "ValueError: no env called Nope-v0 here" in first_line, message
    assert "in broken_env" in (info.value.remote_traceback or ""), (
        message
    )  # the worker's own traceback
    assert children() - before == set()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", KINDS)
def test_an_argument_that_cannot_be_pickled_is_named(kind: str) -> None:
    before = children()
    lock = threading.Lock()

    def env_with_a_lock():  # captures a lock: neither pickle nor cloudpickle can send it
        assert lock is not None
        return make_env()

    with pytest.raises(pickle.PicklingError, match="cannot be sent to a worker process") as info:
        build(kind, env_with_a_lock, None)
    assert "create_env_fn" in str(info.value) and "_thread.lock" in str(info.value)
    assert children() - before == set()


USER_CODE = '''
import torch
from tensordict.nn import TensorDictModule
from rl_envs import GymEnv, ParallelEnv
from rl_collectors import MultiSyncCollector

def make_env():
    return GymEnv("CartPole-v1", categorical_action_encoding=True)

class Policy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)
    def forward(self, obs):
        return self.linear(obs).argmax(-1)

policy = TensorDictModule(Policy(), in_keys=["observation"], out_keys=["action"])
with ParallelEnv(2, make_env) as env:
    print("ParallelEnv", tuple(env.rollout(3, policy).shape))
collector = MultiSyncCollector([make_env, make_env], policy, frames_per_batch=8, total_frames=16)
print("MultiSyncCollector", sum(b.numel() for b in collector))
collector.shutdown()
'''


def _run_user_code(how: str) -> str:
    env = {**os.environ, "PYTHONPATH": ""}
    args = [sys.executable, "-c", USER_CODE] if how == "-c" else [sys.executable, "-"]
    out = subprocess.run(
        args,
        input=None if how == "-c" else USER_CODE,
        capture_output=True,
        text=True,
        timeout=400,
        cwd=ROOT,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


@pytest.mark.timeout(450)
@pytest.mark.parametrize("how", ["-c", "stdin"])
def test_main_module_code_from_python_c_and_stdin(how: str) -> None:
    out = _run_user_code(how)
    assert "ParallelEnv (2, 3)" in out and "MultiSyncCollector 16" in out, out  # [] envs


RPC_CODE = {
    "lambda": """
import torch
from rl_envs import GymEnv
from rl_collectors import RPCDataCollector
env_id = "CartPole-v1"
collector = RPCDataCollector(
    lambda: GymEnv(env_id), None, frames_per_batch=8, total_frames=16, num_collectors=2
)
print("frames", sum(b.numel() for b in collector))
collector.shutdown()
try:
    RPCDataCollector(lambda: GymEnv(env_id), None, frames_per_batch=8, num_collectors=2)
except Exception as err:
    print("again:", type(err).__name__, str(err)[:60])
""",
    "raises": """
from rl_collectors import RPCDataCollector, WorkerError
def broken_env():
    raise ValueError("no env called Nope-v0 here")
try:
    RPCDataCollector(broken_env, None, frames_per_batch=8, total_frames=16, num_collectors=2)
except WorkerError as err:
    print("reported:", str(err).splitlines()[0])
""",
}


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", sorted(RPC_CODE))
def test_rpc_in_a_fresh_process(case: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", RPC_CODE[case]],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    if case == "lambda":
        assert "frames 16" in out.stdout, out.stderr[-3000:]
        assert (
            "again: CollectorError RPCDataCollector: torch.distributed.rpc cannot be init"
            in out.stdout
        )
    else:
        expected = (
            "reported: worker 0: RPC worker 1 (rank 1) failed to start: "
            "ValueError: no env called Nope-v0 here"
        )
        assert expected in out.stdout, out.stdout + out.stderr[-3000:]
