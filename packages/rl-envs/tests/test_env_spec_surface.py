"""TorchRL's spec surface on EnvBase and TransformedEnv, TorchRL's subclassing contract
(an unbatched env with state keys), and an action that requires grad."""

from __future__ import annotations

import torch
from rl_envs import (
    Bounded,
    Composite,
    EnvBase,
    GymEnv,
    StepCounter,
    TransformedEnv,
    Unbounded,
    check_env_specs,
)
from tensordict import TensorDict


def test_input_and_output_specs_assemble_the_env_specs() -> None:
    env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), StepCounter(5))
    assert env.input_spec["full_action_spec", "action"] == env.action_spec
    assert env.output_spec["full_observation_spec"] == env.observation_spec
    assert env.output_spec["full_reward_spec"] == env.full_reward_spec
    assert env.output_spec["full_done_spec"] == env.full_done_spec
    assert env.specs["input_spec", "full_action_spec"] == env.full_action_spec
    assert env.full_observation_spec is env.observation_spec
    assert env.full_state_spec is env.state_spec
    assert env.observation_keys == ["observation", "step_count"]
    assert env.reward_keys == ["reward"] and env.done_key == "done"
    assert env.input_spec.shape == env.batch_size == (2,)
    env.close()


def test_unbatched_specs_drop_the_batch_dims() -> None:
    # TorchRL's PPO tutorial reads env.action_spec_unbatched.space.low for TanhNormal
    for env in (TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), StepCounter(5)),
                GymEnv("Pendulum-v1")):
        action = env.action_spec_unbatched
        assert isinstance(action, Bounded) and action.shape == (1,)
        assert action.space.low.tolist() == [-2.0] and action.space.high.tolist() == [2.0]
        assert env.full_action_spec_unbatched.shape == ()
        assert env.full_action_spec_unbatched["action"] == action
        obs = env.observation_spec_unbatched
        assert obs.shape == () and obs["observation"].shape == (3,)
        assert env.full_reward_spec_unbatched["reward"].shape == (1,)
        assert env.full_done_spec_unbatched["done"].shape == (1,)
        assert env.action_spec.shape == (*env.batch_size, 1)  # the env's own spec unchanged
        env.close()


class _Spinner(EnvBase):
    """TorchRL's custom-env contract: batch [], state keys in the root, specs set in
    ``__init__``, ``_reset`` / ``_step`` / ``_set_seed``."""

    def __init__(self) -> None:
        super().__init__(device="cpu", batch_size=[])
        self.observation_spec = Composite(
            angle=Bounded(-3.5, 3.5, shape=()), speed=Unbounded(shape=()), shape=())
        self.state_spec = self.observation_spec.clone()
        self.action_spec = Bounded(-1.0, 1.0, shape=(1,))
        self.reward_spec = Unbounded(shape=(1,))

    def _reset(self, tensordict):
        angle = torch.rand((), generator=self.rng) * 2 - 1
        return TensorDict(angle=angle, speed=torch.zeros(()), batch_size=[])

    def _step(self, tensordict):
        speed = tensordict["speed"] + tensordict["action"].squeeze(-1)
        angle = (tensordict["angle"] + 0.1 * speed).clamp(-3.0, 3.0)
        reward = -(angle**2).view(1)
        return TensorDict(angle=angle, speed=speed, reward=reward,
                          done=torch.zeros(1, dtype=torch.bool), batch_size=[])

    def _set_seed(self, seed):
        self.rng = torch.Generator().manual_seed(seed)


def test_torchrl_subclassing_contract_with_state_keys_and_no_batch() -> None:
    env = _Spinner()
    env.set_seed(0)
    check_env_specs(env)
    data = env.rollout(6)
    assert data.batch_size == (6,)
    speed = torch.cumsum(data["action"].squeeze(-1), 0)
    torch.testing.assert_close(data["next", "speed"], speed)  # the state went round
    assert env.state_keys == ["angle", "speed"]
    assert env.input_spec["full_state_spec"] == env.state_spec


def test_gym_env_step_accepts_an_action_that_requires_grad() -> None:
    env = GymEnv("Pendulum-v1", num_envs=2)
    td = env.reset()
    for _ in range(12):  # past the first steps, whose values are checked on another path
        td["action"] = torch.full((2, 1), 0.5, requires_grad=True)
        out = env.step(td)
        assert out["next", "reward"].shape == (2, 1)
        assert td["action"].requires_grad  # the caller's tensor is left as it was
    policy = torch.nn.Linear(3, 1)  # a policy run without no_grad, as TorchRL's tutorials do
    data = env.rollout(12, lambda t: t.set("action", policy(t["observation"])))
    assert data.shape == (2, 12)
    env.close()


def test_a_spec_set_without_a_device_moves_to_the_env_device() -> None:
    """As TorchRL's setters do: a spec written with no device (or another one) lives on the
    env's device, and so do the buffers built from it (the collector's first policy input);
    a spec already there is kept as the same object. ``"meta"`` stands for the CPU spec of
    a CUDA env on a machine without one."""
    from rl_envs import Categorical

    class Walk(EnvBase):
        def __init__(self) -> None:
            super().__init__(batch_size=(2,), device="cpu")
            self.observation_spec = Composite(
                observation=Unbounded((2, 3), device="meta"), shape=(2,))
            self.action_spec = Categorical(2, (2,), device="meta")
            self.reward_spec = Unbounded((2, 1), device="meta")

        def _reset(self, td):
            return TensorDict(observation=torch.zeros(2, 3), batch_size=[2])

        def _step(self, td):
            raise NotImplementedError

        def _set_seed(self, seed):
            pass

    env = Walk()
    cpu = torch.device("cpu")
    assert env.observation_spec["observation"].device == cpu
    assert env.action_spec.device == cpu and env.full_reward_spec["reward"].device == cpu
    assert all(v.device == cpu for v in env.buffers()[0].values(True, True))
    kept = env.observation_spec
    env.observation_spec = kept
    assert env.observation_spec is kept
