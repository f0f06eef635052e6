"""FrameSkipTransform on real gymnasium envs: rewards summed, stops at done."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from rl_envs import FrameSkipTransform, GymEnv, RewardSum, TransformedEnv
from rl_envs.transforms import FrameSkipTransform as FromPath


def test_matches_gymnasium_stepped_k_times_with_the_same_action() -> None:
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), FrameSkipTransform(3))
    env.set_seed(7)
    reference = gym.make_vec("Pendulum-v1", num_envs=2, vectorization_mode="sync")
    obs, _ = reference.reset(seed=7)
    td = env.reset()
    np.testing.assert_allclose(td["observation"].numpy(), obs, rtol=1e-5)
    for step in range(4):
        action = torch.full((2, 1), 0.5 * (step - 1.5))
        td["action"] = action
        td = env.step(td)
        total = np.zeros(2)
        for _ in range(3):
            obs, rew, term, trunc, _ = reference.step(action.numpy())
            total += rew
        np.testing.assert_allclose(td["next", "observation"].numpy(), obs, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(td["next", "reward"].reshape(2).numpy(), total, rtol=1e-4)
        td = td["next"].clone()
    env.close()
    reference.close()


def test_stops_at_done_and_keeps_episode_returns() -> None:
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=1,
                                categorical_action_encoding=True), FrameSkipTransform(4))
    env.append_transform(RewardSum())
    env.set_seed(0)
    rollout = env.rollout(200, break_when_any_done=True)
    reward = rollout["next", "reward"].reshape(-1)
    # every step but the last sums 4 CartPole rewards of 1; the last stops at done
    assert (reward[:-1] == 4).all()
    assert 1 <= reward[-1] <= 4
    assert bool(rollout["next", "done"].reshape(-1)[-1])
    assert float(rollout["next", "episode_reward"].reshape(-1)[-1]) == float(reward.sum())
    env.close()


def test_path_position_and_bad_argument() -> None:
    assert FromPath is FrameSkipTransform
    with pytest.raises(ValueError, match="frame_skip"):
        FrameSkipTransform(0)
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=1,
                                categorical_action_encoding=True), RewardSum())
    env.append_transform(FrameSkipTransform(2))
    with pytest.raises(ValueError, match="first transform"):
        env.rollout(2)
    env.close()
