"""CatFrames against a numpy reference, across auto-resets, partial resets and truncation."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_envs import (
    CatFrames,
    Compose,
    GrayScale,
    GymEnv,
    Resize,
    SerialEnv,
    SpecError,
    StepCounter,
    ToTensorImage,
    TransformedEnv,
    check_env_specs,
)

from ._image_refs import exact_bilinear, exact_luma
from ._pixels import PixelEnv, ones_policy

OBS = ["observation"]  # PixelEnv's key; the image transforms default to "pixels"


def _fill(first: np.ndarray, n: int, axis: int, padding: str, value: float) -> list[np.ndarray]:
    if padding == "same":
        return [first] * n
    return [np.full_like(first, value)] * (n - 1) + [first]


def ref_catframes(data, key, n, dim, padding="same", value=0.0):
    """Per sub-env, per step: the root and next stacks, built one frame at a time."""
    root, nxt = data[key].numpy(), data["next", key].numpy()
    done = data["next", "done"][..., 0].numpy()
    batch, steps = done.shape[:-1], done.shape[-1]
    out_r = np.empty_like(np.concatenate([root] * n, axis=dim))
    out_n = np.empty_like(out_r)
    for b in np.ndindex(*batch):
        frames = _fill(root[b][0], n, dim, padding, value)
        for t in range(steps):
            out_r[b][t] = np.concatenate(frames, axis=dim)
            frames = frames[1:] + [nxt[b][t]]
            out_n[b][t] = np.concatenate(frames, axis=dim)
            if done[b][t] and t + 1 < steps:  # auto-reset: the next root starts a new stack
                frames = _fill(root[b][t + 1], n, dim, padding, value)
    return out_r, out_n


def check_against_ref(data, pairs, n, dim, padding="same", value=0.0):
    for key, out, *own_dim in pairs:
        dim = own_dim[0] if own_dim else dim
        ref_r, ref_n = ref_catframes(data, key, n, dim, padding, value)
        np.testing.assert_array_equal(data[out].numpy(), ref_r)
        np.testing.assert_array_equal(data["next", out].numpy(), ref_n)


@settings(max_examples=20, deadline=None)
@given(
    n_envs=st.integers(1, 4),
    frames=st.integers(1, 4),
    chw=st.tuples(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4)),
    limit=st.integers(1, 4),
    padding=st.sampled_from(["same", "constant"]),
)
def test_catframes_matches_numpy_across_auto_resets(n_envs, frames, chw, limit, padding):
    t = CatFrames(frames, -3, ["observation"], ["stack"], padding=padding, padding_value=7.0)
    env = TransformedEnv(PixelEnv(n_envs, chw, limit=limit, dtype=torch.float32), t)
    env.append_transform(
        CatFrames(frames, -1, ["frame_id"], ["ids"], padding=padding, padding_value=7.0)
    )
    c, h, w = chw
    assert env.observation_spec["stack"].shape == (n_envs, frames * c, h, w)
    data = env.rollout(9, policy=ones_policy(n_envs), break_when_any_done=False)
    assert data["next", "done"][0].any()  # sub-env 0 finished inside the rollout
    pairs = [("observation", "stack", -3), ("frame_id", "ids", -1)]
    check_against_ref(data, pairs, frames, -3, padding, 7.0)


@pytest.mark.parametrize("order", ["counter_first", "frames_first"])
def test_catframes_with_transform_truncation(order):
    counter, frames = StepCounter(3), CatFrames(3, -1, ["frame_id"], ["ids"])
    chain = Compose(counter, frames) if order == "counter_first" else Compose(frames, counter)
    env = TransformedEnv(PixelEnv(3, (2, 2, 1), limit=100), chain)
    data = env.rollout(8, policy=ones_policy(3), break_when_any_done=False)
    assert data["next", "truncated"][:, 2].all()  # StepCounter ended every episode at 3
    check_against_ref(data, [("frame_id", "ids")], 3, -1)
    check_env_specs(env, steps=7)


def test_catframes_partial_reset_refills_only_reset_rows():
    env = TransformedEnv(PixelEnv(3, (2, 2, 1), limit=100), CatFrames(3, -1, ["frame_id"], ["ids"]))
    td = env.reset()
    for _ in range(4):
        _, td = env.step_and_maybe_reset(td.set("action", torch.ones(3, dtype=torch.int64)))
    before = td["ids"].clone()
    out = env.reset(td.set("_reset", torch.tensor([False, True, False])))
    fid = out["frame_id"][1, 0].item()
    assert out["ids"][1].tolist() == [fid] * 3  # the reset sub-env: its own first frame
    assert torch.equal(out["ids"][[0, 2]], before[[0, 2]])
    assert before[0].tolist() == [3.0, 4.0, 5.0]
    _, td = env.step_and_maybe_reset(out.set("action", torch.ones(3, dtype=torch.int64)))
    assert td["ids"][1].tolist() == [fid, fid, fid + 1] and td["ids"][0].tolist() == [4.0, 5.0, 6.0]


def test_catframes_on_a_two_dim_batch_and_inside_a_batched_env():
    make = functools.partial(PixelEnv, 2, (2, 3, 3), 2)
    outer = TransformedEnv(
        SerialEnv(2, make, [{"seed": 0}, {"seed": 1}]), CatFrames(2, -1, ["frame_id"], ["ids"])
    )
    data = outer.rollout(
        7,
        policy=lambda td: td.set("action", torch.ones(2, 2, dtype=torch.int64)),
        break_when_any_done=False,
    )
    assert data.batch_size == (2, 2, 7)
    check_against_ref(data, [("frame_id", "ids")], 2, -1)
    outer.close()
    inner = functools.partial(_transformed_pixels, seed=0)
    env = SerialEnv(2, inner)  # each sub-env's TransformedEnv writes into rows of shared buffers
    data = env.rollout(
        7,
        policy=lambda td: td.set("action", torch.ones(2, 3, dtype=torch.int64)),
        break_when_any_done=False,
    )
    check_against_ref(data, [("frame_id", "ids")], 3, -1)
    check_env_specs(env, steps=5)
    env.close()


def _transformed_pixels(seed):
    return TransformedEnv(
        PixelEnv(3, (2, 2, 1), limit=2, seed=seed), CatFrames(3, -1, ["frame_id"], ["ids"])
    )


def test_catframes_on_gymnasium_cartpole():
    env = TransformedEnv(GymEnv("CartPole-v1", num_envs=3,
                                categorical_action_encoding=True), CatFrames(4, -1, OBS, ["stack"]))
    env.set_seed(0)
    data = env.rollout(60, break_when_any_done=False)
    assert data["next", "done"].any()  # random play ends CartPole episodes within 60 steps
    check_against_ref(data, [("observation", "stack")], 4, -1)
    check_env_specs(env, steps=5)
    env.close()


def test_atari_like_pipeline_specs_and_dtype():
    t = Compose(
        ToTensorImage(dtype=torch.uint8, in_keys=OBS),
        GrayScale(in_keys=OBS),
        Resize(5, 4, in_keys=OBS),
        CatFrames(4, in_keys=OBS),
    )
    env = TransformedEnv(PixelEnv(3, (11, 9, 3), limit=2), t)
    spec = env.observation_spec["observation"]
    assert spec.shape == (3, 4, 5, 4) and spec.dtype == torch.uint8
    check_env_specs(env, steps=8)
    data = env.rollout(6, policy=ones_policy(3), break_when_any_done=False)
    stack, done = data["next", "observation"], data["next", "done"][..., 0]
    assert done.any() and not done.all()
    for t in range(5):  # a sub-env that goes on: its next stack shifts by one frame
        go_on = ~done[:, t]
        assert torch.equal(stack[go_on, t + 1, :3], stack[go_on, t, 1:])


def test_atari_pipeline_matches_exact_references_across_mid_batch_resets():
    # the raw RGB frames kept under "observation": each stacked frame is the exact
    # luma, then the exact bilinear resize, of the frame the env showed at that step
    t = Compose(
        ToTensorImage(dtype=torch.uint8, out_keys=["pixels"], in_keys=OBS),
        GrayScale(in_keys=["pixels"]),
        Resize(7, 5, in_keys=["pixels"]),
        CatFrames(4, in_keys=["pixels"], out_keys=["stack"]),
    )
    env = TransformedEnv(PixelEnv(4, (23, 17, 3), limit=2), t)
    env.set_seed(0)
    data = env.rollout(9, policy=ones_policy(4), break_when_any_done=False)
    done = data["next", "done"][..., 0]
    assert (done.any(0) & ~done.all(0)).any()  # some sub-envs reset while others go on
    for prefix in ((), ("next",)):
        raw = data[(*prefix, "observation")].numpy()
        small = exact_bilinear(exact_luma(np.moveaxis(raw, -1, -3)), 7, 5)
        np.testing.assert_array_equal(data[(*prefix, "pixels")].numpy(), small)
        data.set((*prefix, "ref"), torch.from_numpy(small))
    check_against_ref(data, [("ref", "stack")], 4, -3)


def test_catframes_bad_input():
    env = PixelEnv(2, (6, 5, 3))
    with pytest.raises(
        SpecError,
        match=r"CatFrames: in_key 'pixels' is not an observation key of the env; "
        r"observation keys: \['observation', 'frame_id'\]",
    ):
        TransformedEnv(env, CatFrames(4, in_keys=["pixels"]))
    with pytest.raises(
        SpecError, match=r"CatFrames: 'frame_id' needs at least 3 dims .* received shape \(2, 1\)"
    ):
        TransformedEnv(env, CatFrames(4, -3, in_keys=["frame_id"]))
    with pytest.raises(ValueError, match="N must be a positive int, received 0"):
        CatFrames(0)
    with pytest.raises(ValueError, match="dim must be a negative int"):
        CatFrames(4, dim=1)
    with pytest.raises(ValueError, match="padding"):
        CatFrames(4, padding="zeros")
