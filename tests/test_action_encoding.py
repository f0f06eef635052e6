"""``GymEnv``'s ``Discrete`` actions in both encodings, through every component that reads
them: one-hot by default (TorchRL's ``categorical_action_encoding=False``), integers with
``categorical_action_encoding=True`` (issue 38).

A TorchRL script sizes its Q-network with ``env.action_spec.shape[-1]`` and builds its
modules from the spec; the same code must run on either encoding.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch
from rl_collectors import Collector
from rl_envs import Categorical, GymEnv, OneHot, ParallelEnv, SerialEnv
from rl_modules import MLP, EGreedyModule, QValueActor
from rl_objectives import DQNLoss
from rl_replay import LazyTensorStorage, ReplayBuffer
from tensordict.nn import TensorDictSequential
from torch import nn

ENCODINGS = pytest.mark.parametrize("categorical", [False, True], ids=["one-hot", "index"])


def _policy(env) -> tuple[QValueActor, TensorDictSequential]:
    """TorchRL's DQN wiring, from the spec alone."""
    torch.manual_seed(0)
    n_act = env.action_spec.space.n
    qnet = QValueActor(MLP(4, n_act, num_cells=8, depth=1, activation_class=nn.ReLU),
                       spec=env.action_spec)
    explore = EGreedyModule(env.action_spec, eps_init=0.5, eps_end=0.5, annealing_num_steps=1)
    return qnet, TensorDictSequential(qnet, explore)


def _check_actions(action: torch.Tensor, categorical: bool, n: int = 2) -> None:
    if categorical:
        assert action.dtype == torch.int64 and ((action >= 0) & (action < n)).all()
    else:
        assert action.shape[-1] == n and (action.sum(-1) == 1).all()


def test_default_is_one_hot_as_torchrl():
    with GymEnv("CartPole-v1") as env:
        assert isinstance(env.action_spec, OneHot) and env.action_spec.shape == (2,)
        assert env.action_spec.shape[-1] == 2  # TorchRL's n_actions idiom
    with GymEnv("CartPole-v1", categorical_action_encoding=True) as env:
        assert isinstance(env.action_spec, Categorical) and env.action_spec.shape == ()


@ENCODINGS
@pytest.mark.parametrize("num_envs", [None, 2], ids=["[]", "[2]"])
def test_rand_action_and_the_dqn_policy_step_the_env(categorical, num_envs):
    env = GymEnv("CartPole-v1", num_envs=num_envs, categorical_action_encoding=categorical)
    env.set_seed(0)
    td = env.rand_action(env.reset())
    env.action_spec.assert_is_in(td["action"])
    _check_actions(td["action"], categorical)
    _, policy = _policy(env)
    with torch.no_grad():
        data = env.rollout(8, policy, break_when_any_done=False)
    env.close()
    assert data.batch_size == (*env.batch_size, 8)
    _check_actions(data["action"], categorical)


@ENCODINGS
def test_collector_replay_and_dqn_loss(categorical):
    make = partial(GymEnv, "CartPole-v1", num_envs=2, categorical_action_encoding=categorical)
    env = make()
    qnet, policy = _policy(env)
    collector = Collector(make, policy, frames_per_batch=16, total_frames=32)
    buffer = ReplayBuffer(storage=LazyTensorStorage(64), batch_size=8)
    for batch in collector:
        _check_actions(batch["action"], categorical)
        buffer.extend(batch.reshape(-1))
    collector.shutdown()
    env.close()
    sample = buffer.sample()
    _check_actions(sample["action"], categorical)
    loss = DQNLoss(qnet, action_space=env.action_spec, gamma=0.9)(sample)["loss"]
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in qnet.parameters())


@pytest.mark.timeout(120)
@pytest.mark.parametrize("batched", [SerialEnv, ParallelEnv])
def test_batched_envs_take_one_hot_actions(batched):
    env = batched(2, partial(GymEnv, "CartPole-v1"))
    try:
        assert isinstance(env.action_spec, OneHot) and env.action_spec.shape == (2, 2)
        _, policy = _policy(env)
        with torch.no_grad():
            data = env.rollout(5, policy, break_when_any_done=False)
        _check_actions(data["action"], categorical=False)
    finally:
        env.close()


@ENCODINGS
def test_ale_vector_env_in_both_encodings(categorical):
    pytest.importorskip("ale_py")
    env = GymEnv("ALE/Pong-v5", num_envs=2, categorical_action_encoding=categorical)
    try:
        n = env.action_spec.space.n
        expected = (2,) if categorical else (2, n)
        assert env.action_spec.shape == expected
        data = env.rollout(4, break_when_any_done=False)
        _check_actions(data["action"], categorical, n)
    finally:
        env.close()
