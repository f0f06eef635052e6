"""The one carry rule (``rl_envs.carry_state``) in ``EnvBase.rollout``: a policy's
``("next", k)`` becomes ``k`` of the next step, and a finished sub-env starts again from
the primer's reset value."""

from __future__ import annotations

import pytest
import torch
from rl_envs import GymEnv, TensorDictPrimer, TransformedEnv, Unbounded, carry_pairs, carry_state
from tensordict import TensorDict


def _counting_policy(td: TensorDict) -> TensorDict:
    """``("next", "h") = h + 1``; a random CartPole action."""
    td.set(("next", "h"), td.get("h") + 1)
    td.set("action", torch.randint(0, 2, td.batch_size))
    return td


def test_rollout_carries_next_state_and_resets_it_on_done() -> None:
    env = TransformedEnv(
        GymEnv("CartPole-v1", num_envs=3,
               categorical_action_encoding=True), TensorDictPrimer({"h": Unbounded((1,))})
    )
    env.set_seed(0)
    torch.manual_seed(0)
    data = env.rollout(60, _counting_policy, break_when_any_done=False)
    env.close()
    h, nh = data["h"][..., 0], data["next", "h"][..., 0]
    done = data["next", "done"][..., 0]
    assert done.any(), "CartPole with random actions finishes within 60 steps"
    assert torch.equal(nh, h + 1)  # the policy's value is stored under "next"
    # carried where the sub-env goes on, the primer's 0 where it was reset
    expected = torch.where(done[:, :-1], torch.zeros_like(nh[:, :-1]), nh[:, :-1])
    assert torch.equal(h[:, 1:], expected)
    assert torch.equal(h[:, 0], torch.zeros(3))


def test_carry_state_copies_in_place_and_leaves_the_next_entry() -> None:
    h = torch.zeros(2, 3)
    td = TensorDict({"h": h, "next": {"h": torch.full((2, 3), 2.0)}}, [2])
    carry_state(td, carry_pairs(["h"]))
    assert td.get("h") is h and torch.equal(h, torch.full((2, 3), 2.0))
    assert torch.equal(td["next", "h"], torch.full((2, 3), 2.0))


def test_rollout_does_not_write_into_the_given_tensordict() -> None:
    env = TransformedEnv(
        GymEnv("CartPole-v1", num_envs=2,
               categorical_action_encoding=True), TensorDictPrimer({"h": Unbounded((1,))})
    )

    def policy(td: TensorDict) -> TensorDict:
        td.set(("next", "g"), td.get("g") + 1)
        td.set("action", torch.zeros(td.batch_size, dtype=torch.int64))
        return td

    given = env.reset()
    given.set("g", torch.zeros(2, 1))
    data = env.rollout(3, policy, auto_reset=False, tensordict=given,
                       break_when_any_done=False)
    env.close()
    assert torch.equal(given["g"], torch.zeros(2, 1))
    assert data["g"][:, 0, 0].tolist() == [0.0, 0.0]


def _linear_policy(device: str) -> torch.nn.Module:
    from tensordict.nn import TensorDictModule

    torch.manual_seed(3)
    return TensorDictModule(torch.nn.Linear(3, 1), ["observation"], ["action"]).to(device)


def test_rollout_auto_cast_to_device_is_a_no_op_on_one_device_and_checks_its_type() -> None:
    data = {}
    for cast in (False, True):
        env = GymEnv("Pendulum-v1")
        env.set_seed(0)
        data[cast] = env.rollout(5, _linear_policy("cpu"), auto_cast_to_device=cast)
        env.close()
    assert torch.equal(data[False]["action"], data[True]["action"])
    assert torch.equal(data[False]["next", "observation"], data[True]["next", "observation"])
    with GymEnv("Pendulum-v1") as env, pytest.raises(ValueError, match="auto_cast_to_device"):
        env.rollout(2, _linear_policy("cpu"), auto_cast_to_device="yes")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="the policy's device must differ from the env's: needs a CUDA device")
def test_rollout_auto_cast_to_device_runs_a_cuda_policy_on_a_cpu_env() -> None:
    with GymEnv("Pendulum-v1") as env:
        data = env.rollout(5, _linear_policy("cuda"), auto_cast_to_device=True)
    assert data["action"].device.type == "cpu" and data["action"].shape == (5, 1)
