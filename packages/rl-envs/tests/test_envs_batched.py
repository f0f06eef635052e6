"""``SerialEnv`` / ``ParallelEnv``: layout, partial resets, seeding, worker failures, shutdown.

Real processes and real gymnasium envs. ``FlakyEnv`` (below) must be importable by the
spawned workers, which re-import it by module name: the tests directory is put on
``sys.path`` while workers start (see ``spawnable``).
"""

from __future__ import annotations

import functools
import gc
import os
import pickle
import signal
import threading
import time

import psutil
import pytest
import torch
from rl_envs import (
    Categorical,
    Composite,
    EnvBase,
    GymEnv,
    ParallelEnv,
    SerialEnv,
    Unbounded,
    WorkerError,
)
from rl_envs.exceptions import EnvClosedError
from tensordict import TensorDict

try:
    from ._processes import children, importable_by_workers, settled, spawnable
except ImportError:  # a spawned worker imports this file as a top-level module
    from _processes import children, importable_by_workers, settled, spawnable

CARTPOLE = functools.partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=True)


class FlakyEnv(EnvBase):
    """A one-env counter written with the simple pair; raises at step ``fail_at``."""

    def __init__(self, fail_at: int | None = None, hang_at: int | None = None):
        super().__init__(batch_size=())
        self.observation_spec = Composite(observation=Unbounded((1,)))
        self.action_spec = Categorical(2)
        self.fail_at, self.hang_at, self.t = fail_at, hang_at, 0

    def _reset(self, td):
        self.t = 0
        return TensorDict(observation=torch.rand(1, generator=self._rng))

    def _step(self, td):
        self.t += 1
        if self.t == self.fail_at:
            raise RuntimeError(f"boom at step {self.t}")
        if self.t == self.hang_at:
            time.sleep(120)
        obs = torch.full((1,), float(self.t))
        return TensorDict(observation=obs, reward=obs.clone(), terminated=obs >= 4)


importable_by_workers(__name__, FlakyEnv)


def _torch_shm(pids: list[int]) -> list[str]:
    """Shared-memory segments torch created for these processes (``torch_<pid>_...``)."""
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return [n for n in names if any(n.startswith(f"torch_{p}_") for p in pids)]


def _assert_no_leftovers(before: set[int], pids: list[int]) -> None:
    assert settled(before) == set()
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids
    )
    assert _torch_shm([os.getpid(), *pids]) == []


# -- SerialEnv (in process) ---------------------------------------------------------------
def test_serial_layout_and_specs():
    with SerialEnv(3, CARTPOLE) as env:
        assert env.batch_size == (3, 2)
        assert env.observation_spec["observation"].shape == (3, 2, 4)
        assert env.action_spec.shape == (3, 2)
        assert env.done_spec["done"].shape == (3, 2, 1)
        data = env.rollout(7, break_when_any_done=False)
        assert data.batch_size == (3, 2, 7)
        assert data["next", "reward"].shape == (3, 2, 7, 1)
        assert env.observation_spec.is_in(data[..., -1]["next"].select("observation"))
        # every sub-env writes straight into its row of the batched buffers
        root, _ = env.buffers()
        sub_root, _ = env._envs[2].buffers()
        assert sub_root["observation"].data_ptr() == root["observation"][2].data_ptr()


def test_serial_partial_reset_and_seed():
    env = SerialEnv(3, FlakyEnv)
    assert env.set_seed(5) == 8  # seed + 3 sub-envs
    td = env.reset()
    assert td["observation"].shape == (3, 1)
    td["action"] = torch.ones(3, dtype=torch.int64)
    _, root = env.step_and_maybe_reset(td)
    assert root["observation"].flatten().tolist() == [1.0, 1.0, 1.0]
    mask = torch.tensor([False, True, False])
    out = env.reset(root.set("_reset", mask))
    assert out["observation"][0].item() == 1.0 and out["observation"][2].item() == 1.0
    assert 0.0 <= out["observation"][1].item() < 1.0  # fresh reset draw in [0, 1)
    env.close()
    env.close()
    with pytest.raises(EnvClosedError):
        env.fast_step(torch.ones(3, dtype=torch.int64))


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="num_workers"):
        SerialEnv(0, FlakyEnv)
    with pytest.raises(ValueError, match="create_env_kwargs"):
        SerialEnv(2, FlakyEnv, [{}])
    with pytest.raises(TypeError, match="create_env_fn"):
        SerialEnv(2, "CartPole-v1")
    before = children()
    with pytest.raises(pickle.PicklingError,
                       match="create_env_kwargs: cannot be sent to a worker process"):
        ParallelEnv(2, FlakyEnv, {"lock": threading.Lock()})  # not even cloudpickle can send a lock
    with pytest.raises(ValueError, match="timeout"):
        ParallelEnv(2, FlakyEnv, timeout=0)
    assert children() - before == set()  # nothing was started


# -- ParallelEnv (spawned workers) --------------------------------------------------------
NESTED = functools.partial(SerialEnv, 1, CARTPOLE)  # each worker runs a SerialEnv of a GymEnv


@pytest.fixture(scope="module")
def penv():
    before = children()
    with spawnable():
        env = ParallelEnv(2, NESTED)
    pids = env.worker_pids
    yield env
    env.close()
    env.close()
    _assert_no_leftovers(before, pids)


@pytest.mark.timeout(300)
def test_parallel_layout_and_shared_buffers(penv):
    assert penv.batch_size == (2, 1, 2)
    assert penv.observation_spec["observation"].shape == (2, 1, 2, 4)
    assert set(penv.worker_pids) <= children()
    root, nxt = penv.buffers()
    assert all(leaf.is_shared() for leaf in (*root.values(True, True), *nxt.values(True, True)))
    data = penv.rollout(5, break_when_any_done=False)
    assert data.batch_size == (2, 1, 2, 5)
    assert data["next", "done"].dtype == torch.bool


