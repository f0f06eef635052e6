"""PPO end to end: rl-modules' ProbabilisticActor + ValueOperator -> Collector -> GAE -> buffer
-> ClipPPOLoss.

Real CartPole (a gymnasium vector env), real optimiser steps. Checks the layout of the
collected batches, that nothing is NaN, and that a few PPO iterations raise the mean
episode return well above what the untrained policy gets.
"""

from __future__ import annotations

import pytest
import torch
from rl_collectors import Collector
from rl_envs import GymEnv, InitTracker, RewardSum, StepCounter, TransformedEnv
from rl_modules import MLP, ProbabilisticActor, ValueOperator
from rl_objectives import GAE, ClipPPOLoss
from rl_replay import LazyTensorStorage, SamplerWithoutReplacement, TensorDictReplayBuffer
from tensordict.nn import TensorDictModule
from torch import nn

NUM_ENVS, STEPS = 4, 64
FRAMES_PER_BATCH = NUM_ENVS * STEPS
ITERATIONS = 16


def make_env(seed: int) -> TransformedEnv:
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=NUM_ENVS,
                                categorical_action_encoding=True), StepCounter())
    env.append_transform(InitTracker())
    env.append_transform(RewardSum())
    env.set_seed(seed)
    return env


def mlp(n_in: int, n_out: int, out_std: float) -> MLP:
    net = MLP(n_in, n_out, num_cells=64, depth=2, activation_class=nn.Tanh)
    for layer in net:
        if isinstance(layer, nn.Linear):
            nn.init.orthogonal_(layer.weight, 2**0.5)
            nn.init.zeros_(layer.bias)
    nn.init.orthogonal_(net[-1].weight, out_std)
    return net


def make_agent(n_obs: int, n_act: int) -> tuple[ProbabilisticActor, ValueOperator]:
    actor = ProbabilisticActor(
        TensorDictModule(mlp(n_obs, n_act, 0.01), ["observation"], ["logits"]),
        ["logits"],
        distribution_class=torch.distributions.Categorical,
        return_log_prob=True,
    )
    critic = ValueOperator(mlp(n_obs, 1, 1.0))
    return actor, critic


def check_layout(batch, seen_traj_ids: set[int]) -> None:
    """Time last, rollout keys in the root and under "next", trajectory ids consistent."""
    assert batch.batch_size == torch.Size([NUM_ENVS, STEPS])
    assert batch["observation"].shape == (NUM_ENVS, STEPS, 4)
    assert batch["next", "observation"].shape == (NUM_ENVS, STEPS, 4)
    assert batch["action"].shape == (NUM_ENVS, STEPS)
    assert batch["sample_log_prob"].shape == (NUM_ENVS, STEPS)
    for key in ("reward", "done", "terminated", "truncated", "step_count", "episode_reward"):
        assert batch["next", key].shape == (NUM_ENVS, STEPS, 1), key
    done = batch["next", "done"]
    assert torch.equal(done, batch["next", "terminated"] | batch["next", "truncated"])
    # time is the last dim: the step after a done starts a trajectory, the others do not
    is_init = batch["is_init"].squeeze(-1)
    assert torch.equal(is_init[:, 1:], done[:, :-1].squeeze(-1))
    step_count = batch["step_count"].squeeze(-1)
    assert (step_count[:, 1:][~is_init[:, 1:]] == step_count[:, :-1][~is_init[:, 1:]] + 1).all()
    assert (batch["next", "step_count"] == batch["step_count"] + 1).all()
    # the observation at t+1 is ("next", "observation") at t unless the sub-env was reset
    same = ~done[:, :-1].squeeze(-1)
    assert torch.equal(
        batch["observation"][:, 1:][same], batch["next", "observation"][:, :-1][same]
    )
    # trajectory ids: constant within a row until a done, new after it, never reused
    traj = batch["collector", "traj_ids"]
    assert traj.shape == (NUM_ENVS, STEPS) and traj.dtype == torch.int64
    changes = traj[:, 1:] != traj[:, :-1]
    assert torch.equal(changes, done[:, :-1].squeeze(-1))
    ids = set(traj.unique().tolist())
    rows = [set(row.tolist()) for row in traj]
    assert sum(len(r) for r in rows) == len(ids), "a trajectory id appears in two sub-envs"
    continuing = {int(row[0]) for row in traj}  # a row's first id may continue the last batch
    assert not (ids - continuing) & seen_traj_ids, "trajectory ids reused across batches"
    seen_traj_ids |= ids


def finite(td) -> bool:
    return all(bool(torch.isfinite(v.float()).all()) for v in td.values(True, True))


@pytest.mark.timeout(90)
def test_ppo_cartpole_learns() -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    env = make_env(seed=0)
    actor, critic = make_agent(4, env.action_spec.n)
    collector = Collector(
        env, actor, frames_per_batch=FRAMES_PER_BATCH, total_frames=FRAMES_PER_BATCH * ITERATIONS
    )
    advantage = GAE(gamma=0.98, lmbda=0.8, value_network=critic, average_gae=True)
    buffer = TensorDictReplayBuffer(
        storage=LazyTensorStorage(FRAMES_PER_BATCH),
        sampler=SamplerWithoutReplacement(),
        batch_size=64,
    )
    loss_fn = ClipPPOLoss(
        actor, critic, clip_epsilon=0.2, entropy_coef=0.0, critic_coef=0.5, loss_critic_type="l2"
    )
    optim = torch.optim.Adam(loss_fn.parameters(), lr=2e-3, eps=1e-5)
    returns: list[list[float]] = []
    seen: set[int] = set()
    try:
        for i, batch in enumerate(collector):
            check_layout(batch, seen)
            assert (batch["collector", "policy_version"] == i).all()
            done = batch["next", "done"].squeeze(-1)
            returns.append(batch["next", "episode_reward"][done].flatten().tolist())
            with torch.no_grad():
                advantage(batch)
            assert batch["advantage"].shape == (NUM_ENVS, STEPS, 1)
            assert batch["value_target"].shape == (NUM_ENVS, STEPS, 1)
            assert finite(batch)
            buffer.empty()
            buffer.extend(batch.reshape(-1))
            assert len(buffer) == FRAMES_PER_BATCH
            for _ in range(4):
                seen_rows = []
                for _ in range(FRAMES_PER_BATCH // 64):
                    minibatch = buffer.sample()
                    seen_rows.append(minibatch["index"])
                    losses = loss_fn(minibatch)
                    loss = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
                    assert loss.ndim == 0 and torch.isfinite(loss)
                    optim.zero_grad(set_to_none=True)
                    loss.backward()
                    grads = [p.grad for p in loss_fn.parameters() if p.grad is not None]
                    assert grads and all(torch.isfinite(g).all() for g in grads)
                    nn.utils.clip_grad_norm_(loss_fn.parameters(), 0.5)
                    optim.step()
                # SamplerWithoutReplacement: one epoch visits every stored frame once
                assert torch.equal(
                    torch.cat(seen_rows).sort().values, torch.arange(FRAMES_PER_BATCH)
                )
            assert collector.update_policy_weights_() == i + 1
    finally:
        collector.shutdown()
    assert collector.frames == FRAMES_PER_BATCH * ITERATIONS
    first = [r for batch in returns[:3] for r in batch]
    last = [r for batch in returns[-3:] for r in batch]
    assert first and last
    mean_first, mean_last = sum(first) / len(first), sum(last) / len(last)
    # an untrained CartPole policy gets ~20; PPO reaches >100 within these ~4k frames
    assert mean_last > max(2.5 * mean_first, 60.0), (mean_first, mean_last)
