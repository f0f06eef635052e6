"""RewardClipping, SignTransform, RewardScaling and ClipTransform against numpy references."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from rl_envs import (
    Bounded,
    ClipTransform,
    Compose,
    GymEnv,
    RewardClipping,
    RewardScaling,
    RewardSum,
    SignTransform,
    SpecError,
    TransformedEnv,
    Unbounded,
    check_env_specs,
)

from ._pixels import PixelEnv, ones_policy

SETTINGS = settings(max_examples=15, deadline=None)
bound = st.one_of(st.none(), st.floats(-3.0, 3.0, allow_nan=False))


def rollout(env, steps=6):
    return env.rollout(steps, policy=ones_policy(env.batch_size[0]), break_when_any_done=False)


@SETTINGS
@given(n=st.integers(1, 4), low=bound, high=bound)
def test_reward_clipping_matches_numpy(n, low, high):
    assume(not (low is None and high is None))
    assume(low is None or high is None or low <= high)
    env = TransformedEnv(
        PixelEnv(n, (2,), limit=2, dtype=torch.float32),
        RewardClipping(low, high, out_keys=["clipped"]),
    )
    data = rollout(env)
    raw = data["next", "reward"].numpy()
    np.testing.assert_array_equal(data["next", "clipped"].numpy(), np.clip(raw, low, high))
    spec = env.full_reward_spec["clipped"]
    lo, hi = (-np.inf if low is None else low), (np.inf if high is None else high)
    assert (
        isinstance(spec, Bounded)
        and spec.low.min().item() == np.float32(lo)
        and spec.high.max().item() == np.float32(hi)
    )
    assert "clipped" not in data  # a reward key lives under "next" only
    check_env_specs(env, steps=4)


@SETTINGS
@given(
    n=st.integers(1, 4),
    loc=st.floats(-2, 2),
    scale=st.floats(0.1, 3),
    standard=st.booleans(),
    neg=st.booleans(),
)
def test_reward_scaling_matches_numpy(n, loc, scale, standard, neg):
    scale = -scale if neg else scale
    t = RewardScaling(loc, scale, out_keys=["scaled"], standard_normal=standard)
    data = rollout(TransformedEnv(PixelEnv(n, (2,), limit=2, dtype=torch.float32), t))
    raw = data["next", "reward"].numpy().astype(np.float64)
    ref = (raw - loc) / scale if standard else raw * scale + loc
    np.testing.assert_allclose(data["next", "scaled"].numpy(), ref, rtol=1e-5, atol=1e-5)


def test_reward_scaling_maps_bounded_specs():
    env = TransformedEnv(
        GymEnv("CartPole-v1", num_envs=2,
               categorical_action_encoding=True), RewardScaling(1.0, -2.0, in_keys=["observation"])
    )
    spec, base = env.observation_spec["observation"], env.base_env.observation_spec["observation"]
    assert torch.allclose(spec.low, base.high * -2.0 + 1.0) and torch.allclose(
        spec.high, base.low * -2.0 + 1.0
    )
    check_env_specs(env, steps=5, seed=0)
    env.close()
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), RewardScaling(0.0, 0.1))
    assert isinstance(env.reward_spec, Unbounded) and isinstance(
        env.base_env.reward_spec, Unbounded
    )
    check_env_specs(env, steps=5, seed=0)
    env.close()


@SETTINGS
@given(n=st.integers(1, 4))
def test_sign_transform_matches_numpy(n):
    env = TransformedEnv(
        PixelEnv(n, (3,), limit=2, dtype=torch.float32), SignTransform(out_keys=["sign"])
    )
    data = rollout(env)
    np.testing.assert_array_equal(
        data["next", "sign"].numpy(), np.sign(data["next", "reward"].numpy())
    )
    assert env.full_reward_spec["sign"] == Bounded(-1.0, 1.0, (n, 1))
    check_env_specs(env, steps=4)


def test_sign_transform_on_observations_and_integer_rewards():
    env = TransformedEnv(
        GymEnv("CartPole-v1", num_envs=3,
               categorical_action_encoding=True), SignTransform(["observation"], ["obs_sign"])
    )
    env.set_seed(0)
    data = env.rollout(30, break_when_any_done=False)
    for raw, out in (
        (data["observation"], data["obs_sign"]),
        (data["next", "observation"], data["next", "obs_sign"]),
    ):
        np.testing.assert_array_equal(out.numpy(), np.sign(raw.numpy()))
    check_env_specs(env, steps=4)
    env.close()


@SETTINGS
@given(
    n=st.integers(1, 4),
    low=st.floats(-1.0, 0.5),
    width=st.floats(0.0, 1.0),
    per_dim=st.booleans(),
    limit=st.integers(1, 3),
)
def test_clip_transform_matches_numpy_and_intersects_bounds(n, low, width, per_dim, limit):
    lo = torch.tensor([low, low - 0.1, low + 0.2]) if per_dim else low
    hi = (torch.as_tensor(lo) + width) if per_dim else low + width
    t = ClipTransform(out_keys=["clipped"], low=lo, high=hi)
    env = TransformedEnv(PixelEnv(n, (3,), limit=limit, dtype=torch.float32), t)
    data = rollout(env, 7)
    lo_np, hi_np = np.asarray(lo, dtype=np.float32), np.asarray(hi, dtype=np.float32)
    for key in (("observation", "clipped"), (("next", "observation"), ("next", "clipped"))):
        raw, out = data[key[0]].numpy(), data[key[1]].numpy()
        np.testing.assert_array_equal(out, np.minimum(np.maximum(raw, lo_np), hi_np))
    spec = env.observation_spec["clipped"]  # the base spec is [0, 1]: the bounds intersect
    lo_t, hi_t = torch.as_tensor(lo_np).expand(3), torch.as_tensor(hi_np).expand(3)
    want_high = torch.minimum(torch.ones(3), hi_t)
    assert torch.equal(spec.high[0], want_high)
    assert torch.equal(spec.low[0], torch.minimum(torch.maximum(torch.zeros(3), lo_t), want_high))
    check_env_specs(env, steps=5)


def test_clip_transform_in_place_with_episode_sums():
    env = TransformedEnv(
        GymEnv("Pendulum-v1", num_envs=2), Compose(ClipTransform(["reward"], low=-1.0), RewardSum())
    )
    data = env.rollout(5)
    assert data["next", "reward"].min() >= -1.0
    assert torch.allclose(data["next", "episode_reward"][:, -1], data["next", "reward"].sum(1))
    env.close()


def test_value_transform_errors():
    with pytest.raises(ValueError, match="give low and/or high"):
        ClipTransform()
    with pytest.raises(ValueError, match="low must be <= high"):
        RewardClipping(1.0, -1.0)
    with pytest.raises(ValueError, match="scale must be non-zero"):
        RewardScaling(0.0, 0.0)
    with pytest.raises(
        SpecError, match="ClipTransform: in_key 'pixels' is neither an observation nor a reward key"
    ):
        TransformedEnv(GymEnv("CartPole-v1", num_envs=1,
                              categorical_action_encoding=True), ClipTransform(["pixels"], low=0.0))
    with pytest.raises(
        SpecError, match="RewardScaling: 'observation' must be floating point, received torch.uint8"
    ):
        TransformedEnv(PixelEnv(2, (2, 2, 3)), RewardScaling(0.0, 1.0, in_keys=["observation"]))
    with pytest.raises(ValueError, match="same length"):
        SignTransform(["reward"], ["a", "b"])


def test_clip_transform_clips_actions_on_their_way_in():
    from rl_envs import GymEnv, TransformedEnv
    from tensordict import TensorDict

    clipped = TransformedEnv(
        GymEnv("Pendulum-v1", num_envs=2), ClipTransform(in_keys_inv=["action"])
    )
    plain = GymEnv("Pendulum-v1", num_envs=2)
    assert type(clipped.action_spec).__name__ == "Unbounded"
    clipped.set_seed(3), plain.set_seed(3)
    clipped.reset(), plain.reset()
    for value in (100.0, -7.0, 0.5):
        a = torch.full((2, 1), value)
        out = clipped.step(TensorDict(action=a, batch_size=[2]))
        ref = plain.step(TensorDict(action=a.clamp(-2.0, 2.0), batch_size=[2]))
        torch.testing.assert_close(out["next", "observation"], ref["next", "observation"])
        assert torch.equal(out["action"], a)  # the policy's own action is what gets stored
    tight = TransformedEnv(
        GymEnv("Pendulum-v1", num_envs=2), ClipTransform(in_keys_inv=["action"], low=-0.5, high=1.0)
    )
    assert tight.transform[0].inv_action(torch.tensor([[9.0], [-9.0]])).tolist() == [[1.0], [-0.5]]
    clipped.close(), plain.close(), tight.close()
