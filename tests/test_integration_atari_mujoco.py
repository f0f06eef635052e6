"""Pixels and continuous control through the collector: ALE's vector env (uint8 frames,
EndOfLifeTransform) and MuJoCo (DoubleToFloat, Bounded actions) -> Collector batches."""

from __future__ import annotations

import pytest
import torch
from rl_collectors import Collector
from rl_envs import DoubleToFloat, EndOfLifeTransform, GymEnv, RewardSum, TransformedEnv

pytest.importorskip("ale_py")
pytest.importorskip("mujoco")


def _atari() -> TransformedEnv:
    base = GymEnv("ALE/Breakout-v5", num_envs=4, info_keys=["lives"],
                  categorical_action_encoding=True)
    env = TransformedEnv(base, EndOfLifeTransform())
    env.append_transform(RewardSum())
    env.set_seed(0)
    return env


def test_collector_over_ale_vector_env_keeps_uint8_frames_and_end_of_life():
    collector = Collector(_atari, frames_per_batch=4 * 64, total_frames=4 * 64 * 2)
    batches = list(collector)
    collector.shutdown()
    assert len(batches) == 2
    for batch in batches:
        assert batch.batch_size == (4, 64)
        assert batch["observation"].dtype == torch.uint8
        assert batch["observation"].shape == (4, 64, 4, 84, 84)
        eol, done = batch["next", "end-of-life"][..., 0], batch["next", "done"][..., 0]
        lost = batch["next", "lives"] < batch["lives"]
        assert torch.equal(eol, lost | done)
        assert not batch["end-of-life"].any()
    # consecutive steps: the root at t + 1 is the next at t, unless the sub-env finished
    b = batches[0]
    same = ~b["next", "done"][:, :-1, 0]
    assert torch.equal(b["observation"][:, 1:][same], b["next", "observation"][:, :-1][same])


def test_collector_over_mujoco_with_float32_observations():
    def make() -> TransformedEnv:
        base = GymEnv("HalfCheetah-v5", num_envs=4, max_episode_steps=50)
        return TransformedEnv(base, DoubleToFloat())

    collector = Collector(make, frames_per_batch=4 * 40, total_frames=4 * 40 * 2)
    for batch in collector:
        assert batch["observation"].dtype == torch.float32
        assert batch["action"].dtype == torch.float32
        assert batch["action"].abs().max() <= 1
    collector.shutdown()
    assert batch["next", "truncated"][:, 9].all()  # 50-step episodes: second batch, step 10
