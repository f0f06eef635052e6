"""MultiStep (TorchRL's n-step postproc) against a hand-written n-step reference."""

from __future__ import annotations

import pytest
import torch
from rl_replay import MultiStep
from tensordict import TensorDict


def reference(reward: list[float], done: list[bool], gamma: float, n: int) -> tuple:
    """Plain loops: (n-step return, steps to the next obs) for one time series; at most
    ``n`` rewards summed (TorchRL's count: ``n=1`` is the 1-step reward)."""
    returns, steps = [], []
    for t in range(len(reward)):
        total, k = 0.0, 0
        while k < n and t + k < len(reward):
            total += gamma**k * reward[t + k]
            k += 1
            if done[t + k - 1]:
                break
        returns.append(total)
        steps.append(k)
    return returns, steps


def batch(reward: torch.Tensor, done: torch.Tensor, terminated: torch.Tensor) -> TensorDict:
    steps = reward.shape[-1]
    obs = torch.arange(reward.numel(), dtype=torch.float32).reshape(reward.shape)
    return TensorDict({
        "observation": obs.unsqueeze(-1),
        "next": {"observation": (obs + 0.5).unsqueeze(-1), "reward": reward.unsqueeze(-1),
                 "done": done.unsqueeze(-1), "terminated": terminated.unsqueeze(-1),
                 "truncated": (done & ~terminated).unsqueeze(-1)},
    }, batch_size=reward.shape[:-1] + (steps,))


@pytest.mark.parametrize("n_steps", [1, 2, 4])
def test_matches_the_reference_across_episode_ends_on_a_batch_of_envs(n_steps: int) -> None:
    g = torch.Generator().manual_seed(0)
    reward = torch.randn(3, 17, generator=g)
    done = torch.rand(3, 17, generator=g) < 0.25
    terminated = done & (torch.rand(3, 17, generator=g) < 0.5)
    data = batch(reward, done, terminated)
    original_next_obs = data["next", "observation"].clone()
    out = MultiStep(gamma=0.9, n_steps=n_steps)(data)
    for env in range(3):
        ret, steps = reference(reward[env].tolist(), done[env].tolist(), 0.9, n_steps)
        torch.testing.assert_close(out["next", "reward"][env, :, 0], torch.tensor(ret))
        assert out["steps_to_next_obs"][env].tolist() == steps  # [*B, T], as TorchRL's
        last = [t + s - 1 for t, s in enumerate(steps)]
        assert out["next", "observation"][env, :, 0].tolist() == (
            original_next_obs[env, last, 0].tolist())
        assert out["next", "done"][env, :, 0].tolist() == done[env, last].tolist()
        assert out["nonterminal"][env].tolist() == (~terminated[env, last]).tolist()
        torch.testing.assert_close(out["gamma"][env], 0.9 ** torch.tensor(steps).float())
    torch.testing.assert_close(out["next", "original_reward"][..., 0], reward)


def test_torchrl_values_by_hand() -> None:
    # TorchRL 0.14.1's MultiStep(gamma=0.5, n_steps=3) on rewards 1..8, an episode ending
    # at step 3 (its output, recorded by running it): rewards, steps, discounts
    done = torch.tensor([False, False, False, True, False, False, False, False])
    out = MultiStep(gamma=0.5, n_steps=3)(batch(torch.arange(1.0, 9.0), done, done.clone()))
    assert out["next", "reward"][:, 0].tolist() == [2.75, 4.5, 5.0, 4.0, 9.75, 11.5, 11.0, 8.0]
    assert out["steps_to_next_obs"].tolist() == [3, 3, 2, 1, 3, 3, 2, 1]
    assert out["gamma"].tolist() == [0.125, 0.125, 0.25, 0.5, 0.125, 0.125, 0.25, 0.5]


def test_n_steps_one_is_the_identity_on_rewards_and_next() -> None:
    done = torch.tensor([False, True, False, False])
    data = batch(torch.arange(4.0), done, done.clone())
    before = data.clone()
    out = MultiStep(gamma=0.99, n_steps=1)(data)
    assert (out["next", "reward"] == before["next", "reward"]).all()
    assert (out["next", "observation"] == before["next", "observation"]).all()
    assert out["steps_to_next_obs"].unique().tolist() == [1]


@pytest.mark.parametrize(("kwargs", "word"), [
    ({"gamma": 1.5, "n_steps": 2}, "gamma"), ({"gamma": 0.9, "n_steps": 0}, "n_steps"),
    ({"gamma": 0.0, "n_steps": 2}, "gamma"),
    ({"gamma": 0.9, "n_steps": 2.0}, "n_steps"),
])
def test_bad_arguments_are_named(kwargs: dict, word: str) -> None:
    with pytest.raises(ValueError, match=word):
        MultiStep(**kwargs)


def test_a_batch_without_reward_is_refused_and_left_unchanged() -> None:
    data = TensorDict({"next": {"done": torch.zeros(4, 1, dtype=torch.bool)}}, batch_size=[4])
    with pytest.raises(KeyError, match="reward"):
        MultiStep(gamma=0.9, n_steps=2)(data)
    assert set(data.keys(True, True)) == {("next", "done")}
