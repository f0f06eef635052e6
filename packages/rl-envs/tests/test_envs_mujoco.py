"""Real MuJoCo envs: specs (float64 observations, Bounded float32 actions), DoubleToFloat,
final observations on truncation and termination in sync and async mode."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")
pytest.importorskip("mujoco")

from rl_envs import (  # noqa: E402
    Bounded,
    DoubleToFloat,
    GymEnv,
    TransformedEnv,
    Unbounded,
    check_env_specs,
)


@pytest.mark.parametrize(
    "name, obs_dim, act_dim", [("HalfCheetah-v5", 17, 6), ("Hopper-v5", 11, 3)]
)
def test_specs_float64_observations_and_bounded_actions(name, obs_dim, act_dim):
    env = GymEnv(name, num_envs=3)
    assert env.vectorization_mode == "sync"  # no vector entry point: gymnasium's default
    obs = env.observation_spec["observation"]
    assert isinstance(obs, Unbounded) and obs.dtype == torch.float64 and obs.shape == (3, obs_dim)
    act = env.action_spec
    assert isinstance(act, Bounded) and act.dtype == torch.float32 and act.shape == (3, act_dim)
    assert (act.low == -1).all() and (act.high == 1).all()
    check_env_specs(env, seed=0)
    cast = TransformedEnv(env, DoubleToFloat())
    assert cast.observation_spec["observation"].dtype == torch.float32
    check_env_specs(cast, seed=0)
    data = cast.rollout(5)
    assert data["next", "observation"].dtype == torch.float32
    cast.close()


def _replay(name: str, seed: int, actions: np.ndarray, **kwargs) -> tuple[list, list, list]:
    """One sub-env alone: root and next observations, and the done flags, per step."""
    env = gym.make(name, **kwargs)
    root, _ = env.reset(seed=seed)
    roots, nexts, dones = [], [], []
    for a in actions:
        roots.append(root)
        obs, _, term, trunc, _ = env.step(a)
        nexts.append(obs)
        dones.append(term or trunc)
        root = env.reset()[0] if (term or trunc) else obs
    env.close()
    return roots, nexts, dones


def _check_against_replay(data, name: str, seed: int, **kwargs) -> None:
    for i in range(data.batch_size[0]):
        roots, nexts, dones = _replay(name, seed + i, data["action"][i].numpy(), **kwargs)
        np.testing.assert_allclose(data["observation"][i].numpy(), np.stack(roots))
        np.testing.assert_allclose(data["next", "observation"][i].numpy(), np.stack(nexts))
        np.testing.assert_array_equal(data["next", "done"][i, :, 0].numpy(), dones)


def test_half_cheetah_truncation_keeps_final_obs():
    env = GymEnv("HalfCheetah-v5", num_envs=2, max_episode_steps=5)
    env.set_seed(7)
    data = env.rollout(12, break_when_any_done=False)
    env.close()
    assert data["next", "truncated"][:, 4].all() and data["next", "truncated"][:, 9].all()
    assert not data["next", "terminated"].any()
    _check_against_replay(data, "HalfCheetah-v5", 7, max_episode_steps=5)


def test_hopper_termination_keeps_final_obs():
    env = GymEnv("Hopper-v5", num_envs=3)
    env.set_seed(1)
    data = env.rollout(60, break_when_any_done=False)
    env.close()
    assert data["next", "terminated"].sum() >= 3  # random actions make it fall
    _check_against_replay(data, "Hopper-v5", 1)


@pytest.mark.timeout(120)
def test_async_mode_keeps_final_obs():
    env = GymEnv("HalfCheetah-v5", num_envs=2, vectorization_mode="async", max_episode_steps=4)
    env.set_seed(3)
    data = env.rollout(9, break_when_any_done=False)
    env.close()
    assert data["next", "truncated"][:, 3].all()
    _check_against_replay(data, "HalfCheetah-v5", 3, max_episode_steps=4)
