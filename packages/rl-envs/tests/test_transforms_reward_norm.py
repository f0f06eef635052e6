"""NormalizeReward against a numpy reference and gymnasium's wrapper; resets, state, errors."""

from __future__ import annotations

from multiprocessing.reduction import ForkingPickler

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_envs import (
    ClipTransform,
    Compose,
    GymEnv,
    NormalizeReward,
    SpecError,
    TransformedEnv,
    check_env_specs,
)

from ._pixels import PixelEnv, ones_policy


def reference(rewards, dones, gamma, eps):
    """Scaled rewards of a ``[n, T, 1]`` rollout: gymnasium's RunningMeanStd over each step's
    discounted returns, the return restarting after a done."""
    mean, var, count = 0.0, 1.0, 1e-4
    g, out = np.zeros(rewards.shape[0]), np.empty_like(rewards, dtype=np.float64)
    for t in range(rewards.shape[1]):
        g = gamma * g + rewards[:, t, 0]
        b_mean, b_var, n = g.mean(), g.var(), g.shape[0]
        delta, total = b_mean - mean, count + n
        var = (var * count + b_var * n + delta**2 * count * n / total) / total
        mean, count = mean + delta * n / total, total
        out[:, t, 0] = rewards[:, t, 0] / np.sqrt(var + eps)
        g = np.where(dones[:, t, 0], 0.0, g)
    return out, (mean, var, count)


@settings(max_examples=12, deadline=None)
@given(n=st.integers(1, 4), gamma=st.sampled_from([0.0, 0.9, 0.99]), limit=st.integers(1, 5))
def test_normalize_reward_matches_numpy_across_auto_resets(n, gamma, limit):
    t = NormalizeReward(gamma, in_keys=["reward"], out_keys=["scaled"])
    env = TransformedEnv(PixelEnv(n, (2,), limit=limit, dtype=torch.float32), t)
    data = env.rollout(12, policy=ones_policy(n), break_when_any_done=False)
    raw, dones = data["next", "reward"].numpy(), data["next", "done"].numpy()
    assert dones.any()  # the episodes do end inside the rollout
    want, (mean, var, count) = reference(raw, dones, gamma, 1e-8)
    np.testing.assert_allclose(data["next", "scaled"].numpy(), want, rtol=1e-5)
    state = t.state_dict()
    np.testing.assert_allclose(
        [state["reward_mean"].item(), state["reward_var"].item(), state["reward_count"].item()],
        [mean, var, count],
        rtol=1e-10,
    )


def test_normalize_reward_equals_gymnasiums_wrapper_on_cartpole():
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                categorical_action_encoding=True), NormalizeReward(gamma=0.9))
    env.set_seed(0)
    ours = env.rollout(6, break_when_any_done=False)["next", "reward"][0, :, 0]
    env.close()
    wrapped = gym.wrappers.vector.NormalizeReward(gym.make_vec("CartPole-v1", 2), gamma=0.9)
    wrapped.reset(seed=0)
    # no episode ends in 6 steps: gymnasium's return and ours are the same sums
    theirs = [wrapped.step(np.zeros(2, dtype=np.int64))[1][0] for _ in range(6)]
    wrapped.close()
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-6)


def test_normalize_reward_partial_reset_restarts_only_reset_rows():
    t = NormalizeReward(gamma=1.0)
    env = TransformedEnv(PixelEnv(3, (2,), limit=100, dtype=torch.float32), t)
    td = env.reset()
    for _ in range(2):
        _, td = env.step_and_maybe_reset(td.set("action", torch.ones(3, dtype=torch.int64)))
    before = t._returns["reward"].copy()
    env.reset(td.set("_reset", torch.tensor([True, False, False])))
    after = t._returns["reward"]
    assert after[0, 0] == 0.0 and np.array_equal(after[1:], before[1:]) and before[0, 0] != 0.0


