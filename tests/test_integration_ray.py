"""Ray path: the DQN off-policy path with ``RayCollector`` actors on a local Ray.

A local Ray (``num_cpus=2``) hosts two collector actors, each stepping a vector of
CartPole envs with a Boltzmann policy over a Q-network; the learner samples from a
``TensorDictPrioritizedReplayBuffer``, runs ``DQNLoss``, writes the TD errors back as
priorities and pushes its weights through the object store: every later batch carries
the new policy version and was produced by the new weights. Ray is shut down at the end
and leaves no process behind.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import time
from functools import partial

import psutil
import pytest
import torch
from rl_collectors import RayCollector
from rl_envs import GymEnv
from rl_objectives import DQNLoss, HardUpdate
from rl_replay import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from tensordict.nn import ProbabilisticTensorDictModule, TensorDictModule, TensorDictSequential
from torch import nn

pytestmark = [
    pytest.mark.filterwarnings("ignore:.*pkg_resources is deprecated.*"),
    pytest.mark.filterwarnings("ignore:.*RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO.*"),
    pytest.mark.filterwarnings("ignore:.*subprocess .* is still running.*:ResourceWarning"),
]

ACTORS, NUM_ENVS, STEPS = 2, 2, 16
FRAMES_PER_BATCH = ACTORS * NUM_ENVS * STEPS
ITERATIONS = 3
RAY_PROCESSES = ("raylet", "gcs_server", "default_worker.py", "ray::", "log_monitor", "dashboard")


def import_ray():
    """Ray with its `uv run` hook off: the actors must use this very virtual environment."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("ray is not installed")
    os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    import ray
    import ray._private.ray_constants as constants

    constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False  # in case ray was imported before
    return ray


def start_local_ray(ray, attempts: int = 2) -> None:
    """``ray.init`` on this machine; a second try when the raylet misses Ray's fixed 30 s
    registration deadline (it does on a heavily loaded 2-core box)."""
    for attempt in range(attempts):
        try:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
            return
        except Exception as err:  # Ray raises a bare Exception for this timeout
            ray.shutdown()
            reap_ray_processes(grace=10.0)  # a failed start may leave its GCS running
            if "timed out during startup" not in str(err) or attempt == attempts - 1:
                raise


def ray_processes() -> list[psutil.Process]:
    """This test's Ray processes (GCS, raylet, workers): children of this process."""
    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            line = " ".join(proc.cmdline()) or proc.name()
            if proc.status() != psutil.STATUS_ZOMBIE and any(
                name in line for name in RAY_PROCESSES
            ):
                found.append(proc)
        except psutil.Error:  # gone meanwhile
            pass
    return found


def reap_ray_processes(grace: float) -> list[psutil.Process]:
    """Wait up to ``grace`` seconds for this test's Ray processes to exit, then terminate the
    rest; returns those that had to be terminated."""
    deadline = time.monotonic() + grace
    while ray_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = ray_processes()
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    psutil.wait_procs(left, timeout=10.0)
    return left


def make_policy() -> tuple[TensorDictSequential, TensorDictModule]:
    """A Q-network and a Boltzmann policy over its values (library classes only: picklable)."""
    qnet = TensorDictModule(
        nn.Sequential(nn.Linear(4, 32), nn.ReLU(), nn.Linear(32, 2)),
        ["observation"],
        ["action_value"],
    )
    explore = ProbabilisticTensorDictModule(
        {"logits": "action_value"}, ["action"], distribution_class=torch.distributions.Categorical
    )
    return TensorDictSequential(qnet, explore), qnet


@pytest.mark.timeout(400)
def test_dqn_prioritized_with_ray_collector(no_leaks) -> None:
    ray = import_ray()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy, qnet = make_policy()
    buffer = TensorDictPrioritizedReplayBuffer(
        alpha=0.6, beta=0.4, storage=LazyTensorStorage(FRAMES_PER_BATCH * ITERATIONS), batch_size=32
    )
    loss_fn = DQNLoss(qnet, gamma=0.99, delay_value=True)
    target_updater = HardUpdate(loss_fn, value_network_update_interval=2)
    optim = torch.optim.Adam(loss_fn.value_network.parameters(), lr=1e-3)
    try:
        start_local_ray(ray)
        collector = RayCollector(
            partial(GymEnv, "CartPole-v1", num_envs=NUM_ENVS, categorical_action_encoding=True),
            policy,
            frames_per_batch=FRAMES_PER_BATCH,
            total_frames=FRAMES_PER_BATCH * ITERATIONS,
            num_collectors=ACTORS,
            remote_config={"num_cpus": 0.5},
            timeout=240.0,
            start_timeout=240.0,
        )
        try:
            versions, traj_ids = run_learner(
                collector, policy, qnet, buffer, loss_fn, optim, target_updater
            )
            actor_pids = [info["pid"] for info in collector.actor_info]
        finally:
            collector.shutdown()
        assert len(set(actor_pids)) == ACTORS and os.getpid() not in actor_pids
    finally:
        ray.shutdown()
    assert reap_ray_processes(grace=60.0) == [], "ray.shutdown() left processes running"
    assert versions == list(range(ITERATIONS))
    assert len(buffer) == FRAMES_PER_BATCH * ITERATIONS
    # rows [0, NUM_ENVS) come from actor 0, the rest from actor 1: their trajectories differ
    ids = torch.stack(traj_ids)  # [iteration, ACTORS * NUM_ENVS, T]
    assert not set(ids[:, :NUM_ENVS].unique().tolist()) & set(ids[:, NUM_ENVS:].unique().tolist())


def run_learner(collector, policy, qnet, buffer, loss_fn, optim, target_updater):
    """The DQN loop; checks each batch against the weights the learner last pushed."""
    versions, traj_ids, version = [], [], 0
    for batch in collector:
        assert batch.batch_size == (ACTORS * NUM_ENVS, STEPS)
        assert (batch["collector", "policy_version"] == version).all()
        with torch.no_grad():  # the actors ran exactly the learner's current weights
            expected = qnet(batch.select("observation").clone())["action_value"]
        torch.testing.assert_close(batch["action_value"], expected, atol=1e-5, rtol=1e-5)
        versions.append(version)
        traj_ids.append(batch["collector", "traj_ids"])
        buffer.extend(batch.reshape(-1))
        for _ in range(4):
            sample = buffer.sample()
            losses = loss_fn(sample)
            assert torch.isfinite(losses["loss"])
            optim.zero_grad(set_to_none=True)
            losses["loss"].backward()
            optim.step()
            target_updater.step()
            assert (sample["td_error"] >= 0).all()
            buffer.update_tensordict_priority(sample)
            leaves = buffer.sampler.tree.leaves[sample["index"]]
            assert torch.isfinite(leaves).all() and (leaves > 0).all()
        version = collector.update_policy_weights_()
    return versions, traj_ids