@pytest.mark.timeout(300)
def test_parallel_equals_serial_for_same_seeds(penv):
    with SerialEnv(2, NESTED) as senv:
        for env in (penv, senv):
            assert env.set_seed(11) == 15  # seed + 4 sub-envs
        ref = senv.rollout(60, break_when_any_done=False)
        out = penv.rollout(60, break_when_any_done=False)
        assert ref["next", "done"].any()  # episodes ended and were reset inside the rollout
        assert (out == ref).all()
        # step_and_maybe_reset path, and a different seed gives different data
        td_s, td_p = senv.reset(), penv.reset()
        assert (td_s == td_p).all()
        for _ in range(30):
            action = senv.rand_action(td_s.clone())["action"]
            td_s, root_s = senv.step_and_maybe_reset(td_s.set("action", action))
            td_p, root_p = penv.step_and_maybe_reset(td_p.set("action", action.clone()))
            assert (td_s == td_p).all() and (root_s == root_p).all()
            td_s, td_p = root_s, root_p
    penv.set_seed(12)
    assert not (penv.rollout(60, break_when_any_done=False) == out).all()


@pytest.mark.timeout(300)
def test_parallel_partial_reset(penv):
    td = penv.reset()
    td = penv.step(penv.rand_action(td))
    before = td["next"].exclude("reward").clone()
    mask = torch.zeros(2, 1, 2, dtype=torch.bool)
    mask[1, 0, 0] = True  # one sub-env of worker 1
    out = penv.reset(before.clone().set("_reset", mask))
    changed = (out["observation"] != before["observation"]).any(-1)
    assert changed.tolist() == mask.tolist()
    root, _ = penv.buffers()
    assert (root["observation"] == out["observation"]).all()


@pytest.mark.timeout(300)
def test_parallel_bound_to_other_buffers_copies_into_them(penv):
    root, nxt = penv._alloc_buffers()
    penv.bind_buffers(root, nxt)
    try:
        penv.fast_reset(None)
        nxt_out, root_out = penv.fast_step(penv.action_spec.rand())
        assert nxt_out is nxt and root_out is root
        assert (root == penv._own_root).all() and (nxt == penv._own_next).all()
    finally:
        penv.bind_buffers(penv._own_root, penv._own_next)


@pytest.mark.timeout(300)
def test_worker_error_in_step_names_worker_with_traceback():
    before = children()
    with spawnable():
        env = ParallelEnv(2, FlakyEnv, [{}, {"fail_at": 3}])
    pids = env.worker_pids
    env.reset()
    action = torch.ones(2, dtype=torch.int64)
    for t in (1, 2):
        nxt, _ = env.fast_step(action)
        assert nxt["observation"].flatten().tolist() == [float(t), float(t)]
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"ParallelEnv worker 1: raised during 'step'") as info:
        env.fast_step(action)
    assert time.monotonic() - start < 15
    assert info.value.worker_index == 1
    assert "Traceback" in str(info.value) and "RuntimeError: boom at step 3" in str(info.value)
    assert env.is_closed
    env.close()  # idempotent after the automatic shutdown
    with pytest.raises(EnvClosedError):
        env.fast_step(action)
    _assert_no_leftovers(before, pids)


@pytest.mark.timeout(300)
def test_hung_worker_times_out_and_is_terminated():
    before = children()
    with spawnable():
        env = ParallelEnv(1, FlakyEnv, {"hang_at": 2})
    pids = env.worker_pids
    env._pool.timeout = 1.0  # start-up needed the long default; steps get a short one
    env.reset()
    env.fast_step(torch.tensor([1]))
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker 0: did not answer 'step' within 1 s"):
        env.fast_step(torch.tensor([1]))
    assert time.monotonic() - start < 30  # 1 s deadline + close: join 5 s, then terminate
    assert env.is_closed
    _assert_no_leftovers(before, pids)


@pytest.mark.timeout(300)
def test_killed_worker_is_detected():
    before = children()
    env = ParallelEnv(2, CARTPOLE)
    pids = env.worker_pids
    env.reset()
    os.kill(pids[1], signal.SIGKILL)
    start = time.monotonic()
    with pytest.raises(
        WorkerError, match=r"worker 1: died \(pid \d+\) during 'step'.*SIGKILL"
    ) as info:
        env.fast_step(env.action_spec.rand())
    assert time.monotonic() - start < 15
    assert info.value.worker_index == 1 and info.value.remote_traceback is None
    env.close()
    _assert_no_leftovers(before, pids)


@pytest.mark.timeout(300)
def test_create_env_fn_raising_in_worker_is_reported():
    before = children()
    start = time.monotonic()
    with pytest.raises(WorkerError, match=r"worker 1: raised during 'create_env_fn'") as info:
        ParallelEnv(2, CARTPOLE, [{}, {"num_envs": -1}])
    assert "Traceback" in info.value.remote_traceback
    assert "num_envs must be None (one env, batch []) or an int >= 1" in info.value.remote_traceback
    assert time.monotonic() - start < 240
    _assert_no_leftovers(before, [])


@pytest.mark.timeout(300)
def test_garbage_collected_env_ends_its_workers():
    before = children()
    env = ParallelEnv(1, CARTPOLE)
    pids = env.worker_pids
    assert set(pids) <= children()
    del env
    gc.collect()
    _assert_no_leftovers(before, pids)
