"""ActionScaling: the env receives the linearly mapped action (numpy reference), specs, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_envs import (
    ActionScaling,
    Bounded,
    GymEnv,
    GymWrapper,
    SpecError,
    TransformedEnv,
    check_env_specs,
)

gym = pytest.importorskip("gymnasium")

LOW, HIGH = np.array([0.0, -3.0], np.float32), np.array([1.0, 5.0], np.float32)


class Echo(gym.Env):
    """Observes the action it was given (so the data shows what reached the env)."""

    observation_space = gym.spaces.Box(-10.0, 10.0, (2,), np.float32)
    action_space = gym.spaces.Box(LOW, HIGH, (2,), np.float32)

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        assert np.all(action >= LOW) and np.all(action <= HIGH)
        return np.asarray(action, np.float32), 0.0, False, False, {}


def echo_env(n=3):
    return GymWrapper(gym.vector.SyncVectorEnv([Echo] * n, autoreset_mode="SameStep"))


def ref_map(a, low, high):
    return np.clip(LOW + (a - low) * (HIGH - LOW) / (high - low), LOW, HIGH)


@settings(max_examples=15, deadline=None)
@given(
    bounds=st.sampled_from([(-1.0, 1.0), (0.0, 1.0), (-2.0, 3.0)]),
    u=st.lists(st.floats(0.0, 1.0), min_size=6, max_size=6),
)
def test_action_scaling_env_receives_mapped_actions(bounds, u):
    low, high = bounds
    env = TransformedEnv(echo_env(), ActionScaling(low=low, high=high))
    assert env.action_spec == Bounded(low, high, (3, 2))
    a = (
        torch.tensor(u, dtype=torch.float32).reshape(3, 2) * (high - low) + low
    )  # in the outer range
    data = env.rollout(2, policy=lambda td: td.set("action", a.clone()))
    got = data["next", "observation"][:, 0].numpy()
    np.testing.assert_allclose(got, ref_map(a.numpy(), low, high), rtol=1e-6, atol=1e-6)
    env.close()


def test_action_scaling_defaults_edges_and_specs():
    env = TransformedEnv(echo_env(), ActionScaling())
    assert env.action_spec == Bounded(-1.0, 1.0, (3, 2))
    edges = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    data = env.rollout(1, policy=lambda td: td.set("action", edges.clone()))
    assert data["next", "observation"][:, 0].tolist() == [[0.0, -3.0], [1.0, 5.0], [0.5, 1.0]]
    check_env_specs(env, steps=4)
    env.close()
    env = TransformedEnv(echo_env(), ActionScaling(standard_normal=False))
    assert env.action_spec == Bounded(0.0, 1.0, (3, 2))
    env.close()


def test_action_scaling_on_pendulum():
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), ActionScaling())
    check_env_specs(env, steps=5, seed=0)
    assert env.transform[0].inv_action(torch.tensor([[0.25], [-0.5]])).tolist() == [[0.5], [-1.0]]
    env.close()


def test_action_scaling_errors():
    with pytest.raises(ValueError, match="low must be < high"):
        ActionScaling(low=1.0, high=1.0)
    with pytest.raises(
        SpecError, match=r"ActionScaling: action 'action' must be a floating-point Bounded spec"
    ):
        TransformedEnv(GymEnv("CartPole-v1", num_envs=1,
                              categorical_action_encoding=True), ActionScaling())
    with pytest.raises(SpecError, match="'act' is not an action key of the env"):
        TransformedEnv(GymEnv("Pendulum-v1", num_envs=1), ActionScaling(["act"]))
