"""A ``Discrete`` observation space as TorchRL reads it (issue 38): the env's
``categorical_action_encoding`` flag applies to observations too, one-hot (``OneHot``, int64,
``n`` along the last dim) by default, integers (``Categorical``) with ``True``; on real
gymnasium envs (FrozenLake, Taxi), over one simulator (``[]``) and a vector env (``[N]``).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from rl_envs import Categorical, GymEnv, GymWrapper, OneHot, reset_where
from rl_envs._gym_specs import obs_encoder, space_to_spec

ENVS = pytest.mark.parametrize(
    "name, n_obs, n_act", [("FrozenLake-v1", 16, 4), ("Taxi-v4", 500, 6)]
)
BATCHES = pytest.mark.parametrize("num_envs", [None, 3], ids=["[]", "[3]"])


def _actions(steps: int, batch: tuple, n_act: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(n_act, (steps, *batch), generator=gen)


def _run(name: str, num_envs: int | None, categorical: bool, idx: torch.Tensor) -> dict:
    """Step ``name`` with the integer actions ``idx`` (one-hot encoded if the spec is)."""
    env = GymEnv(name, num_envs=num_envs, categorical_action_encoding=categorical)
    env.set_seed(7)
    td = env.reset()
    obs, nxt, done = [td["observation"].clone()], [], []
    for a in idx:
        act = a if categorical else torch.nn.functional.one_hot(a, env.action_spec.shape[-1])
        td["action"] = act
        td, root = env.step_and_maybe_reset(td)
        nxt.append(td["next", "observation"].clone())
        done.append(td["next", "done"].clone())
        td = root
        obs.append(td["observation"].clone())
    env.close()
    return {"spec": env.observation_spec["observation"], "obs": torch.stack(obs),
            "next": torch.stack(nxt), "done": torch.stack(done)}


@ENVS
@BATCHES
def test_discrete_observation_both_encodings(name, n_obs, n_act, num_envs):
    batch = () if num_envs is None else (num_envs,)
    idx = _actions(60, batch, n_act, seed=3)
    hot, ints = _run(name, num_envs, False, idx), _run(name, num_envs, True, idx)
    assert isinstance(hot["spec"], OneHot) and hot["spec"].shape == (*batch, n_obs)
    assert hot["spec"].dtype == torch.int64
    assert isinstance(ints["spec"], Categorical) and ints["spec"].shape == batch
    assert hot["obs"].shape == (61, *batch, n_obs) and ints["obs"].shape == (61, *batch)
    for key in ("obs", "next"):
        assert hot[key].dtype == torch.int64 and (hot[key].sum(-1) == 1).all()
        # the same trajectory: the one-hot values encode the integers, row for row
        assert torch.equal(hot[key].argmax(-1), ints[key])
    assert torch.equal(hot["done"], ints["done"])
    assert hot["spec"].is_in(hot["obs"][0]) and ints["spec"].is_in(ints["obs"][0])


def test_final_observation_and_partial_reset_are_encoded():
    """A finished sub-env's real last observation (gymnasium's ``final_obs``) and the
    observations of a masked reset are one-hot too."""
    env = GymEnv("FrozenLake-v1", num_envs=4)
    env.set_seed(0)
    data = env.rollout(80, break_when_any_done=False)
    done = data["next", "done"].squeeze(-1)
    assert done.any(), "no episode ended: the test saw no final observation"
    final = data["next", "observation"][done]
    assert (final.sum(-1) == 1).all()
    # FrozenLake ends on a hole or the goal, never on the start cell (0)
    assert (final.argmax(-1) != 0).all()
    root = reset_where(env, torch.tensor([True, False, True, False]))
    assert root["observation"].shape == (4, 16) and (root["observation"].sum(-1) == 1).all()
    assert (root["observation"][[0, 2]].argmax(-1) == 0).all()
    env.close()


def test_wrapper_over_one_simulator():
    env = GymWrapper(gym.make("Taxi-v4"))
    assert env.batch_size == () and env.observation_spec["observation"].shape == (500,)
    data = env.rollout(5)
    assert data["observation"].shape == (5, 500) and (data["observation"].sum(-1) == 1).all()
    env.close()


def test_obs_encoder_dict_space_leaves_input_alone():
    space = gym.spaces.Dict({
        "cell": gym.spaces.Discrete(3),
        "inner": gym.spaces.Dict({"k": gym.spaces.Discrete(2)}),
        "pos": gym.spaces.Box(-1.0, 1.0, (2,)),
    })
    spec = space_to_spec(space, torch.Size([2]), categorical_action_encoding=False)
    assert isinstance(spec["cell"], OneHot) and spec["cell"].shape == (2, 3)
    assert isinstance(spec["inner", "k"], OneHot) and isinstance(
        space_to_spec(space, torch.Size([2]))["cell"], Categorical
    )
    enc = obs_encoder(space, categorical_action_encoding=False)
    obs = {"cell": np.array([2, 0]), "inner": {"k": np.array([1, 1])}, "pos": np.zeros((2, 2))}
    out = enc(obs)
    assert out["cell"].tolist() == [[0, 0, 1], [1, 0, 0]]
    assert out["inner"]["k"].tolist() == [[0, 1], [0, 1]] and out["pos"] is obs["pos"]
    assert obs["cell"].tolist() == [2, 0]  # the simulator's dict is not changed
    assert obs_encoder(space, categorical_action_encoding=True) is None
    assert obs_encoder(gym.spaces.Box(0.0, 1.0, (2,)), categorical_action_encoding=False) is None
