"""Transforms: specs, fast path semantics, partial resets, inverse actions."""

from __future__ import annotations

import pytest
import torch

gym = pytest.importorskip("gymnasium")

from rl_envs import (  # noqa: E402
    Bounded,
    Compose,
    DoubleToFloat,
    GymEnv,
    GymWrapper,
    InitTracker,
    ObservationNorm,
    RewardSum,
    StepCounter,
    TensorDictPrimer,
    TransformedEnv,
    Unbounded,
    check_env_specs,
)

from ._toy import CountEnv  # noqa: E402


def test_step_counter_truncates_and_resets_with_final_obs():
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=3,
                                categorical_action_encoding=True), StepCounter(4))
    env.set_seed(0)
    data = env.rollout(9, break_when_any_done=False)
    assert env.observation_spec["step_count"] == Bounded(0, 4, (3, 1), dtype=torch.int64)
    assert data["step_count"][0, :, 0].tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 0]
    assert data["next", "step_count"][0, :, 0].tolist() == [1, 2, 3, 4, 1, 2, 3, 4, 1]
    trunc = data["next", "truncated"][..., 0]
    assert trunc[:, 3].all() and trunc[:, 7].all()
    assert torch.equal(data["next", "done"], data["next", "terminated"] | data["next", "truncated"])
    # final observation kept, next root is a reset observation
    assert not torch.equal(data["next", "observation"][:, 3], data["observation"][:, 4])
    assert (data["observation"][:, 4].abs() <= 0.05).all()
    env.close()


def test_init_tracker_and_reward_sum():
    env = TransformedEnv(CountEnv(limit=2), Compose(InitTracker(), RewardSum()))
    ones = torch.ones(3, dtype=torch.int64)
    data = env.rollout(
        4, policy=lambda td: td.set("action", ones.clone()), break_when_any_done=False
    )
    assert data["is_init"][0, :, 0].tolist() == [True, False, True, False]
    assert not data["next", "is_init"].any()
    assert data["next", "episode_reward"][0, :, 0].tolist() == [1, 2, 1, 2]
    assert data["episode_reward"][0, :, 0].tolist() == [0, 1, 0, 1]
    assert data["next", "episode_reward"][2, :, 0].tolist() == [1, 2, 3, 4]


def test_partial_reset_through_transforms():
    env = TransformedEnv(CountEnv(limit=100), Compose(StepCounter(), InitTracker(), RewardSum()))
    td = env.reset()
    for _ in range(2):
        td, td_root = env.step_and_maybe_reset(td.set("action", torch.ones(3, dtype=torch.int64)))
        td = td_root
    td["_reset"] = torch.tensor([True, False, False])
    out = env.reset(td)
    assert out["step_count"][:, 0].tolist() == [0, 2, 2]
    assert out["is_init"][:, 0].tolist() == [True, False, False]
    assert out["episode_reward"][:, 0].tolist() == [0, 2, 2]
    assert out["observation"][:, 0].tolist() == [0, 2, 2]


def test_double_to_float_specs_and_inverse_action():
    class Double(gym.Env):
        observation_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=float)
        action_space = gym.spaces.Box(-1.0, 1.0, (1,), dtype=float)

        def reset(self, seed=None, options=None):
            super().reset(seed=seed)
            return self.np_random.uniform(-1, 1, 2), {}

        def step(self, action):
            assert action.dtype == float
            return self.np_random.uniform(-1, 1, 2), float(action[0]), False, False, {}

    base = GymWrapper(gym.vector.SyncVectorEnv([Double, Double], autoreset_mode="SameStep"))
    assert base.observation_spec["observation"].dtype == torch.float64
    env = TransformedEnv(base, DoubleToFloat(in_keys_inv=["action"]))
    assert env.observation_spec["observation"].dtype == torch.float32
    assert isinstance(env.observation_spec["observation"], Bounded)
    assert env.action_spec.dtype == torch.float32 and base.action_spec.dtype == torch.float64
    data = env.rollout(3)
    assert (
        data["observation"].dtype == torch.float32
        and data["next", "observation"].dtype == torch.float32
    )
    assert torch.allclose(
        data["next", "observation"].double(), data["next", "observation"].double()
    )
    check_env_specs(env)
    env.close()


def test_observation_norm_init_stats_and_spec():
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=4), ObservationNorm(standard_normal=True))
    env.set_seed(0)
    norm = env.transform[0]
    with pytest.raises(RuntimeError, match="init_stats"):
        env.rollout(2)
    norm.init_stats(100)
    assert norm.loc.shape == (3,) and norm.scale.shape == (3,)
    raw = env.base_env.rollout(100, break_when_any_done=False)
    base_obs = raw["observation"]
    expected = (base_obs - norm.loc) / norm.scale
    env.set_seed(1)  # seeds the random actions of env and of its base the same way
    data = env.rollout(20, break_when_any_done=False)
    env.base_env.set_seed(1)
    raw = env.base_env.rollout(20, break_when_any_done=False)
    assert torch.allclose(
        data["observation"], (raw["observation"] - norm.loc) / norm.scale, atol=1e-5
    )
    assert torch.allclose(
        data["next", "observation"], (raw["next", "observation"] - norm.loc) / norm.scale, atol=1e-5
    )
    assert isinstance(env.observation_spec["observation"], Bounded)
    assert expected.shape == base_obs.shape
    check_env_specs(env)
    env.close()


