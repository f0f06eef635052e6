"""``GymEnv(..., from_pixels=True, pixels_only=...)`` and ``frame_skip``, as TorchRL's."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch
from rl_envs import GymEnv, GymWrapper


def test_pixels_are_the_frames_gymnasium_renders_final_frame_included():
    """A ``[]`` env: uint8 ``[T, H, W, 3]`` under ``"pixels"``, the state kept under
    ``"observation"``; each frame is what the simulator renders after the step, the last
    frame of an episode included (``("next", "pixels")``), the root the reset frame."""
    env = GymEnv("CartPole-v1", from_pixels=True, max_episode_steps=6,
                 categorical_action_encoding=True)
    assert env.batch_size == ()
    assert set(env.observation_spec.keys()) == {"observation", "pixels"}
    ref = gym.make("CartPole-v1", render_mode="rgb_array", max_episode_steps=6)
    env.set_seed(0)
    td = env.reset()
    ref.reset(seed=0)
    assert td["pixels"].dtype == torch.uint8 and td["pixels"].shape == (400, 600, 3)
    assert np.array_equal(td["pixels"].numpy(), ref.render())
    for t in range(8):
        td["action"] = torch.tensor(t % 2)
        td, root = env.step_and_maybe_reset(td)
        _, _, term, trunc, _ = ref.step(t % 2)
        assert np.array_equal(td["next", "pixels"].numpy(), ref.render()), t
        assert bool(td["next", "done"]) == (term or trunc)
        if term or trunc:
            ref.reset()
        td = root
        assert np.array_equal(td["pixels"].numpy(), ref.render()), t
    env.close(), ref.close()


def test_pixels_only_and_vector_envs():
    env = GymEnv("CartPole-v1", 2, from_pixels=True, pixels_only=True,
                 categorical_action_encoding=True)
    assert list(env.observation_spec.keys()) == ["pixels"]
    assert env.vectorization_mode == "sync"
    data = env.rollout(3)
    assert data["next", "pixels"].shape == (2, 3, 400, 600, 3)
    env.close()
    single = gym.make("CartPole-v1", render_mode="rgb_array")
    env = GymWrapper(single, from_pixels=True, pixels_only=True)
    assert env.batch_size == () and env.rollout(2)["pixels"].shape == (2, 400, 600, 3)
    env.close()


def test_pixel_arguments_are_checked():
    with pytest.raises(ValueError, match="render_mode='rgb_array'"):
        GymWrapper(gym.make("CartPole-v1"), from_pixels=True, categorical_action_encoding=True)
    with pytest.raises(ValueError, match="from_pixels=True needs a gymnasium Env"):
        GymWrapper(gym.make_vec("CartPole-v1", 2), from_pixels=True,
                   categorical_action_encoding=True)
    with pytest.raises(ValueError, match="vector entry point"):
        GymEnv("CartPole-v1", from_pixels=True, vectorization_mode="vector_entry_point",
               categorical_action_encoding=True)


def test_frame_skip_sums_rewards_and_keeps_the_last_observation():
    env, ref = GymEnv("Pendulum-v1", frame_skip=3), gym.make("Pendulum-v1")
    env.set_seed(1)
    td = env.reset()
    ref.reset(seed=1)
    for _ in range(3):
        td["action"] = torch.tensor([0.5])
        td, root = env.step_and_maybe_reset(td)
        total = sum(ref.step(np.array([0.5], np.float32))[1] for _ in range(3))
        torch.testing.assert_close(td["next", "reward"], torch.tensor([total], dtype=torch.float32))
        obs = torch.from_numpy(ref.unwrapped._get_obs().astype(np.float32))
        torch.testing.assert_close(td["next", "observation"], obs)
        td = root
    env.close()


@pytest.mark.timeout(120)
def test_mujoco_renders_headless_with_egl():
    """MuJoCo renders with ``MUJOCO_GL=egl`` (set before mujoco is imported: a child)."""
    code = (
        "from rl_envs import GymEnv\n"
        "env = GymEnv('InvertedPendulum-v5', from_pixels=True, width=32, height=24)\n"
        "data = env.rollout(3)\n"
        "assert data['pixels'].shape == (3, 24, 32, 3), data['pixels'].shape\n"
        "assert data['pixels'].float().std() > 0\n"
        "env.close()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "MUJOCO_GL": "egl"},
                         capture_output=True, text=True, timeout=110)
    if "EGL" in out.stderr and out.returncode:
        pytest.skip(f"no EGL here: {out.stderr.strip().splitlines()[-1]}")
    assert out.returncode == 0, out.stderr
