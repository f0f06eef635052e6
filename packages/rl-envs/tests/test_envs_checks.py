"""check_env_specs on every shipped env, and its report on a broken one."""

from __future__ import annotations

import re

import pytest
import torch
from rl_envs import Bounded, SpecError, check_env_specs
from tensordict import TensorDict

from ._toy import CountEnv

gym = pytest.importorskip("gymnasium")

from rl_envs import GymEnv, GymWrapper  # noqa: E402

ENVS = {
    "toy": lambda: CountEnv(),
    "cartpole-sync": lambda: GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True),
    "cartpole-onehot": lambda: GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=False),
    "pendulum": lambda: GymEnv("Pendulum-v1", num_envs=2),
    "frozenlake-onehot-obs": lambda: GymEnv("FrozenLake-v1", num_envs=2),
    "taxi-one-sim": lambda: GymEnv("Taxi-v4"),
    "mountaincar-continuous": lambda: GymEnv("MountainCarContinuous-v0", num_envs=2),
    "acrobot": lambda: GymEnv("Acrobot-v1", num_envs=2, categorical_action_encoding=True),
    "cartpole-vector-entry-point": lambda: GymEnv(
        "CartPole-v1", num_envs=16, vectorization_mode="vector_entry_point",
        categorical_action_encoding=True
    ),
    "cartpole-next-step": lambda: GymWrapper(
        gym.make_vec("CartPole-v1", num_envs=2, vectorization_mode="sync"),
        categorical_action_encoding=True
    ),
    "cartpole-frame-skip": lambda: GymEnv("CartPole-v1", num_envs=2, frame_skip=2,
                                          categorical_action_encoding=True),
}


@pytest.mark.parametrize("name", list(ENVS))
def test_check_env_specs_on_shipped_envs(name):
    env = ENVS[name]()
    check_env_specs(env, steps=5, seed=0)
    env.close()


def test_check_env_specs_on_async_env():
    env = GymEnv("CartPole-v1", num_envs=2, vectorization_mode="async",
                 categorical_action_encoding=True)
    try:
        check_env_specs(env, seed=0)
    finally:
        env.close()


class Broken(CountEnv):
    """Declares a bounded float32 observation but produces float64 values, out of bounds."""

    def __init__(self):
        super().__init__()
        self.observation_spec["observation"] = Bounded(0.0, 1.0, (3, 1))
        self.observation_spec["extra"] = Bounded(0.0, 1.0, (3, 2))

    def _step(self, td):
        out = super()._step(td)
        out["observation"] = out["observation"].double() + 5
        out["extra"] = torch.zeros(3, 2)
        return out

    def _reset(self, td):
        out = super()._reset(td)
        out["extra"] = torch.zeros(3, 2)
        return out


def test_check_env_specs_reports_every_mismatch():
    env = Broken()
    env.fast_step = _no_check(env)  # the real step would already fail on the copy
    with pytest.raises(SpecError) as err:
        check_env_specs(env)
    text = str(err.value)
    assert "problem(s)" in text
    assert "'observation'" in text and "out of bounds" in text


def _no_check(env):
    """A fast step that writes the raw outputs (wrong dtype/bounds) into fresh buffers."""

    def step(action):
        out = env._step(TensorDict(action=action, batch_size=env.batch_size))
        root, nxt = env.buffers()
        nxt["observation"].copy_(out["observation"])
        root["observation"].copy_(out["observation"])
        nxt["terminated"].copy_(out["terminated"])
        nxt["done"].copy_(out["terminated"])
        return nxt, root

    return step


def test_check_env_specs_reports_keys_no_spec_declares():
    env = CountEnv()
    original = env.fake_tensordict

    def fake():
        td = original()
        td["ghost"] = torch.zeros(3)
        return td

    env.fake_tensordict = fake
    with pytest.raises(SpecError, match="'ghost': present in the data but in no spec"):
        check_env_specs(env)


@pytest.mark.parametrize("num_envs", [None, 2], ids=["[]", "[2]"])
def test_integer_action_on_one_hot_spec_names_the_flag(num_envs):
    """An integer action given to a one-hot env (TorchRL's default encoding) is told how to
    get integer actions; a wrong shape of another kind is not."""
    from rl_envs import InvalidActionError

    env = GymEnv("CartPole-v1", num_envs=num_envs)
    td = env.reset()
    td["action"] = torch.zeros(env.batch_size, dtype=torch.int64)
    expected = (*env.batch_size, 2)
    with pytest.raises(InvalidActionError, match=(
        rf"'action': expected shape {re.escape(str(expected))}.*categorical_action_encoding=True"
    )):
        env.step(td)
    with pytest.raises(InvalidActionError, match="categorical_action_encoding=True"):
        env.fast_step(td["action"])
    with pytest.raises(InvalidActionError, match=r"expected shape") as info:
        env.fast_step(torch.zeros((*env.batch_size, 3), dtype=torch.int64))
    assert "categorical_action_encoding" not in str(info.value)
    env.close()
