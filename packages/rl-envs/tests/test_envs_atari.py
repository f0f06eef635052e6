"""Real ALE envs: GymEnv over ALE's C++ vector env (options, specs, final observations,
partial resets) and over single envs, NoopResetEnv and EndOfLifeTransform."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")
ale_py = pytest.importorskip("ale_py")

from rl_envs import (  # noqa: E402
    Categorical,
    EndOfLifeTransform,
    GymEnv,
    GymWrapper,
    NoopResetEnv,
    RewardSum,
    StepCounter,
    TransformedEnv,
    check_env_specs,
)
from tensordict import TensorDict  # noqa: E402

gym.register_envs(ale_py)
# no randomness but the seed's: fixed start (no noops), no sticky actions, short episodes
DETERMINISTIC = {"noop_max": 0, "repeat_action_probability": 0.0, "max_num_frames_per_episode": 80}
TRUNC_STEP = 19  # 80 frames / frameskip 4: the 20th step is truncated
AUTORESET = [gym.vector.AutoresetMode.SAME_STEP, gym.vector.AutoresetMode.NEXT_STEP]


def test_default_is_ale_vector_env_with_uint8_frames():
    env = GymEnv("ALE/Breakout-v5", num_envs=8, categorical_action_encoding=True)
    assert env.vectorization_mode == "vector_entry_point"
    assert type(env.env.unwrapped).__name__ == "AtariVectorEnv"
    assert env.autoreset_mode == gym.vector.AutoresetMode.SAME_STEP
    obs = env.observation_spec["observation"]
    assert obs.dtype == torch.uint8 and obs.shape == (8, 4, 84, 84)
    assert isinstance(env.action_spec, Categorical) and env.action_spec.shape == (8,)
    check_env_specs(env, seed=0)
    data = env.rollout(20, break_when_any_done=False)
    assert data["next", "observation"].dtype == torch.uint8
    assert data.batch_size == (8, 20)
    env.close()


def test_ale_options_pass_through():
    env = GymEnv(
        "ALE/Pong-v5", num_envs=2, grayscale=False, img_height=64, img_width=48, stack_num=2,
        frameskip=2, reward_clipping=False, episodic_life=True, full_action_space=True,
        categorical_action_encoding=True,
    )
    assert env.observation_spec["observation"].shape == (2, 2, 64, 48, 3)
    assert env.action_spec.n == 18  # full action space
    check_env_specs(env, seed=1)
    env.close()


@pytest.mark.parametrize("mode", AUTORESET, ids=lambda m: m.value)
def test_truncation_keeps_final_obs_against_raw_loop(mode):
    """Every step's observations against ALE's own vector env replayed with the actions."""
    env = GymEnv("ALE/Breakout-v5", num_envs=3, autoreset_mode=mode,
                 categorical_action_encoding=True, **DETERMINISTIC)
    env.set_seed(5)
    data = env.rollout(30, break_when_any_done=False)
    env.close()
    assert data["next", "truncated"][:, TRUNC_STEP].all()
    raw = gym.make_vec("ALE/Breakout-v5", num_envs=3, vectorization_mode="vector_entry_point",
                       **DETERMINISTIC)
    obs, _ = raw.reset(seed=5)
    for t, action in enumerate(data["action"].unbind(-1)):
        np.testing.assert_array_equal(data["observation"][:, t].numpy(), obs)
        nobs, _, term, trunc, _ = raw.step(action.numpy())
        np.testing.assert_array_equal(data["next", "observation"][:, t].numpy(), nobs)
        np.testing.assert_array_equal(data["next", "truncated"][:, t, 0].numpy(), trunc)
        done = term | trunc
        obs = raw.reset(options={"reset_mask": done})[0] if done.any() else nobs
    raw.close()
    # the final frame is not the reset frame: the wrapper did not hand out the reset
    final = data["next", "observation"][:, TRUNC_STEP]
    assert not torch.equal(final, data["observation"][:, TRUNC_STEP + 1])


@pytest.mark.parametrize("mode", AUTORESET, ids=lambda m: m.value)
def test_partial_reset_restarts_only_the_masked_sub_env(mode):
    env = GymEnv("ALE/Breakout-v5", num_envs=3, autoreset_mode=mode,
                 info_keys=["episode_frame_number"], **DETERMINISTIC)
    env.set_seed(0)
    env.rollout(7, break_when_any_done=False)
    env.reset(TensorDict({"_reset": torch.tensor([True, False, False])}, batch_size=[3]))
    data = env.rollout(30, auto_reset=False, break_when_any_done=False)
    truncated = data["next", "truncated"][..., 0]
    first = [int(row.nonzero()[0]) for row in truncated]
    assert first == [TRUNC_STEP, TRUNC_STEP - 7, TRUNC_STEP - 7]
    # a reset step never reaches the data (NEXT_STEP's pending autoreset was cancelled)
    frames = data["next", "episode_frame_number"]
    within = ~(truncated[:, :-1] | truncated[:, 1:])  # pairs of steps of one episode
    assert ((frames[:, 1:] - frames[:, :-1])[within] == 4).all()
    env.close()


def test_batch_size_other_than_num_envs_is_refused():
    with pytest.raises(ValueError, match="batch_size"):
        GymEnv("ALE/Breakout-v5", num_envs=4, batch_size=2, categorical_action_encoding=True)


def test_single_ale_envs_in_sync_mode():
    env = GymEnv("ALE/Breakout-v5", num_envs=2, vectorization_mode="sync",
                 categorical_action_encoding=True)
    assert list(env.observation_spec.keys()) == ["pixels"]  # RGB frames: TorchRL's key
    assert env.observation_spec["pixels"].shape == (2, 210, 160, 3)
    assert env.observation_spec["pixels"].dtype == torch.uint8
    check_env_specs(env, seed=0)
    env.close()


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({}, "pixels"),
        ({"obs_type": "grayscale"}, "observation"),
        ({"obs_type": "ram"}, "observation"),
    ],
    ids=["rgb", "grayscale", "ram"],
)
def test_observation_key_follows_torchrl_rule(kwargs, key):
    """TorchRL's rule: a Box of rank 3, last dim 3, bounds 0 and 255 is "pixels"."""
    raw = gym.make("ALE/Pong-v5", **kwargs)
    env = GymWrapper(raw)
    assert list(env.observation_spec.keys()) == [key]
    env.set_seed(0)
    np.testing.assert_array_equal(env.reset()[key].numpy(), raw.unwrapped._get_obs())
    env.close()
    named = GymWrapper(gym.make("ALE/Pong-v5", **kwargs), obs_key="screen")
    assert list(named.observation_spec.keys()) == ["screen"]
    named.close()


