"""EnvBase: layout, partial resets, done completion, rollout, errors (toy env, no gymnasium)."""

from __future__ import annotations

import pytest
import torch
from rl_envs import EnvClosedError, GymEnv, InvalidActionError, RandomPolicy
from rl_envs._env import ACTION_CHECK_STEPS
from tensordict import TensorDict

from ._toy import CountEnv

ONES = torch.ones(3, dtype=torch.int64)


def test_rollout_layout_time_last_and_keys():
    env = CountEnv()
    data = env.rollout(
        4, policy=lambda td: td.set("action", ONES.clone()), break_when_any_done=False
    )
    assert data.batch_size == (3, 4)
    assert set(data.keys()) == {"observation", "action", "done", "terminated", "truncated", "next"}
    assert set(data["next"].keys()) == {"observation", "reward", "done", "terminated", "truncated"}
    assert data["next", "reward"].shape == (3, 4, 1) and data["next", "done"].shape == (3, 4, 1)
    # sub-env 0 ends at 3 steps: next obs is the real final one, the next root is reset
    assert data["next", "observation"][0, :, 0].tolist() == [1, 2, 3, 1]
    assert data["observation"][0, :, 0].tolist() == [0, 1, 2, 0]
    assert data["next", "done"][0, :, 0].tolist() == [False, False, True, False]
    # root done flags are always False (a root is never a finished state)
    assert not data["done"].any()


def test_rollout_storage_is_time_major_behind_a_time_last_view():
    """Leaves are stored [T, *B] (one contiguous write per step) and handed out as a
    [*B, T] view; the random-action (numpy) loop matches a step-by-step replay."""
    env = CountEnv()
    env.set_seed(0)
    data = env.rollout(6, break_when_any_done=False)
    assert data.batch_size == (3, 6)
    obs = data["next", "observation"]
    assert obs.shape == (3, 6, 1) and obs.stride(1) > obs.stride(0)  # time is the outer stride
    assert data.reshape(-1).batch_size == (18,) and torch.equal(
        data.contiguous()["action"], data["action"]
    )
    count = torch.zeros(3, 1)
    for t in range(6):  # replay the stored actions: every stored entry is the step's value
        assert torch.equal(data["observation"][:, t], count)
        count = count + data["action"][:, t].unsqueeze(-1).float()
        done = count >= env.limit
        assert torch.equal(data["next", "observation"][:, t], count)
        assert torch.equal(data["next", "done"][:, t], done)
        count = torch.where(done, 0.0, count)


def test_break_when_any_done_stops_after_first_done():
    env = CountEnv()
    data = env.rollout(10, policy=lambda td: td.set("action", ONES.clone()))
    assert data.batch_size == (3, 3)
    assert data["next", "done"][:, -1, 0].tolist() == [True, False, False]


@pytest.mark.parametrize("report", ["terminated", "done", "truncated"])
def test_done_completed_from_partial_flags(report):
    env = CountEnv(report=report)
    data = env.rollout(
        3, policy=lambda td: td.set("action", ONES.clone()), break_when_any_done=False
    )
    nxt = data["next"]
    assert torch.equal(nxt["done"], nxt["terminated"] | nxt["truncated"])
    assert nxt["done"][0, 2, 0]
    if report == "truncated":
        assert not nxt["terminated"].any()
    else:  # "done" alone means terminated (TorchRL convention)
        assert nxt["terminated"][0, 2, 0] and not nxt["truncated"].any()


def test_step_then_partial_reset_through_reset_key():
    env = CountEnv()
    td = env.reset()
    for _ in range(3):
        td["action"] = ONES.clone()
        td = env.step(td)
        td = td["next"].exclude("reward").clone() if not td["next", "done"].any() else td
    assert td["next", "done"][:, 0].tolist() == [True, False, False]
    with pytest.raises(RuntimeError, match=r"sub-envs \[0\] are done"):
        env.step(td.set("action", ONES.clone()))
    root = td["next"].exclude("reward")
    root["_reset"] = td["next", "done"].clone()
    out = env.reset(root)
    assert out["observation"][:, 0].tolist() == [0, 3, 3]
    assert "_reset" not in out
    # a reset of a sub-env that is not done really resets it
    out["_reset"] = torch.tensor([False, True, False])
    out2 = env.reset(out)
    assert out2["observation"][:, 0].tolist() == [0, 0, 3]
    assert env.step(out2.set("action", ONES.clone()))["next", "observation"][:, 0].tolist() == [
        1,
        1,
        4,
    ]


def test_step_and_maybe_reset_returns_reset_root_and_keeps_policy_keys():
    env = CountEnv()
    td = env.reset()
    for _ in range(3):
        td["action"] = ONES.clone()
        td["next", "policy_state"] = torch.full((3, 2), 7.0)
        td, root = env.step_and_maybe_reset(td)
    assert td["next", "observation"][:, 0].tolist() == [3, 3, 3]
    assert root["observation"][:, 0].tolist() == [0, 3, 3]
    assert torch.equal(root["policy_state"], torch.full((3, 2), 7.0))
    assert not root["done"].any()


