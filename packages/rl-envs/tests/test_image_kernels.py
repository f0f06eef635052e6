"""The exact uint8 luma and bilinear resize: the CPU kernels (numba) and the integer torch
path against exact numpy references, on every memory layout the transforms hand them."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rl_envs import _image_kernels as K

from ._image_refs import exact_bilinear, exact_luma

SETTINGS = settings(max_examples=25, deadline=None)
LAYOUTS = ("interleaved", "planar", "strided")
leads = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)


def images(lead: tuple, c: int, h: int, w: int, layout: str, seed: int) -> torch.Tensor:
    """uint8 ``(*lead, c, h, w)`` images laid out as ``layout``:

    ``interleaved``: ``(H, W, C)`` bytes seen as ``(C, H, W)`` (``ToTensorImage``'s view);
    ``planar``: contiguous; ``strided``: every other column of a wider image.
    """
    rng = np.random.default_rng(seed)
    wide = 2 * w if layout == "strided" else w
    hwc = torch.from_numpy(rng.integers(0, 256, (*lead, h, wide, c), dtype=np.uint8))
    x = hwc.movedim(-1, -3)
    if layout == "planar":
        return x.contiguous()
    return x[..., ::2] if layout == "strided" else x


@SETTINGS
@given(
    lead=leads,
    h=st.integers(1, 13),
    w=st.integers(1, 13),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**16),
)
def test_luma_matches_the_exact_reference(lead, h, w, layout, seed):
    x = images(lead, 3, h, w, layout, seed)
    ref = exact_luma(x.numpy())
    out = torch.empty((*lead, 1, h, w), dtype=torch.uint8)
    K.luma_u8(x, out)
    np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal(K.luma_torch(x).numpy(), ref)


@SETTINGS
@given(
    lead=leads,
    c=st.sampled_from([1, 3]),
    hw=st.tuples(st.integers(1, 13), st.integers(1, 13)),
    out_hw=st.tuples(st.integers(1, 15), st.integers(1, 15)),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**16),
)
def test_bilinear_matches_the_exact_reference(lead, c, hw, out_hw, layout, seed):
    x = images(lead, c, *hw, layout, seed)
    ref = exact_bilinear(x.numpy(), *out_hw)
    out = torch.empty((*lead, c, *out_hw), dtype=torch.uint8)
    K.bilinear_u8(x, out)
    np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal(K.bilinear_torch(x, *out_hw).numpy(), ref)


def test_luma_of_every_colour_and_its_ties():
    """All 2**24 colours, interleaved as ALE's frames are: 1,703 of them are exact ties,
    rounded to the even neighbour (float32 arithmetic missed 178 of those)."""
    codes = torch.arange(2**24, dtype=torch.int32)
    rgb = torch.stack([codes >> 16, (codes >> 8) & 255, codes & 255], -1).to(torch.uint8)
    x = rgb.view(4096, 4096, 3).movedim(-1, -3)
    out = torch.empty(1, 4096, 4096, dtype=torch.uint8)
    K.luma_u8(x, out)
    ref = exact_luma(x.numpy())
    np.testing.assert_array_equal(out.numpy(), ref)
    np.testing.assert_array_equal(K.luma_torch(x).numpy(), ref)
    r, g, b = (rgb[:, k].to(torch.int32) for k in range(3))
    num = 2989 * r + 5870 * g + 1140 * b
    ties = num % 10000 == 5000
    assert int(ties.sum()) == 1703
    half_down = num[ties] // 10000  # the lower neighbour of each tie
    got = out.view(-1)[ties].to(torch.int32)
    assert torch.equal(got, half_down + half_down % 2)  # the even one
    assert (got == half_down).any() and (got == half_down + 1).any()


def test_bilinear_numerators_past_float32_use_float64():
    # 255 * 4 * 130 * 131 > 2**24: the numerators need float64 to stay exact
    assert K._bilinear_dtype(84, 84) is np.float32 and K._bilinear_dtype(130, 131) is np.float64
    x = images((2,), 1, 5, 7, "planar", 3)
    out = torch.empty(2, 1, 130, 131, dtype=torch.uint8)
    K.bilinear_u8(x, out)
    np.testing.assert_array_equal(out.numpy(), exact_bilinear(x.numpy(), 130, 131))


@pytest.mark.parametrize("kernel", ["luma", "bilinear"])
def test_a_non_contiguous_output_takes_the_torch_path(kernel):
    x = images((2,), 3, 9, 8, "interleaved", 0)
    if kernel == "luma":
        out, ref = torch.empty(2, 9, 8, 1, dtype=torch.uint8), exact_luma(x.numpy())
        K.luma_u8(x, out.movedim(-1, -3))
    else:
        out, ref = torch.empty(2, 4, 5, 3, dtype=torch.uint8), exact_bilinear(x.numpy(), 4, 5)
        K.bilinear_u8(x, out.movedim(-1, -3))
    np.testing.assert_array_equal(out.movedim(-1, -3).numpy(), ref)


def test_taps_follow_f_interpolate_source_index():
    # 210 -> 84 (ALE rows): sources 2.5 p + 0.75, weights (1/4, 3/4) then (3/4, 1/4) over 168
    idx, w = K.taps(210, 84)
    p = np.arange(84)
    np.testing.assert_array_equal(idx[0], np.floor(2.5 * p + 0.75).astype(int))
    np.testing.assert_array_equal(w[1][:2], [126, 42])
    assert (w.sum(0) == 168).all() and idx.max() == 209
    idx, w = K.taps(3, 7)  # upscaling: the first sources clamp at 0, the last repeat row 2
    assert idx[0, 0] == 0 and w[1, 0] == 0 and idx[1, -1] == 2
