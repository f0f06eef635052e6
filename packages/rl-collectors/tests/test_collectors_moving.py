"""The env writing its observation into the batch (``rl_envs.MovingObs``, issue 42): the
batches are value for value those of the env's own buffers copied in, on every path a
reset takes, and nothing outside the loop sees the batch's slots."""

from __future__ import annotations

import pytest
import torch
from rl_collectors import Collector
from rl_collectors import _collector as collector_module
from rl_envs import DoubleToFloat, GymEnv, InitTracker, RewardSum, StepCounter, TransformedEnv
from rl_modules import MLP, ProbabilisticActor
from tensordict.nn import TensorDictModule


def _cartpole(num_envs: int, max_steps: int = 30, **kwargs) -> TransformedEnv:
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=num_envs,
                                categorical_action_encoding=True, **kwargs),
                         StepCounter(max_steps))
    env.append_transform(InitTracker())
    env.append_transform(RewardSum())
    return env


def _actor(env) -> ProbabilisticActor:
    return ProbabilisticActor(
        TensorDictModule(MLP(4, 2, num_cells=16, depth=1), ["observation"], ["logits"]),
        ["logits"], spec=env.action_spec, distribution_class=torch.distributions.Categorical,
        return_log_prob=True)


CASES = {
    "x3": (lambda: _cartpole(3), {"frames_per_batch": 60, "total_frames": 240}),
    "x3 random first": (lambda: _cartpole(3),
                        {"frames_per_batch": 60, "total_frames": 240, "init_random_frames": 90}),
    "x2 one frame": (lambda: _cartpole(2), {"frames_per_batch": 2, "total_frames": 300}),
    "unbatched": (lambda: TransformedEnv(GymEnv("CartPole-v1", categorical_action_encoding=True),
                                         RewardSum()),
                  {"frames_per_batch": 20, "total_frames": 300}),
    "same-step autoreset": (
        lambda: _cartpole(3, vectorization_mode="sync",
                          vector_kwargs={"autoreset_mode": "SameStep"}),
        {"frames_per_batch": 60, "total_frames": 240}),
    "split_trajs": (lambda: _cartpole(3),
                    {"frames_per_batch": 60, "total_frames": 240, "split_trajs": True}),
    "reset_at_each_iter": (lambda: _cartpole(3), {"frames_per_batch": 60, "total_frames": 240,
                                                  "reset_at_each_iter": True}),
}


def _collect(make_env, kwargs: dict) -> tuple[list, bool, GymEnv]:
    torch.manual_seed(0)
    env = make_env()
    env.set_seed(0)
    collector = Collector(env, _actor(env), **kwargs)
    try:
        moving = collector._batch_plan.moving is not None
        return [batch.clone() for batch in collector], moving, env
    finally:
        collector.shutdown()


@pytest.mark.parametrize("case", list(CASES))
def test_batches_equal_the_copied_buffers(case: str, monkeypatch) -> None:
    make_env, kwargs = CASES[case]
    moved, was_moving, _ = _collect(make_env, kwargs)
    assert was_moving
    monkeypatch.setattr(collector_module, "moving_obs_source", lambda env, policy_input: None)
    copied, was_moving, _ = _collect(make_env, kwargs)
    assert not was_moving
    assert len(moved) == len(copied)
    done = 0
    for a, b in zip(moved, copied, strict=True):
        assert set(a.keys(True, True)) == set(b.keys(True, True))
        for key in a.keys(True, True):
            assert torch.equal(a.get(key), b.get(key)), (case, key)
        done += int(b["next", "done"].sum())
    assert done > 0  # resets happened inside the batches


def test_the_env_is_its_own_again_after_the_loop() -> None:
    """Between batches the env's views and the policy input's observation are the env's
    own buffers, so its own step, reset and rollout see what they always saw."""
    env = _cartpole(2)
    env.set_seed(0)
    collector = Collector(env, _actor(env), frames_per_batch=20, total_frames=40)
    base = env.base_env
    own = (base._nobs, base._robs, base._obs_views)
    root, nxt = env.buffers()
    for batch in collector:
        assert (base._nobs, base._robs, base._obs_views) == own
        assert collector.policy_input.get("observation") is root.get("observation")
        # the last step's next root is the env's own root: the next batch's first
        assert torch.equal(root["observation"][~nxt["done"][:, 0]],
                           batch["next", "observation"][:, -1][~nxt["done"][:, 0]])
    try:  # the collector is done; the env (open until shutdown) rolls out on its own loop
        data = env.rollout(5, break_when_any_done=False)
        assert data["next", "observation"].shape == (2, 5, 4)
        assert torch.equal(data["next", "observation"][:, -1], nxt["observation"])
        assert (base._nobs, base._robs, base._obs_views) == own
    finally:
        collector.shutdown()


def test_where_the_env_keeps_its_buffers() -> None:
    """An observation transform, an after-step reset (``max_frames_per_traj``) and another
    storing device keep the copies of the env's buffers."""
    pendulum = TransformedEnv(GymEnv("Pendulum-v1"), DoubleToFloat())
    cases = [
        (pendulum, {}),
        (_cartpole(2), {"max_frames_per_traj": 5}),
    ]
    for env, extra in cases:
        collector = Collector(env, None, frames_per_batch=10, total_frames=10, **extra)
        assert collector._batch_plan.moving is None
        next(iter(collector))
        collector.shutdown()
    env = _cartpole(2)
    collector = Collector(env, None, frames_per_batch=10, total_frames=10)
    assert collector._batch_plan.moving is not None
    collector.shutdown()


def test_a_moving_plan_refuses_a_stop() -> None:
    from rl_envs import step_loop

    env = _cartpole(2)
    collector = Collector(env, None, frames_per_batch=10, total_frames=10)
    try:
        with pytest.raises(ValueError, match="expected stop=None"):
            step_loop(5, collector._random_actor, env.fast_step, collector._batch_plan,
                      stop=lambda t: False)
    finally:
        collector.shutdown()
