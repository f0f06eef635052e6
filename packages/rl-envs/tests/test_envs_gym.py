"""GymEnv / GymWrapper on real gymnasium envs: autoreset modes, seeding, spaces, errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

gym = pytest.importorskip("gymnasium")

from gymnasium.envs.classic_control.cartpole import CartPoleVectorEnv  # noqa: E402
from rl_envs import (  # noqa: E402
    Binary,
    Bounded,
    Categorical,
    Composite,
    GymEnv,
    GymWrapper,
    InvalidActionError,
    MultiCategorical,
    OneHot,
    Unbounded,
)

MODES = [
    gym.vector.AutoresetMode.SAME_STEP,
    gym.vector.AutoresetMode.NEXT_STEP,
    gym.vector.AutoresetMode.DISABLED,
]
EPISODE = 5  # TimeLimit: every episode is truncated after 5 steps


def _reference(seed: int, actions: np.ndarray) -> tuple[list, list]:
    """Replay one sub-env alone: its observations and the reset observations it draws."""
    if actions.ndim == 2:  # one-hot actions (the default encoding, as TorchRL's)
        actions = actions.argmax(-1)
    env = gym.make("CartPole-v1", max_episode_steps=EPISODE)
    root, _ = env.reset(seed=seed)
    roots, nexts = [], []
    for a in actions:
        roots.append(root)
        obs, _, term, trunc, _ = env.step(int(a))
        nexts.append(obs)
        root = env.reset()[0] if (term or trunc) else obs
    return roots, nexts


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_truncation_keeps_final_obs_in_every_autoreset_mode(mode):
    venv = gym.make_vec(
        "CartPole-v1", num_envs=3, vectorization_mode="sync",
        vector_kwargs={"autoreset_mode": mode}, max_episode_steps=EPISODE,
    )
    with GymWrapper(venv) as env:
        env.set_seed(10)
        data = env.rollout(12, break_when_any_done=False)
    assert data["next", "truncated"].sum() >= 3  # each sub-env got truncated at least once
    assert (data["next", "reward"] == 1).all()  # no reset step (reward 0) in the data
    for i in range(3):
        roots, nexts = _reference(10 + i, data["action"][i].numpy())
        np.testing.assert_allclose(data["observation"][i].numpy(), np.stack(roots), rtol=1e-6)
        np.testing.assert_allclose(
            data["next", "observation"][i].numpy(), np.stack(nexts), rtol=1e-6
        )


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_async_vector_env_keeps_final_obs(mode):
    venv = gym.make_vec(
        "CartPole-v1", num_envs=2, vectorization_mode="async",
        vector_kwargs={"autoreset_mode": mode, "context": "spawn"}, max_episode_steps=EPISODE,
    )
    with GymWrapper(venv) as env:
        env.set_seed(3)
        data = env.rollout(8, break_when_any_done=False)
    for i in range(2):
        roots, nexts = _reference(3 + i, data["action"][i].numpy())
        np.testing.assert_allclose(data["observation"][i].numpy(), np.stack(roots), rtol=1e-6)
        np.testing.assert_allclose(
            data["next", "observation"][i].numpy(), np.stack(nexts), rtol=1e-6
        )
    assert venv.closed


def test_numpy_vectorised_entry_point_semantics():
    env = GymEnv(
        "CartPole-v1",
        num_envs=64,
        vectorization_mode="vector_entry_point",
        max_episode_steps=EPISODE, categorical_action_encoding=True,
    )
    env.set_seed(0)
    data = env.rollout(12, break_when_any_done=False)
    done = data["next", "done"][..., 0]
    assert data["next", "truncated"][:, EPISODE - 1].all()
    assert (data["next", "reward"] == 1).all()  # the env's reset steps never reach the data
    cont = ~done[:, :-1]
    assert torch.equal(data["next", "observation"][:, :-1][cont], data["observation"][:, 1:][cont])
    after = data["observation"][:, 1:][done[:, :-1]]
    assert (after.abs() <= 0.05).all()  # reset observations
    env.close()


def test_next_step_env_without_partial_reset_is_refused():
    class NoMask(gym.vector.VectorEnv):
        metadata = {"autoreset_mode": gym.vector.AutoresetMode.NEXT_STEP}

        def __init__(self):
            self.num_envs = 2
            self.single_observation_space = gym.spaces.Box(-1, 1, (2,))
            self.single_action_space = gym.spaces.Discrete(2)
            self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, 2)
            self.action_space = gym.vector.utils.batch_space(self.single_action_space, 2)

    with pytest.raises(ValueError, match="cannot reset a subset"):
        GymWrapper(NoMask())


def test_seeding_is_reproducible():
    def run(seed):
        env = GymEnv("CartPole-v1", num_envs=4, categorical_action_encoding=True)
        env.set_seed(seed)
        data = env.rollout(30, break_when_any_done=False)
        env.close()
        return data

    a, b, c = run(1), run(1), run(2)
    assert torch.equal(a["observation"], b["observation"]) and torch.equal(a["action"], b["action"])
    assert torch.equal(a["next", "observation"], b["next", "observation"])
    assert not torch.equal(a["observation"], c["observation"])


@pytest.mark.parametrize("categorical", [True, False])
def test_fast_path_matches_public_step_and_maybe_reset(categorical):
    kw = {"num_envs": 4, "categorical_action_encoding": categorical}
    fast, public = GymEnv("CartPole-v1", **kw), GymEnv("CartPole-v1", **kw)
    fast.set_seed(5)
    public.set_seed(5)
    gen = torch.Generator().manual_seed(0)
    actions = [torch.randint(0, 2, (4,), generator=gen) for _ in range(40)]
    if not categorical:
        actions = [torch.nn.functional.one_hot(a, 2) for a in actions]
    root = fast.fast_reset().clone()
    td = public.reset()
    assert torch.equal(root["observation"], td["observation"])
    for a in actions:
        nxt, root = fast.fast_step(a)
        td["action"] = a
        td, next_root = public.step_and_maybe_reset(td)
        assert torch.equal(nxt["observation"], td["next", "observation"])
        assert torch.equal(nxt["done"], td["next", "done"]) and torch.equal(
            nxt["reward"], td["next", "reward"]
        )
        assert torch.equal(root["observation"], next_root["observation"])
        td = next_root


def test_specs_from_spaces():
    space = gym.spaces.Dict({
        "box": gym.spaces.Box(-1.0, 1.0, (3,), np.float64),
        "free": gym.spaces.Box(-np.inf, np.inf, (2,), np.float32),
        "disc": gym.spaces.Discrete(4),
        "multi": gym.spaces.MultiDiscrete([2, 5]),
        "bin": gym.spaces.MultiBinary(3),
    })
    from rl_envs._gym_specs import space_to_spec

    spec = space_to_spec(space, torch.Size([8]))
    assert isinstance(spec, Composite) and spec.shape == (8,)
    assert (
        isinstance(spec["box"], Bounded)
        and spec["box"].dtype == torch.float64
        and spec["box"].shape == (8, 3)
    )
    assert isinstance(spec["free"], Unbounded)
    assert (
        isinstance(spec["disc"], Categorical) and spec["disc"].n == 4 and spec["disc"].shape == (8,)
    )
    assert isinstance(spec["multi"], MultiCategorical) and spec["multi"].shape == (8, 2)
    assert isinstance(spec["bin"], Binary) and spec["bin"].dtype == torch.int8
    onehot = space_to_spec(
        gym.spaces.Discrete(4), torch.Size([8]), categorical_action_encoding=False
    )
    assert isinstance(onehot, OneHot) and onehot.shape == (8, 4)
    with pytest.raises(TypeError, match="unsupported gymnasium space"):
        space_to_spec(gym.spaces.Text(5), torch.Size([1]))


def test_box_actions_pendulum_and_bad_actions():
    env = GymEnv("Pendulum-v1", num_envs=2)
    assert isinstance(env.action_spec, Bounded) and env.action_spec.shape == (2, 1)
    data = env.rollout(5)
    assert data["action"].dtype == torch.float32 and data["next", "observation"].shape == (2, 5, 3)
    td = env.reset()
    with pytest.raises(InvalidActionError, match=r"'action'.*out of bounds.*5.0"):
        env.step(td.set("action", torch.full((2, 1), 5.0)))
    with pytest.raises(InvalidActionError, match=r"'action'.*float32.*received torch.float64"):
        env.step(td.set("action", torch.zeros(2, 1, dtype=torch.float64)))
    env.close()


def test_discrete_bad_actions_never_cast():
    env = GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True)
    td = env.reset()
    with pytest.raises(InvalidActionError, match=r"'action'.*torch.int64.*received torch.float32"):
        env.fast_step(torch.zeros(2))
    with pytest.raises(InvalidActionError, match=r"out of range.*not in \[0, 2\)"):
        env.step(td.set("action", torch.tensor([0, 2])))
    env.close()


def test_one_hot_actions_by_default_as_torchrl():
    env = GymEnv("CartPole-v1", num_envs=2)
    assert isinstance(env.action_spec, OneHot) and env.action_spec.shape == (2, 2)
    with GymWrapper(gym.make("CartPole-v1")) as single:
        assert isinstance(single.action_spec, OneHot) and single.action_spec.shape == (2,)
    data = env.rollout(4)
    assert data["action"].shape[-1] == 2 and (data["action"].sum(-1) == 1).all()
    env.close()


def test_frame_skip_sums_rewards_and_stops_at_episode_end():
    env = GymEnv("CartPole-v1", num_envs=2, frame_skip=3, max_episode_steps=7,
                 categorical_action_encoding=True)
    data = env.rollout(6, break_when_any_done=False)
    rewards = data["next", "reward"][0, :, 0].tolist()
    assert rewards[:3] == [3.0, 3.0, 1.0]  # 3 + 3 + 1 = 7 steps: truncated inside the third block
    assert data["next", "truncated"][0, 2, 0]
    env.close()
    with pytest.raises(ValueError, match="frame_skip"):
        GymEnv("CartPole-v1", frame_skip=0, categorical_action_encoding=True)


def test_info_keys_exported():
    from gymnasium.wrappers import TimeAwareObservation  # noqa: F401

    class InfoEnv(gym.Wrapper):
        def reset(self, **kw):
            obs, info = self.env.reset(**kw)
            self.t = 0
            return obs, {**info, "t": np.float32(self.t)}

        def step(self, action):
            obs, r, te, tr, info = self.env.step(action)
            self.t += 1
            return obs, r, te, tr, {**info, "t": np.float32(self.t)}

    venv = gym.vector.SyncVectorEnv(
        [lambda: InfoEnv(gym.make("CartPole-v1", max_episode_steps=4)) for _ in range(2)],
        autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
    )
    env = GymWrapper(venv, info_keys=["t"])
    assert env.observation_spec["t"].shape == (2,)
    data = env.rollout(6, break_when_any_done=False)
    assert data["next", "t"][0].tolist() == [
        1,
        2,
        3,
        4,
        1,
        2,
    ]  # the final step's info, not the reset's
    assert data["t"][0].tolist() == [0, 1, 2, 3, 0, 1]
    with pytest.raises(KeyError, match="not in the reset info"):
        GymWrapper(gym.make_vec("CartPole-v1", num_envs=1), info_keys=["nope"],
                   categorical_action_encoding=True)
    env.close()


def test_single_env_has_torchrls_empty_batch():
    env = GymWrapper(gym.make("CartPole-v1"), categorical_action_encoding=True)
    assert env.batch_size == ()
    assert env.observation_spec["observation"].shape == (4,)
    assert env.rollout(3, break_when_any_done=False).batch_size == (3,)
    env.close()
    assert GymEnv("CartPole-v1", categorical_action_encoding=True).batch_size == ()
    assert GymEnv("CartPole-v1", num_envs=1, categorical_action_encoding=True).batch_size == (1,)
    with pytest.raises(ValueError, match="unbatched=True"):
        GymWrapper(gym.make_vec("CartPole-v1", num_envs=2), unbatched=True,
                   categorical_action_encoding=True)


@pytest.mark.parametrize("name", ["CartPole-v1", "Pendulum-v1"])
def test_unbatched_env_steps_as_its_one_env_vector_twin(name):
    """A ``[]`` env and a ``[1]`` env, same seed and actions: the same data, one dim less;
    episode ends (final observation, reset root) and ``_reset`` included."""
    single, batched = GymEnv(name, max_episode_steps=20), GymEnv(name, 1, max_episode_steps=20)
    single.set_seed(3), batched.set_seed(3)
    a, b = single.reset(), batched.reset()
    assert torch.equal(a["observation"], b["observation"][0])
    for t in range(45):
        b = batched.rand_action(b)
        a.set("action", b["action"][0])
        (a, ra), (b, rb) = single.step_and_maybe_reset(a), batched.step_and_maybe_reset(b)
        for key in ("observation", "reward", "done", "terminated", "truncated"):
            assert torch.equal(a["next", key], b["next", key][0]), (t, key)
        a, b = ra, rb
        assert torch.equal(a["observation"], b["observation"][0])
    a = single.reset(a.set("_reset", torch.tensor([True])))
    assert a.batch_size == () and not a["done"].any()
    single.close(), batched.close()


def test_argument_errors():
    with pytest.raises(ValueError, match="num_envs"):
        GymEnv("CartPole-v1", num_envs=0, categorical_action_encoding=True)
    with pytest.raises(ValueError, match="vectorization_mode"):
        GymEnv("CartPole-v1", vectorization_mode="threads", categorical_action_encoding=True)
    with pytest.raises(TypeError, match="gymnasium Env or VectorEnv"):
        GymWrapper(object())
    with pytest.raises(ValueError, match="device"):
        GymEnv("CartPole-v1", device="meta", categorical_action_encoding=True)


# -- vectorization_mode=None: gymnasium's own choice -----------------------------------------
class _NoPartialResetCartPole(CartPoleVectorEnv):
    """A NEXT_STEP vector env with no partial reset (the CartPole adapter is keyed by name)."""


_NO_PARTIAL = "rl_envs_test/NoPartialCartPole-v0"
if _NO_PARTIAL not in gym.registry:
    gym.register(
        _NO_PARTIAL,
        entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv",
        vector_entry_point=_NoPartialResetCartPole,
        max_episode_steps=EPISODE,
    )


@pytest.mark.parametrize(
    "name, kwargs, expected",
    [
        ("CartPole-v1", {}, "vector_entry_point"),  # registers a vector entry point
        ("Acrobot-v1", {}, "sync"),  # registers none
        ("Pendulum-v1", {}, "sync"),
        ("CartPole-v1", {"vector_kwargs": {"copy": True}}, "sync"),  # sync/async arguments
        ("CartPole-v1", {"vectorization_mode": "sync"}, "sync"),  # explicit choices stay
        ("CartPole-v1", {"vectorization_mode": "vector_entry_point"}, "vector_entry_point"),
    ],
)
def test_default_vectorization_follows_gymnasium(name, kwargs, expected):
    env = GymEnv(name, num_envs=2, **kwargs)
    assert env.vectorization_mode == expected
    assert f"vectorization_mode={expected!r}" in repr(env)
    data = env.rollout(3, break_when_any_done=False)
    assert data.batch_size == (2, 3)
    env.close()


def test_explicit_vector_entry_point_without_one_names_the_env():
    with pytest.raises(ValueError, match="'Acrobot-v1' registers no vector entry point"):
        GymEnv("Acrobot-v1", num_envs=4, vectorization_mode="vector_entry_point",
               categorical_action_encoding=True)


def test_default_falls_back_to_sync_when_the_vector_env_loses_final_obs(caplog):
    with caplog.at_level("INFO", logger="rl_envs._gym_make"):
        env = GymEnv(_NO_PARTIAL, num_envs=3, categorical_action_encoding=True)
    assert env.vectorization_mode == "sync"
    assert "cannot report final observations" in caplog.text
    env.set_seed(10)
    data = env.rollout(12, break_when_any_done=False)
    env.close()
    for i in range(3):  # truncation-correct: the same data as CartPole's reference
        _, nexts = _reference(10 + i, data["action"][i].numpy())
        nobs = data["next", "observation"][i].numpy()
        np.testing.assert_allclose(nobs, np.stack(nexts), rtol=1e-6)
    with pytest.raises(ValueError, match="cannot reset a subset"):
        GymEnv(_NO_PARTIAL, num_envs=3, vectorization_mode="vector_entry_point",
               categorical_action_encoding=True)
