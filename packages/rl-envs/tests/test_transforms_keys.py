"""RenameTransform, ExcludeTransform, SelectTransform and CatTensors: keys, values, specs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_envs import (
    Bounded,
    CatFrames,
    CatTensors,
    Compose,
    ExcludeTransform,
    GymEnv,
    InitTracker,
    RenameTransform,
    SelectTransform,
    SpecError,
    StepCounter,
    Transform,
    TransformedEnv,
    Unbounded,
    check_env_specs,
)

from ._pixels import PixelEnv, ones_policy


def rollout(env, steps=6):
    return env.rollout(steps, policy=ones_policy(env.batch_size[0]), break_when_any_done=False)


def test_rename_moves_the_same_values():
    env = TransformedEnv(
        PixelEnv(3, (2, 2, 1), limit=2),
        RenameTransform(["observation", "frame_id"], ["pixels", "fid"]),
    )
    assert set(env.observation_spec.keys()) == {"pixels", "fid"}
    data = rollout(env)
    base = rollout(PixelEnv(3, (2, 2, 1), limit=2))
    for new, old in (("pixels", "observation"), ("fid", "frame_id")):
        assert torch.equal(data[new], base[old]) and torch.equal(
            data["next", new], base["next", old]
        )
    assert "observation" not in data and "observation" not in data["next"]
    check_env_specs(env, steps=5)
    copy = TransformedEnv(
        PixelEnv(3, (2, 2, 1)), RenameTransform("frame_id", "fid", create_copy=True)
    )
    data = rollout(copy)
    assert torch.equal(data["fid"], data["frame_id"])
    check_env_specs(copy, steps=4)


def test_rename_swap_and_errors():
    env = TransformedEnv(
        PixelEnv(2, (2, 2, 1)),
        RenameTransform(["observation", "frame_id"], ["frame_id", "observation"]),
    )
    assert (
        env.observation_spec["observation"].shape == (2, 1)
        and env.observation_spec["frame_id"].dtype == torch.uint8
    )
    check_env_specs(env, steps=3)
    with pytest.raises(
        SpecError,
        match=r"RenameTransform: 'pixels' is not an observation key of the env; "
        r"observation keys: \['observation', 'frame_id'\]",
    ):
        TransformedEnv(PixelEnv(2, (2, 2, 1)), RenameTransform(["pixels"], ["x"]))
    with pytest.raises(SpecError, match="out_key 'frame_id' is already an observation key"):
        TransformedEnv(PixelEnv(2, (2, 2, 1)), RenameTransform(["observation"], ["frame_id"]))
    with pytest.raises(ValueError, match="same length"):
        RenameTransform(["a", "b"], ["c"])


def test_exclude_and_select():
    env = TransformedEnv(
        GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True),
        Compose(StepCounter(5), InitTracker(), ExcludeTransform("observation", "is_init")),
    )
    assert env.observation_spec.keys() == ["step_count"]
    data = env.rollout(6, break_when_any_done=False)
    assert set(data.keys()) == {"step_count", "action", "done", "terminated", "truncated", "next"}
    assert data["next", "step_count"][0, :, 0].tolist() == [1, 2, 3, 4, 5, 1]  # still counts
    check_env_specs(env, steps=6)
    env.close()
    env = TransformedEnv(
        GymEnv("CartPole-v1", num_envs=2, categorical_action_encoding=True),
        Compose(StepCounter(), InitTracker(), SelectTransform("is_init")),
    )
    assert env.observation_spec.keys() == ["is_init"]
    data = env.rollout(3)
    assert set(data["next"].keys()) == {"is_init", "reward", "done", "terminated", "truncated"}
    check_env_specs(env, steps=4)
    env.close()
    with pytest.raises(SpecError, match="ExcludeTransform: 'pixels' is not an observation key"):
        TransformedEnv(PixelEnv(2, (2, 2, 1)), ExcludeTransform("pixels"))
    with pytest.raises(SpecError, match="SelectTransform: 'pixels' is not an observation key"):
        TransformedEnv(PixelEnv(2, (2, 2, 1)), SelectTransform("pixels"))


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(1, 4),
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    sort=st.booleans(),
    limit=st.integers(1, 3),
)
def test_cat_tensors_matches_numpy(n, sizes, sort, limit):
    names = [f"k{i}" for i in range(len(sizes))][::-1]
    env = TransformedEnv(PixelEnv(n, (sum(sizes),), limit=limit, dtype=torch.float32))
    cuts = np.cumsum([0, *sizes])

    # split the observation into keys, then concatenate them back (in key order when sorted)
    class Split(Transform):
        def transform_observation_spec(self, spec):
            for name, a, b in zip(names, cuts[:-1], cuts[1:], strict=True):
                spec[name] = Bounded(0.0, 1.0, (n, int(b - a)))
            return spec

        def bind(self, root, next):
            out = []
            for td in (root, next):
                td = td.copy()
                obs = td.get("observation")
                for name, a, b in zip(names, cuts[:-1], cuts[1:], strict=True):
                    td.set(name, obs[..., a:b])
                out.append(td)
            return tuple(out)

    env.append_transform(Split())
    env.append_transform(CatTensors(names, "vec", sort=sort, del_keys=True))
    order = sorted(range(len(names)), key=lambda i: names[i]) if sort else range(len(names))
    data = rollout(env)
    for where in ((), ("next",)):
        obs = data[(*where, "observation")].numpy()
        ref = np.concatenate([obs[..., cuts[i] : cuts[i + 1]] for i in order], -1)
        np.testing.assert_array_equal(data[(*where, "vec")].numpy(), ref)
    assert not set(names) & set(data.keys())
    assert env.observation_spec["vec"] == Bounded(0.0, 1.0, (n, sum(sizes)))
    check_env_specs(env, steps=4)


def test_cat_tensors_mixed_dtypes_unsqueeze_and_errors():
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                                categorical_action_encoding=True), StepCounter())
    env.append_transform(
        CatTensors(["observation", "step_count"], "vec", del_keys=False, sort=False)
    )
    spec = env.observation_spec["vec"]
    assert isinstance(spec, Unbounded) and spec.shape == (2, 5) and spec.dtype == torch.float32
    data = env.rollout(4, break_when_any_done=False)
    ref = torch.cat([data["next", "observation"], data["next", "step_count"].float()], -1)
    assert torch.equal(data["next", "vec"], ref) and "observation" in data
    check_env_specs(env, steps=4)
    env.close()
    with pytest.raises(
        SpecError, match=r"CatTensors: 'observation' has shape \(2, 2, 2, 1\); expected \(2, 1\)"
    ):
        TransformedEnv(PixelEnv(2, (2, 2, 1)), CatTensors(["frame_id", "observation"], sort=False))
    with pytest.raises(SpecError, match="CatTensors: 'x' is not an observation key"):
        TransformedEnv(PixelEnv(2, (2, 2, 1)), CatTensors(["x"]))
    with pytest.raises(ValueError, match="at least one key"):
        CatTensors([])


def test_key_transforms_compose_with_frames():
    t = Compose(
        RenameTransform(["frame_id"], ["fid"]),
        CatFrames(2, -1, ["fid"]),
        ExcludeTransform("observation"),
    )
    env = TransformedEnv(PixelEnv(2, (2, 2, 1), limit=2), t)
    assert env.observation_spec.keys() == ["fid"] and env.observation_spec["fid"].shape == (2, 2)
    data = rollout(env, 4)
    assert data["fid"][0, 0].tolist() == [1.0, 1.0] and data["next", "fid"][0, 0].tolist() == [
        1.0,
        2.0,
    ]
    check_env_specs(env, steps=4)