def test_observation_key_bad_input_names_the_argument():
    raw = gym.make("ALE/Pong-v5")
    with pytest.raises(TypeError, match=r"obs_key must be None .* received 3"):
        GymWrapper(raw, obs_key=3)
    raw.close()


# -- NoopResetEnv ---------------------------------------------------------------------------
def _frames(base: GymEnv) -> list[int]:
    return [e.unwrapped.ale.getEpisodeFrameNumber() for e in base.env.envs]


def test_noop_reset_fixed_count_at_reset_and_after_an_episode_end():
    base = GymEnv("ALE/Pong-v5", num_envs=3, vectorization_mode="sync", max_episode_steps=6,
                  categorical_action_encoding=True)
    env = TransformedEnv(base, NoopResetEnv(noops=3, random=False))
    env.set_seed(0)
    root = env.reset()
    assert _frames(base) == [12, 12, 12]  # 3 no-ops x frameskip 4
    screens = np.stack([e.unwrapped._get_obs() for e in base.env.envs])
    np.testing.assert_array_equal(root["pixels"].numpy(), screens)  # after the no-ops
    # TimeLimit counts the no-ops: 3 + 3 policy steps end the episode
    data = env.rollout(3, auto_reset=False, break_when_any_done=False)
    assert data["next", "truncated"][:, 2].all()
    assert _frames(base) == [12, 12, 12]  # the finished sub-envs took their no-ops again
    screens = np.stack([e.unwrapped._get_obs() for e in base.env.envs])
    np.testing.assert_array_equal(env._root_buf["pixels"].numpy(), screens)
    env.close()


