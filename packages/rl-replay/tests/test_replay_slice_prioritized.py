"""PrioritizedSliceSampler: slice starts drawn by priority, within one episode."""

from __future__ import annotations

import pytest
import torch
from rl_replay import (
    INDEX,
    PRIORITY_WEIGHT,
    LazyTensorStorage,
    PrioritizedSliceSampler,
    TensorDictReplayBuffer,
)
from rl_replay.replay_buffers.samplers import PrioritizedSliceSampler as FromPath
from tensordict import TensorDict

# episodes of 10, 3, 7 and 10 steps: the 3-step one cannot hold a 4-step slice
TRAJ = torch.tensor([0] * 10 + [1] * 3 + [2] * 7 + [3] * 10)


def make(alpha: float = 1.0, beta: float = 1.0, **kwargs) -> TensorDictReplayBuffer:
    kwargs.setdefault("slice_len", 4)
    rb = TensorDictReplayBuffer(
        storage=LazyTensorStorage(30), batch_size=4 * 500,
        sampler=PrioritizedSliceSampler(30, alpha=alpha, beta=beta, traj_key="traj", **kwargs))
    rb.extend(TensorDict({"traj": TRAJ, "t": torch.arange(30)}, [30]))
    return rb


def eligible_starts() -> torch.Tensor:
    ok = torch.zeros(30, dtype=torch.bool)
    for ep in TRAJ.unique():
        steps = torch.nonzero(TRAJ.eq(ep)).squeeze(1)
        if len(steps) >= 4:
            ok[steps[: len(steps) - 3]] = True
    return ok


def test_slices_stay_in_one_episode_and_starts_follow_the_priorities() -> None:
    rb = make()
    torch.manual_seed(0)
    priority = torch.rand(30) + 0.05
    rb.update_priority(torch.arange(30), priority)
    s = rb.sample().reshape(500, 4)
    assert (s["traj"] == s["traj"][:, :1]).all()
    assert (s["t"][:, 1:] - s["t"][:, :-1] == 1).all()
    assert s["is_init"][:, 0].all() and not s["is_init"][:, 1:].any()
    starts = s["t"][:, 0]
    ok = eligible_starts()
    assert ok[starts].all()
    expected = torch.where(ok, priority, 0.0) / torch.where(ok, priority, 0.0).sum()
    freq = torch.bincount(starts, minlength=30).double() / 500
    assert (freq - expected).abs().max() < 0.06, (freq, expected)


def test_priority_weight_is_the_start_importance_weight() -> None:
    # TorchRL's rule, by hand: q = (p + eps) ** alpha, weight = (q_start / q_min) ** -beta,
    # q_min over every stored step: here step 9, the last of episode 0, which cannot start
    # a 4-step slice, so no sampled weight reaches 1
    rb = make(alpha=0.7, beta=0.5)
    priority = torch.linspace(0.1, 3.0, 30)
    priority[9] = 0.01
    rb.update_priority(torch.arange(30), priority)
    s = rb.sample().reshape(500, 4)
    q = (priority.double() + 1e-8) ** 0.7
    want = (q[s["t"][:, 0]] / q[9]) ** -0.5
    torch.testing.assert_close(s[PRIORITY_WEIGHT][:, 0].double(), want, rtol=1e-5, atol=1e-6)
    assert (s[PRIORITY_WEIGHT] == s[PRIORITY_WEIGHT][:, :1]).all()
    assert s[PRIORITY_WEIGHT].max() < 1.0


def test_update_priority_from_a_sample_moves_the_starts() -> None:
    rb = make()
    s = rb.sample()
    rb.update_priority(s[INDEX], torch.zeros(s.shape[0]))
    rb.update_priority(torch.tensor([20]), torch.tensor([1.0]))  # episode 3's first step
    again = rb.sample().reshape(500, 4)
    assert (again["t"][:, 0] == 20).float().mean() > 0.9


def test_short_episodes_without_strict_length_give_shorter_slices() -> None:
    rb = make(strict_length=False, slice_len=8)
    rb.update_priority(torch.arange(30), (TRAJ == 1).float() * 1e6 + 1e-3)
    s = rb.sample()
    assert (s["traj"] == 1).float().mean() > 0.5
    assert s.shape[0] < 4 * 500


def test_path_and_bad_arguments() -> None:
    assert FromPath is PrioritizedSliceSampler
    with pytest.raises(ValueError, match="alpha"):
        PrioritizedSliceSampler(10, alpha=-1.0, beta=0.4, slice_len=2)
    with pytest.raises(ValueError, match="num_slices, slice_len"):
        PrioritizedSliceSampler(10, alpha=0.6, beta=0.4)
    with pytest.raises(ValueError, match="batch_size"):
        make().sample(7)