def test_rand_step_fake_tensordict_and_random_policy():
    env = CountEnv()
    fake = env.fake_tensordict()
    data = env.rollout(2, break_when_any_done=False)
    assert set(fake.keys(True, True)) == set(data.keys(True, True))
    td = env.rand_step()
    assert td["next", "observation"].shape == (3, 1)
    data = env.rollout(3, policy=RandomPolicy(env.action_spec), break_when_any_done=False)
    assert env.action_spec.is_in(data["action"][:, 0])


def test_rollout_records_policy_outputs_and_carries_next_state():
    env = CountEnv()

    def policy(td):
        h = td.get("h", torch.zeros(3, 2))
        td["action"] = ONES.clone()
        td["logp"] = torch.full((3,), -0.5)
        td["next", "h"] = h + 1
        return td

    data = env.rollout(3, policy=policy, break_when_any_done=False)
    assert data["logp"].shape == (3, 3)
    assert data["next", "h"][0, :, 0].tolist() == [1, 2, 3]
    assert data["h"][0, 1:, 0].tolist() == [1, 2]


def test_seed_hook_and_reproducible_random_actions():
    env = CountEnv()
    assert env.set_seed(3) == 6 and env.seed_seen == 3
    a = env.rollout(5, break_when_any_done=False)["action"]
    env.set_seed(3)
    b = env.rollout(5, break_when_any_done=False)["action"]
    assert torch.equal(a, b)


def test_bad_actions_raise_named_errors():
    env = CountEnv()
    td = env.reset()
    with pytest.raises(
        InvalidActionError, match=r"'action'.*dtype torch.int64.*received torch.float32"
    ):
        env.step(td.set("action", torch.ones(3)))
    with pytest.raises(InvalidActionError, match=r"'action'.*shape \(3,\).*received \(3, 1\)"):
        env.step(td.set("action", torch.ones(3, 1, dtype=torch.int64)))
    with pytest.raises(InvalidActionError, match=r"'action'.*shape \(3,\).*received \(2,\)"):
        env.fast_step(torch.ones(2, dtype=torch.int64))
    with pytest.raises(InvalidActionError, match=r"'action'.*out of range.*not in \[0, 2\)"):
        env.step(td.set("action", torch.full((3,), 2)))
    with pytest.raises(InvalidActionError, match="missing"):
        env.step(TensorDict(batch_size=(3,)))


def test_value_checks_stop_after_first_steps_but_dtype_checks_stay():
    env = CountEnv(limit=1000)
    env.reset()
    for _ in range(ACTION_CHECK_STEPS):
        env.fast_step(ONES.clone())
    env.fast_step(torch.full((3,), 1))  # values are no longer checked, valid anyway
    with pytest.raises(InvalidActionError):
        env.fast_step(torch.ones(3))


def test_step_before_reset_and_after_close():
    env = CountEnv()
    with pytest.raises(RuntimeError, match="reset"):
        env.step(TensorDict(action=ONES.clone(), batch_size=(3,)))
    with env:
        env.reset()
    assert env.is_closed
    env.close()  # idempotent
    with pytest.raises(EnvClosedError):
        env.reset()


def test_rollout_argument_errors():
    env = CountEnv()
    with pytest.raises(ValueError, match="max_steps"):
        env.rollout(0)
    with pytest.raises(RuntimeError, match="reset"):
        env.rollout(2, auto_reset=False)


def test_rollout_without_auto_reset_continues():
    env = CountEnv(limit=100)
    env.rollout(2, policy=lambda td: td.set("action", ONES.clone()))
    td = env.reset(TensorDict(_reset=torch.tensor([False, False, False]), batch_size=(3,)))
    data = env.rollout(
        2, policy=lambda td: td.set("action", ONES.clone()), auto_reset=False, tensordict=td
    )
    assert data["observation"][0, :, 0].tolist() == [2, 3]


def test_env_must_implement_a_pair():
    from rl_envs import EnvBase

    class Empty(EnvBase):
        pass

    with pytest.raises(TypeError, match="must implement"):
        Empty()


def test_step_on_a_done_unbatched_env_says_reset_without_indices():
    env = GymEnv("CartPole-v1", categorical_action_encoding=True)
    env.set_seed(0)
    td = env.reset()
    while True:
        td = env.step(td.set("action", torch.tensor(0)))
        if td["next", "done"].item():
            break
        td = td["next"].exclude("reward").clone()
    with pytest.raises(RuntimeError, match=r"GymEnv: the env is done; call reset\(\)"):
        env.step(td["next"].exclude("reward").clone().set("action", torch.tensor(0)))
    env.close()
