"""rl-modules across packages: the losses take the modules unchanged, collectors honour
their exploration, and per-sub-env noise restarts on ``is_init`` inside a real collector."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from rl_collectors import Collector, MultiSyncCollector
from rl_envs import Bounded, Composite, EnvBase, GymEnv, InitTracker, TransformedEnv, Unbounded
from rl_modules import (
    MLP,
    Actor,
    EGreedyModule,
    IndependentNormal,
    OrnsteinUhlenbeckProcessModule,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    ValueOperator,
)
from rl_objectives import GAE, ClipPPOLoss, DQNLoss, SACLoss
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn


class StaggeredEnv(EnvBase):
    """Sub-env ``i`` terminates after ``3 + i`` steps; a 1-d action in [-5, 5]."""

    def __init__(self, n: int = 3) -> None:
        super().__init__(batch_size=(n,))
        self.observation_spec = Composite(observation=Unbounded((n, 1)), shape=(n,))
        self.action_spec = Bounded(-5.0, 5.0, shape=(n, 1))
        self.reward_spec = Unbounded((n, 1))
        self.length = 3 + torch.arange(n).unsqueeze(-1).float()
        self.count = torch.zeros(n, 1)

    def _reset(self, td):
        mask = torch.ones(self.batch_size[0], 1, dtype=torch.bool) if td is None else td["_reset"]
        self.count = torch.where(mask, 0.0, self.count)
        return TensorDict(observation=self.count.clone(), batch_size=self.batch_size)

    def _step(self, td):
        self.count = self.count + 1
        return TensorDict(observation=self.count.clone(), reward=torch.zeros_like(self.count),
                          terminated=self.count >= self.length, batch_size=self.batch_size)

    def _set_seed(self, seed):
        pass


def _gaussian_actor(env, dist, safe: bool = False):
    n_obs, n_act = env.observation_spec["observation"].shape[-1], env.action_spec.shape[-1]
    net = nn.Sequential(MLP(n_obs, 2 * n_act, num_cells=32, depth=2), NormalParamExtractor())
    return ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ["loc", "scale"],
        spec=env.action_spec,
        safe=safe,
        distribution_class=dist,
        return_log_prob=True,
    )


@pytest.mark.timeout(120)
@pytest.mark.parametrize("dist", [TanhNormal, IndependentNormal])
def test_ppo_trains_on_modules_unchanged(dist):
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=4), InitTracker())
    env.set_seed(0)
    actor = _gaussian_actor(env, dist, safe=dist is IndependentNormal)  # unbounded: projected
    critic = ValueOperator(MLP(3, 1, num_cells=32, depth=2))
    collector = Collector(env, actor, frames_per_batch=64, total_frames=128)
    loss_fn = ClipPPOLoss(actor, critic)
    gae = GAE(gamma=0.99, lmbda=0.95, value_network=critic)
    for batch in collector:
        assert env.action_spec.is_in(batch["action"][:, 0])
        with torch.no_grad():
            gae(batch)
        losses = loss_fn(batch.reshape(-1))
        total = losses["loss_objective"] + losses["loss_critic"] + losses["loss_entropy"]
        total.backward()
        assert torch.isfinite(total)
        assert all(torch.isfinite(p.grad).all() for p in actor.parameters() if p.grad is not None)
    collector.shutdown()


def test_sac_takes_a_tanh_actor_and_a_value_operator():
    env = GymEnv("Pendulum-v1", num_envs=2)
    actor = _gaussian_actor(env, TanhNormal)
    qvalue = ValueOperator(MLP(4, 1, num_cells=32, depth=2), in_keys=["observation", "action"])
    with torch.no_grad():
        batch = env.rollout(16, actor).reshape(-1)
    losses = SACLoss(actor, qvalue, num_qvalue_nets=2, action_spec=env.action_spec)(batch)
    (losses["loss_actor"] + losses["loss_qvalue"] + losses["loss_alpha"]).backward()
    assert all(torch.isfinite(losses[k]) for k in ("loss_actor", "loss_qvalue", "loss_alpha"))
    env.close()


def _dqn_policy(env, eps: float):
    qnet = QValueActor(MLP(4, 2, num_cells=16, depth=1), spec=env.action_spec)
    explore = EGreedyModule(env.action_spec, eps_init=eps, eps_end=eps, annealing_num_steps=1)
    return qnet, TensorDictSequential(qnet, explore)


def test_dqn_loss_takes_a_qvalue_actor_and_the_collector_honours_exploration_type():
    env = GymEnv("CartPole-v1", num_envs=4, categorical_action_encoding=True)
    qnet, policy = _dqn_policy(env, eps=1.0)
    greedy = Collector(
        env, policy, frames_per_batch=64, total_frames=64, exploration_type="deterministic"
    )
    batch = next(iter(greedy))
    torch.testing.assert_close(
        batch["action"], batch["action_value"].argmax(-1)
    )  # eps = 1 is inert
    greedy.shutdown()
    explore = Collector(
        GymEnv("CartPole-v1", num_envs=4,
               categorical_action_encoding=True), policy, frames_per_batch=256, total_frames=256
    )
    batch = next(iter(explore))
    off_greedy = (batch["action"] != batch["action_value"].argmax(-1)).float().mean().item()
    assert 0.35 < off_greedy < 0.65  # eps = 1: a uniform action, off the greedy one half the time
    explore.shutdown()
    loss = DQNLoss(qnet, gamma=0.99)(batch.reshape(-1))
    loss["loss"].backward()
    assert torch.isfinite(loss["loss"])


def test_ou_noise_restarts_per_sub_env_on_is_init_in_a_collector():
    env = TransformedEnv(StaggeredEnv(3), InitTracker())
    zero = nn.Linear(1, 1)
    nn.init.zeros_(zero.weight), nn.init.zeros_(zero.bias)
    # sigma = 0 makes the process deterministic: x = x0 / 2^(k + 1), k steps after is_init
    ou = OrnsteinUhlenbeckProcessModule(
        env.action_spec, eps_init=1.0, eps_end=1.0, theta=1.0, sigma=0.0, dt=0.5, x0=1.0
    )
    policy = TensorDictSequential(Actor(zero), ou)
    collector = Collector(env, policy, frames_per_batch=3 * 12, total_frames=3 * 12)
    batch = next(iter(collector))
    collector.shutdown()
    is_init = batch["is_init"].squeeze(-1)
    assert is_init[:, 1:].any(-1).all()  # every sub-env restarted within the batch
    since = torch.zeros(3)
    for t in range(12):
        since = torch.where(is_init[:, t], 0.0, since + 1)
        torch.testing.assert_close(batch["action"][:, t, 0].detach(), 0.5 ** (since + 1))


@pytest.mark.timeout(180)
def test_annealed_epsilon_reaches_the_workers_with_the_weights(no_leaks):
    env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
    _, policy = _dqn_policy(env, eps=1.0)
    env.close()
    # importable in the workers
    make = partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=True)
    collector = MultiSyncCollector([make, make], policy, frames_per_batch=128,
                                   total_frames=-1, timeout=120.0, start_timeout=120.0)
    try:
        batches = iter(collector)
        first = next(batches)
        assert (first["action"] != first["action_value"].argmax(-1)).any()
        explore = policy[1]
        explore.eps_end.fill_(0.0)
        explore.step(10)  # annealed past its end on the learner: eps = 0
        collector.update_policy_weights_()
        later = next(batches)
        torch.testing.assert_close(later["action"], later["action_value"].argmax(-1))
    finally:
        collector.shutdown()
