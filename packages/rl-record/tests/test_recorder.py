"""PixelRenderTransform renders every sub-env into "pixels"; VideoRecorder hands the frames
of an episode to a logger, and the mp4 decodes back with the frame count and size."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from rl_envs import GymEnv, StepCounter, TransformedEnv
from rl_record import (
    CSVLogger,
    LoggerInputError,
    PixelRenderTransform,
    VideoFormatError,
    VideoRecorder,
    read_video,
)


def _env(num_envs: int, *transforms) -> TransformedEnv:
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=num_envs, render_mode="rgb_array",
                                categorical_action_encoding=True),
                         PixelRenderTransform())
    for t in transforms:
        env.append_transform(t)
    env.set_seed(0)
    return env


def test_one_env_episode_to_mp4(tmp_path: Path) -> None:
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="mp4")
    recorder = VideoRecorder(logger, tag="eval/video", fps=20)
    env = _env(1, StepCounter(7), recorder)
    try:
        data = env.rollout(50, break_when_any_done=True)
    finally:
        env.close()
    steps = data["next", "done"].shape[-2]
    assert steps == 7  # StepCounter truncated the episode
    pixels = data["next", "pixels"]
    assert pixels.dtype == torch.uint8 and pixels.shape[-3:] == (400, 600, 3)
    recorder.dump()
    logger.close()
    frames = read_video(tmp_path / "exp/videos/eval/video_0.mp4")
    # the reset frame, then one per step (TorchRL's skip=1 for vector envs)
    assert frames.shape == (1 + steps, 400, 600, 3)
    assert recorder.obs == [] and recorder.count == 1


def test_batched_envs_tile_into_a_grid_with_crop_and_skip(tmp_path: Path) -> None:
    logger = CSVLogger("exp", log_dir=tmp_path, video_format="mp4")
    recorder = VideoRecorder(logger, tag="grid", skip=2, center_crop=100)
    env = _env(3, recorder)
    try:
        env.rollout(5, break_when_any_done=False)
    finally:
        env.close()
    recorder.dump(suffix="a")
    logger.close()
    frames = read_video(tmp_path / "exp/videos/grid_a_0.mp4")
    # 6 frames kept every 2nd -> 3; 3 envs on a 2x2 grid of 100x100 crops
    assert frames.shape == (3, 200, 200, 3)


def test_bad_recorder_input(tmp_path: Path) -> None:
    logger = CSVLogger("exp", log_dir=tmp_path)
    with pytest.raises(LoggerInputError, match="skip must be an int >= 1"):
        VideoRecorder(logger, tag="x", skip=0)
    with pytest.raises(LoggerInputError, match="logger must be an rl_record Logger"):
        VideoRecorder(object(), tag="x")  # type: ignore[arg-type]
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=1, categorical_action_encoding=True),
                         VideoRecorder(logger, tag="x", in_keys=["observation"]))
    try:
        with pytest.raises(VideoFormatError, match="must be uint8 frames"):
            env.rollout(2)
    finally:
        env.close()
    with pytest.raises(LoggerInputError, match="render_mode='rgb_array'"):
        TransformedEnv(GymEnv("CartPole-v1", num_envs=1,
                              categorical_action_encoding=True), PixelRenderTransform()).close()
    logger.close()
