"""Exact numpy references of the uint8 luma and bilinear resize (rounded half to even).

Built from the definitions, not from ``rl_envs._image_kernels``: the bilinear weights
come from ``F.interpolate``'s source index ``n_in / n_out (i + 1/2) - 1/2`` (clamped at
0) computed as a ``Fraction``.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import numpy as np


def round_half_even(num: np.ndarray, den: int) -> np.ndarray:
    """Integer ``num / den`` rounded half to even, as uint8."""
    q, r = np.divmod(num, den)
    return (q + ((2 * r > den) | ((2 * r == den) & (q % 2 == 1)))).astype(np.uint8)


def exact_luma(x: np.ndarray) -> np.ndarray:
    """``(..., 3, H, W)`` uint8 -> ``(..., 1, H, W)``: ``(2989 R + 5870 G + 1140 B) / 10^4``."""
    r, g, b = (x[..., i, :, :].astype(np.int32) for i in range(3))
    return round_half_even(2989 * r + 5870 * g + 1140 * b, 10000)[..., None, :, :]


@functools.cache
def bilinear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``(n_out, n_in)`` integer weights over ``2 n_out`` (align_corners=False)."""
    m = np.zeros((n_out, n_in), np.int64)
    for i in range(n_out):
        src = max(Fraction(n_in, n_out) * (i + Fraction(1, 2)) - Fraction(1, 2), Fraction(0))
        i0 = math.floor(src)
        lam = (src - i0) * 2 * n_out
        assert lam.denominator == 1
        m[i, i0] += 2 * n_out - int(lam)
        m[i, min(i0 + 1, n_in - 1)] += int(lam)
    return m


def exact_bilinear(x: np.ndarray, h: int, w: int) -> np.ndarray:
    """``(..., H, W)`` uint8 -> ``(..., h, w)``: the exact bilinear value, rounded."""
    rows, cols = bilinear_matrix(x.shape[-2], h), bilinear_matrix(x.shape[-1], w)
    num = np.einsum("ph,...hw,qw->...pq", rows, x.astype(np.int64), cols)
    return round_half_even(num, 4 * h * w)
