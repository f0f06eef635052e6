"""SerialEnv / ParallelEnv state: the transforms inside each worker's env are saved and
restored (a collector over a batched env checkpoints their statistics too)."""

from __future__ import annotations

import psutil
import pytest
import torch
from rl_envs import (
    Compose,
    GymEnv,
    ParallelEnv,
    RewardSum,
    SerialEnv,
    StepCounter,
    TransformedEnv,
    VecNorm,
)


def make_normalised_cartpole():
    """One CartPole whose observations a VecNorm of its own normalises."""
    return TransformedEnv(
        GymEnv("CartPole-v1", categorical_action_encoding=True),
        Compose(VecNorm(decay=1.0), RewardSum(), StepCounter(50)),
    )


def _batched(kind):
    cls = ParallelEnv if kind == "parallel" else SerialEnv
    return cls(2, make_normalised_cartpole)


def _play(env, steps, seed):
    """Normalised observations of ``steps`` seeded random steps from a reset."""
    g = torch.Generator().manual_seed(seed)
    root = env.reset()
    seen = []
    for _ in range(steps):
        root["action"] = torch.randint(2, env.action_spec.shape, generator=g)
        td, root = env.step_and_maybe_reset(root)
        seen.append(td["next", "observation"].clone())
    return torch.stack(seen)


def _leaves(state, prefix=""):
    """``{path: tensor}`` of a nested state dict."""
    out = {}
    for key, value in state.items() if isinstance(state, dict) else enumerate(state):
        if isinstance(value, (dict, list)):
            out.update(_leaves(value, f"{prefix}{key}/"))
        else:
            out[f"{prefix}{key}"] = torch.as_tensor(value)
    return out


def _same(a, b):
    la, lb = _leaves(a), _leaves(b)
    return la.keys() == lb.keys() and all(torch.equal(la[k], lb[k]) for k in la)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["serial", "parallel"])
def test_the_workers_transforms_are_saved_continued_and_restored(kind):
    # the restored copy is a SerialEnv (one batched state for both): spawned workers
    # cost seconds each to start on a loaded machine
    env, other = _batched(kind), _batched("serial")
    pids = [p for e in (env, other) for p in getattr(e, "worker_pids", [])]
    try:
        env.set_seed(0)
        _play(env, 30, seed=1)
        saved = env.state_dict()
        assert len(saved["workers"]) == 2
        assert [k for k in _leaves(saved) if "VecNorm" in k]
        assert not _same(saved["workers"][0], saved["workers"][1])  # each its own statistics
        _play(env, 30, seed=2)  # the run continues: the statistics move on
        moved = env.state_dict()
        assert not _same(moved, saved)
        env.load_state_dict(saved)
        assert _same(env.state_dict(), saved)
        other.load_state_dict(moved)  # another state: other normalised observations
        env.set_seed(5), other.set_seed(5)
        assert not torch.equal(_play(other, 20, seed=3), _play(env, 20, seed=3))
        env.load_state_dict(saved)
        other.load_state_dict(saved)  # the env of a resumed run
        env.set_seed(5), other.set_seed(5)
        assert torch.equal(_play(other, 20, seed=3), _play(env, 20, seed=3))
        with pytest.raises(ValueError, match="expected the state of 2 workers.*got 1 workers"):
            env.load_state_dict({"workers": saved["workers"][:1]})
    finally:
        env.close()
        other.close()
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
