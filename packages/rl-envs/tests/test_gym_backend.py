"""TorchRL's ``set_gym_backend`` / ``gym_backend`` (its sota scripts call them): gymnasium
is accepted in each of TorchRL's three forms, any other backend is refused by name."""

from __future__ import annotations

import gymnasium
import pytest
import rl_envs.libs.gym
from rl_envs import GymEnv, gym_backend, set_gym_backend


def test_gymnasium_as_context_decorator_and_set() -> None:
    with set_gym_backend("gymnasium") as chosen:
        env = GymEnv("CartPole-v1", categorical_action_encoding=True)
        assert gym_backend() is gymnasium and chosen.backend == "gymnasium"
    assert env.rollout(3).batch_size == (3,)
    env.close()

    @set_gym_backend(gymnasium)
    def spaces_module():
        return gym_backend("spaces")

    assert spaces_module() is gymnasium.spaces
    assert set_gym_backend("gymnasium").set() is None
    assert rl_envs.libs.gym.set_gym_backend is set_gym_backend


@pytest.mark.parametrize("backend", ["gym", "dm_control"])
def test_another_backend_is_refused_by_name(backend: str) -> None:
    with pytest.raises(ValueError, match=f"backend must be 'gymnasium'.*received '{backend}'"):
        set_gym_backend(backend)