def test_noop_reset_random_counts_are_drawn_per_sub_env_and_seeded():
    def counts(seed: int) -> list[int]:
        base = GymEnv("ALE/Pong-v5", num_envs=6, vectorization_mode="sync",
                      categorical_action_encoding=True)
        env = TransformedEnv(base, NoopResetEnv(noops=30))
        env.set_seed(seed)
        env.reset()
        frames = _frames(base)
        env.close()
        return [f // 4 for f in frames]

    first = counts(3)
    assert all(0 <= k <= 30 for k in first) and len(set(first)) > 1
    assert counts(3) == first


def test_noop_reset_partial_reset_steps_only_the_reset_sub_env():
    base = GymEnv("ALE/Pong-v5", num_envs=2, vectorization_mode="sync",
                  categorical_action_encoding=True)
    env = TransformedEnv(base, NoopResetEnv(noops=2, random=False))
    env.reset()
    env.rollout(5, auto_reset=False, break_when_any_done=False)
    env.reset(TensorDict({"_reset": torch.tensor([False, True])}, batch_size=[2]))
    assert _frames(base) == [8 + 20, 8]
    env.close()


def test_noop_reset_errors():
    with pytest.raises(ValueError, match="noops"):
        NoopResetEnv(noops=0)
    short = GymEnv("ALE/Pong-v5", num_envs=1, vectorization_mode="sync", max_episode_steps=2,
                   categorical_action_encoding=True)
    with pytest.raises(RuntimeError, match="noops=5"):
        TransformedEnv(short, NoopResetEnv(noops=5, random=False)).reset()
    short.close()
    vec = GymEnv("ALE/Pong-v5", num_envs=2, categorical_action_encoding=True)
    with pytest.raises(TypeError, match="vectorization_mode='sync'"):
        TransformedEnv(vec, NoopResetEnv()).reset()
    vec.close()
    base = GymEnv("ALE/Pong-v5", num_envs=1, vectorization_mode="sync",
                  categorical_action_encoding=True)
    with pytest.raises(ValueError, match="first transform"):
        TransformedEnv(base, StepCounter()).append_transform(NoopResetEnv()).reset()
    base.close()


# -- EndOfLifeTransform ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs",
    [  # small observations: 400 steps of 4 envs are stored
        {"info_keys": ["lives"], "stack_num": 1, "img_height": 42, "img_width": 42},
        {"vectorization_mode": "sync", "obs_type": "ram"},
        {"vectorization_mode": "sync", "obs_type": "ram", "info_keys": ["lives"]},
    ],
    ids=["ale-vector", "sync-attribute", "sync-info"],
)
def test_end_of_life_marks_life_losses_and_keeps_the_true_return(kwargs):
    base = GymEnv("ALE/Breakout-v5", num_envs=4, **kwargs)
    env = TransformedEnv(base, EndOfLifeTransform())
    env.append_transform(RewardSum())
    check_env_specs(env, seed=0)
    assert "end-of-life" in env.full_done_spec
    data = env.rollout(400, break_when_any_done=False)
    env.close()
    eol, done = data["next", "end-of-life"][..., 0], data["next", "done"][..., 0]
    lost = data["next", "lives"] < data["lives"]
    assert (eol == (lost | done)).all()
    assert not data["end-of-life"].any()  # a root is never finished
    life_only = eol & ~done
    assert life_only.sum() >= 4  # random play loses lives within 400 steps
    # the episode goes on across a life loss: no reset, the return keeps adding up
    nxt = data["next", "episode_reward"][..., 0]
    later = torch.roll(life_only, 1, dims=-1)
    later[:, 0] = False
    carried = data["episode_reward"][..., 0][later]
    np.testing.assert_array_equal(carried.numpy(), torch.roll(nxt, 1, dims=-1)[later].numpy())
    assert (carried > 0).any()
    assert (data["next", "lives"][life_only] > 0).all()


def test_end_of_life_register_keys_and_errors():
    class _Keys:
        done, terminated, reward = "done", "terminated", "reward"

    class _Loss:
        tensor_keys = _Keys()

        def set_keys(self, **keys):
            for k, v in keys.items():
                setattr(self.tensor_keys, k, v)
            return self

    loss = EndOfLifeTransform().register_keys(_Loss())
    assert (loss.tensor_keys.done, loss.tensor_keys.terminated) == ("end-of-life", "end-of-life")
    assert loss.tensor_keys.reward == "reward"
    with pytest.raises(TypeError, match="register_keys"):
        EndOfLifeTransform().register_keys(object())
    env = GymEnv("ALE/Breakout-v5", num_envs=1, vectorization_mode="sync",
                 categorical_action_encoding=True)
    with pytest.raises(AttributeError, match="eol_attribute"):
        TransformedEnv(env, EndOfLifeTransform(eol_attribute="unwrapped.nope")).reset()
    env.close()
