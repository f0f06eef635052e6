"""``ObservationNorm.init_stats`` with TorchRL's arguments, on a real gymnasium env."""

from __future__ import annotations

import pytest
import torch
from rl_envs import GymEnv, ObservationNorm, TransformedEnv


@pytest.fixture
def pendulum():
    env = TransformedEnv(
        GymEnv("Pendulum-v1", num_envs=2), ObservationNorm(in_keys=["observation"])
    )
    yield env
    env.close()


@pytest.mark.parametrize(("reduce_dim", "cat_dim"), [(0, 0), ((0, 1), 1), ((1, 0), 0)])
def test_torchrl_call_sets_loc_scale_from_random_steps(pendulum, reduce_dim, cat_dim):
    norm = pendulum.transform[0]
    pendulum.set_seed(0)
    norm.init_stats(num_iter=60, reduce_dim=reduce_dim, cat_dim=cat_dim)
    pendulum.base_env.set_seed(0)  # the same random actions and states, without the transform
    raw = pendulum.base_env.rollout(60, break_when_any_done=False)["observation"].double()
    std = raw.std((0, 1)).clamp_min(norm.eps)
    # obs * scale + loc: scale = 1 / std, loc = -mean / std (TorchRL's non-standard form)
    torch.testing.assert_close(norm.scale, (1 / std).float())
    torch.testing.assert_close(norm.loc, (-raw.mean((0, 1)) / std).float())


def test_normalised_observations_are_standard(pendulum):
    # the same seeds replay the steps init_stats took: their normalised values are standard
    # (two independent 400-step Pendulum samples differ too much for a fixed tolerance)
    pendulum.set_seed(0)
    torch.manual_seed(0)
    pendulum.transform[0].init_stats(400, reduce_dim=0, cat_dim=0)
    pendulum.set_seed(0)
    torch.manual_seed(0)
    obs = pendulum.rollout(400, break_when_any_done=False)["observation"]
    assert obs.mean((0, 1)).abs().max() < 0.1
    assert (obs.std((0, 1)) - 1).abs().max() < 0.1


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"reduce_dim": -1}, "reduce_dim"),
    ({"reduce_dim": 1, "cat_dim": 1}, "reduce_dim"),
    ({"reduce_dim": (0, 1, 3)}, "reduce_dim"),
    ({"reduce_dim": (0, 1), "keep_dims": (2,)}, "keep_dims"),
    ({"reduce_dim": (0, 1), "cat_dim": 2}, "cat_dim"),
    ({"num_iter": 0}, "num_iter"),
])
def test_bad_arguments_name_the_argument(pendulum, kwargs, name):
    kwargs = {"num_iter": 5, **kwargs}
    with pytest.raises(ValueError, match=name):
        pendulum.transform[0].init_stats(**kwargs)
    assert not pendulum.transform[0].initialized


def test_key_selects_the_entry_read():
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True),
                         ObservationNorm(standard_normal=True))
    try:
        env.transform[0].init_stats(30, key="observation")
        assert env.transform[0].loc.shape == (4,)
    finally:
        env.close()


@pytest.mark.parametrize("key", ["pixels", ("next", "observation"), ("observation", "x")])
def test_a_key_not_in_the_spec_is_named(pendulum, key):
    with pytest.raises(ValueError, match=r"init_stats: key: .*observation_spec.*'observation'"):
        pendulum.transform[0].init_stats(5, key=key)
    assert not pendulum.transform[0].initialized


def test_keep_dims_and_observation_dims_follow_torchrl():
    # TorchRL's dqn_with_rnn call: reduce_dim=[0, 1, 2], keep_dims=[0] on [T, C, H, W]
    # frames: mean over time, C and H kept as [1, W] (TorchRL squeezes the reduced dims not
    # kept, from the left); here on Pendulum's [N, T, 3] rollout with the obs dim reduced
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), ObservationNorm(standard_normal=True))
    try:
        env.set_seed(0)
        env.transform[0].init_stats(50, reduce_dim=(0, 1, 2), cat_dim=0, keep_dims=(0, 2))
        env.base_env.set_seed(0)
        raw = env.base_env.rollout(50, break_when_any_done=False)["observation"].double()
        assert env.transform[0].loc.shape == (1, 1)
        torch.testing.assert_close(env.transform[0].loc, raw.mean().reshape(1, 1).float())
        torch.testing.assert_close(env.transform[0].scale, raw.std().reshape(1, 1).float())
    finally:
        env.close()
