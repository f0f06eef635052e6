"""Off-policy path: DQN fed by a 2-worker MultiSyncCollector through prioritized replay.

Real worker processes (spawn) step CartPole; the learner samples from a
``TensorDictPrioritizedReplayBuffer``, runs ``DQNLoss``, writes ``|td_error|`` back as
priorities and pushes its weights to the workers, whose batches then carry the new
policy version and were produced by the new weights.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from rl_collectors import MultiSyncCollector
from rl_envs import Categorical, GymEnv
from rl_modules import MLP, EGreedyModule, QValueActor
from rl_objectives import DQNLoss, HardUpdate
from rl_replay import LazyTensorStorage, TensorDictPrioritizedReplayBuffer
from tensordict.nn import TensorDictSequential
from torch import nn

WORKERS, NUM_ENVS, STEPS = 2, 2, 32
FRAMES_PER_BATCH = WORKERS * NUM_ENVS * STEPS
ITERATIONS = 4
ALPHA, EPS = 0.6, 1e-6


def make_policy() -> tuple[TensorDictSequential, QValueActor]:
    """A Q-network and epsilon-greedy exploration over it (library classes only: picklable)."""
    spec = Categorical(2, shape=(NUM_ENVS,))
    qnet = QValueActor(MLP(4, 2, num_cells=32, depth=1, activation_class=nn.ReLU), spec=spec)
    explore = EGreedyModule(spec, eps_init=0.5, eps_end=0.5, annealing_num_steps=1)
    return TensorDictSequential(qnet, explore), qnet


@pytest.mark.timeout(120)
def test_dqn_prioritized_multisync(no_leaks) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    policy, qnet = make_policy()
    make_env = partial(GymEnv, "CartPole-v1", num_envs=NUM_ENVS, categorical_action_encoding=True)
    buffer = TensorDictPrioritizedReplayBuffer(
        alpha=ALPHA,
        beta=0.4,
        eps=EPS,
        storage=LazyTensorStorage(FRAMES_PER_BATCH * ITERATIONS),
        batch_size=64,
    )
    loss_fn = DQNLoss(qnet, gamma=0.99, delay_value=True)
    target_updater = HardUpdate(loss_fn, value_network_update_interval=4)
    optim = torch.optim.Adam(loss_fn.value_network.parameters(), lr=1e-3)
    collector = MultiSyncCollector(
        [make_env] * WORKERS,
        policy,
        frames_per_batch=FRAMES_PER_BATCH,
        total_frames=FRAMES_PER_BATCH * ITERATIONS,
        timeout=60.0,
        start_timeout=90.0,
        num_threads=1,
    )
    version, traj_ids = 0, []
    try:
        for batch in collector:
            assert batch.batch_size == (WORKERS, NUM_ENVS, STEPS)
            # every frame of the batch was produced by the weights the learner last pushed
            assert (batch["collector", "policy_version"] == version).all()
            with torch.no_grad():
                expected = qnet(batch.select("observation").clone())["action_value"]
            torch.testing.assert_close(batch["action_value"], expected, atol=1e-5, rtol=1e-5)
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
                check_priorities(buffer, sample)
            version = collector.update_policy_weights_()
    finally:
        collector.shutdown()
    assert version == ITERATIONS
    assert len(buffer) == FRAMES_PER_BATCH * ITERATIONS
    # trajectory ids never collide across workers
    ids = torch.stack(traj_ids)  # [iteration, worker, env, T]
    per_worker = [set(ids[:, w].unique().tolist()) for w in range(WORKERS)]
    assert not per_worker[0] & per_worker[1]


def check_priorities(buffer: TensorDictPrioritizedReplayBuffer, sample) -> None:
    """``update_tensordict_priority`` sets each sampled row's priority from its td_error."""
    td_error = sample["td_error"]
    assert td_error.shape == sample["index"].shape and (td_error >= 0).all()
    assert sample["priority_weight"].shape == td_error.shape
    assert (sample["priority_weight"] > 0).all() and (sample["priority_weight"] <= 1 + 1e-6).all()
    buffer.update_tensordict_priority(sample)
    index, counts = sample["index"].unique(return_counts=True)
    once = index[counts == 1]  # a row drawn twice keeps one of its two values
    rows = (sample["index"].unsqueeze(1) == once).nonzero()[:, 0]
    leaves = buffer.sampler.tree.leaves[sample["index"][rows]]
    expected = (td_error[rows].double() + EPS) ** ALPHA
    torch.testing.assert_close(leaves, expected, rtol=1e-5, atol=1e-8)
