"""``SerialEnv`` / ``ParallelEnv`` with a list of env constructors, one per worker
(TorchRL's form for different envs with the same specs)."""

from __future__ import annotations

import functools

import pytest
from rl_envs import GymEnv, ParallelEnv, SerialEnv

from ._processes import children, settled

CARTPOLE_V1 = functools.partial(GymEnv, "CartPole-v1", num_envs=1, categorical_action_encoding=True)
SHORT_CARTPOLE = functools.partial(
    GymEnv, "CartPole-v1", num_envs=1, max_episode_steps=50, categorical_action_encoding=True
)  # same specs
PENDULUM = functools.partial(GymEnv, "Pendulum-v1", num_envs=1)


def test_serial_env_calls_each_constructor_once_in_order():
    calls = []

    def make(name, fn):
        def factory():
            calls.append(name)
            return fn()
        return factory

    env = SerialEnv(2, [make("a", CARTPOLE_V1), make("b", SHORT_CARTPOLE)])
    try:
        assert calls == ["a", "b"]
        data = env.rollout(5, break_when_any_done=False)
        assert data.batch_size == (2, 1, 5)
    finally:
        env.close()


def test_serial_env_list_with_kwargs_per_worker():
    env = SerialEnv(
        2,
        [GymEnv, GymEnv],
        [{"env_name": "CartPole-v1"}, {"env_name": "CartPole-v1", "max_episode_steps": 50}],
    )
    try:
        assert env.batch_size == (2,)
    finally:
        env.close()


@pytest.mark.parametrize("cls", [SerialEnv, ParallelEnv])
def test_list_length_other_than_num_workers_is_named(cls):
    before = children()
    with pytest.raises(ValueError, match=r"create_env_fn: expected one callable or a list of "
                                         r"num_workers=3 callables .* received a list of 2"):
        cls(3, [CARTPOLE_V1, SHORT_CARTPOLE])
    with pytest.raises(TypeError, match="create_env_fn"):
        cls(2, [CARTPOLE_V1, "CartPole-v1"])
    assert children() - before == set()  # nothing was started


def test_serial_env_different_specs_name_the_worker():
    with pytest.raises(ValueError, match="worker 1's"):
        SerialEnv(2, [CARTPOLE_V1, PENDULUM])


@pytest.mark.timeout(300)
def test_parallel_env_runs_one_constructor_per_worker():
    before = children()
    env = ParallelEnv(2, [CARTPOLE_V1, SHORT_CARTPOLE])
    try:
        assert env.rollout(5, break_when_any_done=False).batch_size == (2, 1, 5)
    finally:
        env.close()
    assert settled(before) == set()
    # the second constructor really reached worker 1: its specs differ from worker 0's
    with pytest.raises(ValueError, match="worker 1's"):
        ParallelEnv(2, [CARTPOLE_V1, PENDULUM])
    assert settled(before) == set()