def test_normalize_reward_freeze_state_and_clip_chain():
    t = NormalizeReward()
    env = TransformedEnv(
        GymEnv("Pendulum-v1", num_envs=2), Compose(t, ClipTransform(["reward"], low=-10, high=10))
    )
    check_env_specs(env, steps=5, seed=0)
    data = env.rollout(5)
    assert data["next", "reward"].abs().max() <= 10.0
    state = t.state_dict()
    t.freeze()
    scale = t.scale().clone()
    raw = env.base_env.rollout(1)["next", "reward"]  # any reward: the scale is fixed now
    frozen = env.rollout(4)
    assert torch.equal(t.state_dict()["reward_count"], state["reward_count"])
    assert torch.equal(t.scale(), scale) and raw.shape == (2, 1, 1)
    assert torch.isfinite(frozen["next", "reward"]).all()
    fresh = NormalizeReward()
    fresh.load_state_dict(state)  # before any env: allocated from the state
    assert all(torch.equal(v, state[k]) for k, v in fresh.state_dict().items())
    bad = dict(state, reward_var=torch.ones(2, dtype=torch.float64))
    with pytest.raises(SpecError, match=r"'reward_var': expected shape \(1,\), received \(2,\)"):
        fresh.load_state_dict(bad)
    assert fresh.state_dict()["reward_var"].shape == (1,)  # nothing was half-loaded
    with pytest.raises(KeyError, match="missing keys"):
        fresh.load_state_dict({"reward_mean": state["reward_mean"]})
    env.close()


def test_normalize_reward_statistics_are_shared_memory_through_pickling():
    t = NormalizeReward()
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), t)
    env.rollout(3)
    copy = ForkingPickler.loads(ForkingPickler.dumps(t))  # what a spawned process receives
    assert copy._returns == {} and all(v.is_shared() for v in t._stats.values())
    copy._stats["reward_count"] += 5.0
    assert t.state_dict()["reward_count"].item() == pytest.approx(6.0001 + 5.0)
    env.close()


def test_normalize_reward_errors():
    with pytest.raises(ValueError, match=r"gamma must be in \[0, 1\], received 1.5"):
        NormalizeReward(gamma=1.5)
    with pytest.raises(ValueError, match="eps must be > 0, received 0.0"):
        NormalizeReward(eps=0.0)
    with pytest.raises(SpecError, match="'observation' must be floating point, received torch.u"):
        TransformedEnv(PixelEnv(2, (4, 4, 3)), NormalizeReward(in_keys=["observation"]))
    with pytest.raises(SpecError, match="'reward2' is neither an observation nor a reward key"):
        TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), NormalizeReward(in_keys=["reward2"]))


def test_the_one_env_step_is_the_numpy_path_bit_for_bit():
    """One sub-env with a scalar reward takes Python floats (``_step_one``): the same
    statistics, return and scale, bit for bit, as the numpy path (``_merge``)."""
    from rl_envs._transforms_reward_norm import _merge, _step_one

    rng = np.random.default_rng(0)
    for event in ((), (1,)):  # a reward [1] or [1, 1] (the env's reward spec [*B, 1])
        fast = [np.zeros((1, *event)), np.zeros(event), np.ones(event), np.full((), 1e-4),
                np.ones(event, np.float32)]
        slow = [a.copy() for a in fast]
        for reward in rng.normal(0.0, 3.0, size=200).astype(np.float32):
            r = np.full((1, *event), reward)
            _step_one(fast[0], r, 0.99, 1e-8, *fast[1:])
            g, mean, var, count, scale = slow
            np.multiply(g, 0.99, out=g)
            np.add(g, r, out=g)
            _merge(mean, var, count, g.reshape(-1, *event))
            np.divide(1.0, np.sqrt(var + 1e-8), out=scale, casting="unsafe")
            for a, b in zip(fast, slow, strict=True):
                assert a.tobytes() == b.tobytes()
