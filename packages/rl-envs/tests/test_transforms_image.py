"""ToTensorImage, Resize and GrayScale against numpy references, across mid-batch resets."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_envs import (
    CatFrames,
    Compose,
    GrayScale,
    Resize,
    SpecError,
    ToTensorImage,
    TransformedEnv,
    check_env_specs,
)

from ._image_refs import exact_bilinear, exact_luma
from ._pixels import PixelEnv, ones_policy

OBS = ["observation"]  # PixelEnv's key; the image transforms default to "pixels"

SETTINGS = settings(max_examples=15, deadline=None)


# -- numpy references -------------------------------------------------------------------
def ref_to_tensor(x: np.ndarray, scale: bool = True) -> np.ndarray:
    chw = np.moveaxis(x, -1, -3)
    return chw.astype(np.float32) / np.float32(255) if scale else chw


def _weights(n_in: int, n_out: int, antialias: bool) -> np.ndarray:
    """Row i: the weights of the input pixels in output pixel i (half-pixel centres)."""
    scale, w = n_in / n_out, np.zeros((n_out, n_in))
    for i in range(n_out):
        if antialias and scale > 1:  # a triangle filter stretched over ``scale`` pixels
            centre = scale * (i + 0.5)
            lo, hi = max(int(centre - scale + 0.5), 0), min(int(centre + scale + 0.5), n_in)
            js = np.arange(lo, hi)
            tri = np.maximum(0.0, 1.0 - np.abs((js - centre + 0.5) / scale))
            w[i, lo:hi] = tri / tri.sum()
        else:
            src = max(scale * (i + 0.5) - 0.5, 0.0)
            i0 = int(np.floor(src))
            i1, lam = min(i0 + 1, n_in - 1), src - i0
            w[i, i0] += 1 - lam
            w[i, i1] += lam
    return w


def ref_bilinear(x: np.ndarray, oh: int, ow: int, antialias: bool = False) -> np.ndarray:
    wh, ww = _weights(x.shape[-2], oh, antialias), _weights(x.shape[-1], ow, antialias)
    return np.einsum("ph,...hw,qw->...pq", wh, x.astype(np.float64), ww)


def ref_gray(x: np.ndarray) -> np.ndarray:
    r, g, b = (x[..., i, :, :].astype(np.float64) for i in range(3))
    return (0.2989 * r + 0.587 * g + 0.114 * b)[..., None, :, :]


def rollout(env: TransformedEnv, steps: int = 7):
    env.set_seed(0)
    return env.rollout(steps, policy=ones_policy(env.batch_size[0]), break_when_any_done=False)


def both(data, key: str) -> list[np.ndarray]:
    return [data[key].numpy(), data["next", key].numpy()]


# -- ToTensorImage ----------------------------------------------------------------------
@SETTINGS
@given(n=st.integers(1, 4), h=st.integers(5, 9), w=st.integers(5, 9), c=st.sampled_from([1, 3, 4]))
def test_to_tensor_image_matches_numpy(n, h, w, c):
    env = TransformedEnv(
        PixelEnv(n, (h, w, c), limit=2), ToTensorImage(out_keys=["pixels"], in_keys=OBS)
    )
    assert env.observation_spec["pixels"].shape == (n, c, h, w)
    data = rollout(env)
    for raw, out in zip(both(data, "observation"), both(data, "pixels"), strict=True):
        np.testing.assert_array_equal(out, ref_to_tensor(raw))


def test_to_tensor_image_keeps_uint8_and_grayscale_frames():
    env = TransformedEnv(
        PixelEnv(3, (6, 5, 3)), ToTensorImage(dtype=torch.uint8, out_keys=["pixels"], in_keys=OBS)
    )
    spec = env.observation_spec["pixels"]
    assert spec.dtype == torch.uint8 and spec.shape == (3, 3, 6, 5) and spec.high.max() == 255
    data = rollout(env)
    for raw, out in zip(both(data, "observation"), both(data, "pixels"), strict=True):
        np.testing.assert_array_equal(out, ref_to_tensor(raw, scale=False))
    check_env_specs(env, steps=6)
    hw = TransformedEnv(PixelEnv(2, (6, 5)), ToTensorImage(in_keys=OBS))  # ALE grayscale: (H, W)
    assert hw.observation_spec["observation"].shape == (2, 1, 6, 5)
    check_env_specs(hw, steps=6)


def test_layout_only_to_tensor_image_is_a_view_bound_once():
    # uint8 kept: the output is the permuted input leaf itself (no copy, no per-step work)
    env = TransformedEnv(PixelEnv(2, (6, 5, 3)), ToTensorImage(dtype=torch.uint8, in_keys=OBS))
    env.reset()
    root, nxt = env._own_buffers()
    base_root, base_next = env.base_env.buffers()
    for out, raw in ((root, base_root), (nxt, base_next)):
        assert out["observation"].data_ptr() == raw["observation"].data_ptr()
        assert out["observation"].shape == (2, 3, 6, 5)
    check_env_specs(env, steps=6)


def test_to_tensor_image_float_input_is_only_relaid():
    env = TransformedEnv(
        PixelEnv(2, (6, 5, 3), dtype=torch.float32), ToTensorImage(out_keys=["pixels"], in_keys=OBS)
    )
    data = rollout(env)
    for raw, out in zip(both(data, "observation"), both(data, "pixels"), strict=True):
        np.testing.assert_array_equal(out, np.moveaxis(raw, -1, -3))
    check_env_specs(env, steps=6)


# -- Resize -----------------------------------------------------------------------------
@SETTINGS
@given(
    n=st.integers(1, 3),
    h=st.integers(2, 12),
    w=st.integers(2, 12),
    oh=st.integers(1, 10),
    ow=st.integers(1, 10),
    uint8=st.booleans(),
)
def test_resize_bilinear_matches_numpy(n, h, w, oh, ow, uint8):
    first = ToTensorImage(dtype=torch.uint8, in_keys=OBS) if uint8 else ToTensorImage(in_keys=OBS)
    env = TransformedEnv(
        PixelEnv(n, (h, w, 3), limit=2),
        Compose(first, Resize(oh, ow, out_keys=["small"], in_keys=OBS)),
    )
    spec = env.observation_spec["small"]
    assert spec.shape == (n, 3, oh, ow) and spec.dtype == (torch.uint8 if uint8 else torch.float32)
    data = rollout(env, 5)
    for img, out in zip(both(data, "observation"), both(data, "small"), strict=True):
        ref = ref_bilinear(img, oh, ow)
        if uint8:  # the exact value rounded half to even: at most half a level away
            np.testing.assert_array_equal(out, exact_bilinear(img, oh, ow))
            assert np.abs(out.astype(np.float64) - ref).max() <= 0.5 + 1e-9
        else:
            np.testing.assert_allclose(out, ref, atol=1e-5)


@SETTINGS
@given(h=st.integers(4, 30), w=st.integers(4, 30), oh=st.integers(2, 4), ow=st.integers(2, 4))
def test_resize_antialias_matches_numpy(h, w, oh, ow):
    t = Compose(
        ToTensorImage(in_keys=OBS), Resize(oh, ow, out_keys=["small"], antialias=True, in_keys=OBS)
    )
    data = rollout(TransformedEnv(PixelEnv(2, (h, w, 1), limit=2), t), 4)
    for img, out in zip(both(data, "observation"), both(data, "small"), strict=True):
        np.testing.assert_allclose(out, ref_bilinear(img, oh, ow, antialias=True), atol=1e-5)


def test_resize_names_follow_torchrl_and_other_modes():
    env = TransformedEnv(
        PixelEnv(2, (12, 10, 3)), Compose(ToTensorImage(in_keys=OBS), Resize(4, 6, in_keys=OBS))
    )
    assert env.observation_spec["observation"].shape == (2, 3, 4, 6)  # (w, h) = dims (-2, -1)
    check_env_specs(env, steps=6)
    for mode in ("nearest", "nearest-exact", "bicubic", "area"):
        env = TransformedEnv(
            PixelEnv(2, (12, 10, 3)),
            Compose(
                ToTensorImage(dtype=torch.uint8, in_keys=OBS),
                Resize(5, interpolation=mode, in_keys=OBS),
            ),
        )
        assert env.observation_spec["observation"].shape == (2, 3, 5, 5)
        check_env_specs(env, steps=4)


@pytest.mark.parametrize("mode", ["area", "nearest", "bilinear-antialias"])
def test_resize_other_uint8_modes_round_float32_interpolation(mode):
    # only bilinear without antialiasing has the exact integer path; the rest: float32, rounded
    antialias = mode == "bilinear-antialias"
    t = Resize(4, 3, mode.split("-")[0], out_keys=["small"], antialias=antialias, in_keys=OBS)
    chain = Compose(ToTensorImage(dtype=torch.uint8, in_keys=OBS), t)
    env = TransformedEnv(PixelEnv(3, (11, 9, 3), limit=2), chain)
    data = rollout(env, 4)
    for img, out in zip(both(data, "observation"), both(data, "small"), strict=True):
        x = torch.from_numpy(img).flatten(0, 1).float()
        y = F.interpolate(x, size=(4, 3), mode=t.interpolation, antialias=antialias)
        ref = y.round().clamp(0, 255).to(torch.uint8).reshape(out.shape)
        np.testing.assert_array_equal(out, ref.numpy())


# -- GrayScale --------------------------------------------------------------------------
@SETTINGS
@given(n=st.integers(1, 4), h=st.integers(1, 7), w=st.integers(1, 7), uint8=st.booleans())
def test_grayscale_matches_numpy(n, h, w, uint8):
    first = ToTensorImage(dtype=torch.uint8, in_keys=OBS) if uint8 else ToTensorImage(in_keys=OBS)
    env = TransformedEnv(
        PixelEnv(n, (h + 4, w + 4, 3), limit=2),
        Compose(first, GrayScale(out_keys=["gray"], in_keys=OBS)),
    )
    assert env.observation_spec["gray"].shape == (n, 1, h + 4, w + 4)
    data = rollout(env, 5)
    for img, out in zip(both(data, "observation"), both(data, "gray"), strict=True):
        ref = ref_gray(img)
        if uint8:
            assert out.dtype == np.uint8 and np.abs(out - ref).max() <= 0.5 + 1e-9
            np.testing.assert_array_equal(out, exact_luma(img))
        else:
            np.testing.assert_allclose(out, ref, atol=1e-6)


def test_pixel_pipeline_specs_and_partial_reset():
    t = Compose(
        ToTensorImage(dtype=torch.uint8, in_keys=OBS),
        GrayScale(in_keys=OBS),
        Resize(4, 3, in_keys=OBS),
    )
    env = TransformedEnv(PixelEnv(3, (9, 8, 3), limit=50), t)
    check_env_specs(env, steps=8)
    td = env.reset()
    for _ in range(2):
        _, td = env.step_and_maybe_reset(td.set("action", torch.ones(3, dtype=torch.int64)))
    before = td["observation"].clone()
    out = env.reset(td.set("_reset", torch.tensor([False, True, False])))
    raw = env.base_env.buffers()[0]["observation"].numpy()  # the base env's root frames
    ref = exact_bilinear(exact_luma(np.moveaxis(raw, -1, -3)), 4, 3)
    np.testing.assert_array_equal(out["observation"].numpy(), ref)
    assert torch.equal(out["observation"][[0, 2]], before[[0, 2]])
    assert not torch.equal(out["observation"][1], before[1])


def test_transformed_root_is_recomputed_only_where_done():
    # the root output is copied from "next" where not done: check the done rows differ
    env = TransformedEnv(
        PixelEnv(3, (6, 5, 3), limit=1), ToTensorImage(out_keys=["pixels"], in_keys=OBS)
    )
    data = rollout(env, 4)
    done = data["next", "done"][..., 0]
    assert done[0].all()  # sub-env 0 ends every step: its next root is a reset frame
    np.testing.assert_array_equal(
        data["pixels"].numpy(), ref_to_tensor(data["observation"].numpy())
    )
    assert not torch.equal(data["next", "pixels"][0, 0], data["pixels"][0, 1])


# -- bad input --------------------------------------------------------------------------
def test_image_transforms_reject_wrong_layout_and_dtype():
    chw = PixelEnv(2, (3, 6, 5), dtype=torch.float32)  # already channels-first
    with pytest.raises(
        SpecError, match=r"ToTensorImage: 'observation' must hold \(H, W, C\).*\(2, 3, 6, 5\)"
    ):
        TransformedEnv(chw, ToTensorImage(in_keys=OBS))
    floats = PixelEnv(2, (6, 5, 3), dtype=torch.float32)
    with pytest.raises(SpecError, match="'observation' must be uint8, received torch.float32"):
        TransformedEnv(floats, ToTensorImage(from_int=True, in_keys=OBS))
    with pytest.raises(SpecError, match="'observation' must be uint8, received torch.float32"):
        TransformedEnv(floats, ToTensorImage(dtype=torch.uint8, in_keys=OBS))
    hwc = PixelEnv(2, (6, 5, 3))
    with pytest.raises(
        SpecError,
        match=r"Resize: 'observation' must be channels-first.*\(2, 6, 5, 3\).*\(H, W, C\)",
    ):
        TransformedEnv(hwc, Resize(4, 4, in_keys=OBS))
    with pytest.raises(
        SpecError,
        match=r"GrayScale: 'observation' must have 3 channels.*received shape \(2, 1, 6, 5\)",
    ):
        TransformedEnv(
            PixelEnv(2, (6, 5, 1)), Compose(ToTensorImage(in_keys=OBS), GrayScale(in_keys=OBS))
        )
    with pytest.raises(SpecError, match="GrayScale: in_key 'pixels' is not an observation key"):
        TransformedEnv(hwc, GrayScale(in_keys=["pixels"]))
    with pytest.raises(
        SpecError, match=r"Resize: 'frame_id' must hold images of shape \(\.\.\., C, H, W\)"
    ):
        TransformedEnv(hwc, Resize(4, 4, in_keys=["frame_id"]))


def test_image_transforms_default_to_torchrl_image_keys():
    # TorchRL's IMAGE_KEYS: an env without "pixels" gets a message naming the key, the
    # transform and the keys it has
    for transform in (ToTensorImage(), GrayScale(), Resize(4), CatFrames(2)):
        assert transform.in_keys == ["pixels"]
        name = type(transform).__name__
        with pytest.raises(
            SpecError,
            match=rf"{name}: in_key 'pixels' is not an observation key"
            r".*\['observation', 'frame_id'\]",
        ):
            TransformedEnv(PixelEnv(2, (6, 5, 3)), transform)


def test_image_transform_argument_errors():
    with pytest.raises(ValueError, match="from_int=True"):
        ToTensorImage(from_int=True, dtype=torch.uint8)
    with pytest.raises(ValueError, match="dtype"):
        ToTensorImage(dtype=torch.int32)
    with pytest.raises(ValueError, match="w must be a positive int, received 0"):
        Resize(0)
    with pytest.raises(ValueError, match="interpolation"):
        Resize(4, interpolation="lanczos")
    with pytest.raises(ValueError, match="antialias"):
        Resize(4, interpolation="nearest", antialias=True)
