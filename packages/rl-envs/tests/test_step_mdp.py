"""step_mdp and EnvCreator (TorchRL's helpers)."""

from __future__ import annotations

import pickle

import pytest
import torch
from rl_envs import EnvCreator, GymEnv, ParallelEnv, step_mdp


def test_step_mdp_moves_next_to_the_root_and_drops_reward_and_action() -> None:
    env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
    td = env.step(env.rand_action(env.reset()))
    out = step_mdp(td)
    assert torch.equal(out["observation"], td["next", "observation"])
    assert "reward" not in out and "action" not in out and "next" not in out
    assert "done" in out and "next" in td  # the input is untouched
    kept = step_mdp(td, exclude_reward=False, exclude_done=True, exclude_action=False)
    assert "reward" in kept and "done" not in kept and "action" in kept
    env.close()


def test_step_mdp_writes_into_next_tensordict_and_names_a_missing_next() -> None:
    env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
    td = env.step(env.rand_action(env.reset()))
    target = env.reset()
    assert step_mdp(td, next_tensordict=target) is target
    assert torch.equal(target["observation"], td["next", "observation"])
    with pytest.raises(KeyError, match="'next'"):
        step_mdp(td.exclude("next"))
    env.close()


def make_cartpole(num_envs: int = 1) -> GymEnv:
    return GymEnv("CartPole-v1", num_envs=num_envs, categorical_action_encoding=True)


def test_env_creator_builds_with_its_kwargs_and_crosses_a_process() -> None:
    creator = EnvCreator(make_cartpole, {"num_envs": 3})
    env = creator()
    assert env.batch_size == (3,)
    env.close()
    assert pickle.loads(pickle.dumps(creator)).create_env_kwargs == {"num_envs": 3}
    penv = ParallelEnv(2, EnvCreator(lambda: GymEnv("CartPole-v1", num_envs=2,
                                                    categorical_action_encoding=True)))
    try:
        assert penv.rollout(3, break_when_any_done=False).shape[-1] == 3
    finally:
        penv.close()


def test_env_creator_rejects_what_it_cannot_call() -> None:
    with pytest.raises(TypeError, match="create_env_fn"):
        EnvCreator("CartPole-v1")
    with pytest.raises(TypeError, match="create_env_kwargs"):
        EnvCreator(make_cartpole, [("num_envs", 2)])


def test_torchrl_module_paths_reexport_every_transform() -> None:
    import rl_envs
    import rl_envs.libs.gym
    import rl_envs.transforms
    import rl_envs.utils

    transforms = {n for n in rl_envs.__all__
                  if isinstance(getattr(rl_envs, n), type)
                  and issubclass(getattr(rl_envs, n), (rl_envs.Transform, rl_envs.TransformedEnv))}
    assert transforms <= set(rl_envs.transforms.__all__)
    for module in (rl_envs.transforms, rl_envs.utils, rl_envs.libs.gym):
        assert module.__all__ == sorted(module.__all__)
        for name in module.__all__:
            assert getattr(module, name) is getattr(rl_envs, name)