def test_observation_norm_affine_form():
    env = TransformedEnv(CountEnv(), ObservationNorm(loc=1.0, scale=2.0))
    data = env.rollout(2, policy=lambda td: td.set("action", torch.ones(3, dtype=torch.int64)))
    assert data["next", "observation"][0, :, 0].tolist() == [3.0, 5.0]  # obs * 2 + 1


def test_primer_resets_on_done():
    env = TransformedEnv(
        CountEnv(limit=2), TensorDictPrimer({"h": Unbounded((4,))}, default_value=0.0)
    )
    assert env.observation_spec["h"].shape == (3, 4)

    def policy(td):
        td["action"] = torch.ones(3, dtype=torch.int64)
        td["next", "h"] = td["h"] + 1
        return td

    data = env.rollout(4, policy=policy, break_when_any_done=False)
    assert data["h"][0, :, 0].tolist() == [0, 1, 0, 1]  # sub-env 0 ends every 2 steps
    assert data["h"][2, :, 0].tolist() == [0, 1, 2, 3]


def test_primer_copies_every_key_to_next_on_steps_without_done():
    # the fast path (what collectors run): each primed key's root value goes to "next",
    # on every step, and a finished sub-env gets the default back in the root only
    primer = TensorDictPrimer({"h": Unbounded((4,)), "c": Unbounded((4,))}, default_value=0.0)
    env = TransformedEnv(CountEnv(limit=2), primer)
    env.fast_reset()
    root, nxt = env.buffers()
    for step, value in enumerate((1.0, 2.0)):
        root["h"].fill_(value)
        root["c"].fill_(-value)
        env.fast_step(torch.ones(3, dtype=torch.int64))
        assert (nxt["h"] == value).all() and (nxt["c"] == -value).all(), step
    done = nxt["done"].squeeze(-1)
    assert done.tolist() == [True, False, False]  # sub-env 0 ends at 2
    assert (root["h"][done] == 0).all() and (root["c"][done] == 0).all()
    assert (root["h"][~done] == 2.0).all() and (root["c"][~done] == -2.0).all()
    env.close()


def test_transformed_env_binds_external_buffers():
    env = TransformedEnv(CountEnv(), Compose(StepCounter(2), RewardSum()))
    root, nxt = env.fake_tensordict().exclude("next", "action"), env.fake_tensordict()["next"]
    env.bind_buffers(root, nxt)
    env.fast_reset()
    n, r = env.fast_step(torch.ones(3, dtype=torch.int64))
    assert n is nxt and r is root
    assert nxt["step_count"][:, 0].tolist() == [1, 1, 1]
    env.fast_step(torch.ones(3, dtype=torch.int64))
    assert nxt["truncated"][:, 0].all() and root["step_count"].sum() == 0


TRANSFORMS = [
    lambda: StepCounter(5),
    InitTracker,
    RewardSum,
    DoubleToFloat,
    lambda: ObservationNorm(loc=0.0, scale=1.0),
    lambda: TensorDictPrimer({"h": Unbounded((2,))}),
    lambda: Compose(StepCounter(3), InitTracker(), RewardSum()),
]


@pytest.mark.parametrize("make", TRANSFORMS)
def test_check_env_specs_every_transform(make):
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                categorical_action_encoding=True), make())
    check_env_specs(env, steps=6, seed=0)
    env.close()


def test_transform_argument_errors():
    with pytest.raises(ValueError, match="max_steps"):
        StepCounter(0)
    with pytest.raises(TypeError, match="Compose"):
        Compose(object())
    with pytest.raises(TypeError, match="EnvBase"):
        TransformedEnv(object(), StepCounter())
    with pytest.raises(ValueError, match="same length"):
        RewardSum(in_keys=["reward"], out_keys=["a", "b"])


def test_clone_copies_a_chain_for_another_env_and_apply_visits_every_transform():
    # TorchRL's sota scripts build their eval env from train_env.transform.clone() and call
    # eval_env.apply(dump_video)
    from rl_envs import Compose, ObservationNorm, RewardSum

    norm = ObservationNorm(loc=torch.ones(3), scale=torch.full((3,), 2.0),
                           in_keys=["observation"])
    env = TransformedEnv(GymEnv("Pendulum-v1"), Compose(StepCounter(5), Compose(norm),
                                                       RewardSum()))
    env.rollout(7)  # the counters move, the env's buffers are bound
    chain = env.transform.clone()
    assert chain is not env.transform and chain[1][0] is not norm
    assert all(t._owner is None for t in (chain, *chain.transforms, chain[1][0]))
    torch.testing.assert_close(chain[1][0].loc, norm.loc)  # statistics copied
    other = TransformedEnv(GymEnv("Pendulum-v1"), chain)
    assert other.rollout(3)["next", "step_count"].flatten().tolist() == [1, 2, 3]
    assert env.rollout(2)["next", "step_count"].flatten().tolist() == [1, 2]  # untouched
    seen = []
    assert env.apply(seen.append) is env
    assert [type(x).__name__ for x in seen] == [
        "Compose", "StepCounter", "Compose", "ObservationNorm", "RewardSum", "GymEnv",
        "TransformedEnv"]
