"""Exact uint8 arithmetic for ``GrayScale`` and ``Resize`` (bilinear): CPU kernels and a
torch path that computes the very same bytes on any device.

Both maps are rational functions of the input bytes, so a uint8 output is defined
exactly, as the round-half-to-even of the real value (no float32 error at the ties):

- luma: ``(2989 R + 5870 G + 1140 B) / 10000`` (the weights ``0.2989, 0.587, 0.114``);
- bilinear, ``align_corners=False``, no antialiasing: output row ``p`` of ``H -> h``
  reads rows ``i0 = floor(s / 2h)`` and ``i1 = min(i0 + 1, H - 1)`` with
  ``s = max(H (2p + 1) - h, 0)``, weighted ``(2h - s mod 2h, s mod 2h) / 2h`` (the source
  index ``H / h (p + 1/2) - 1/2`` of ``F.interpolate``, clamped at 0, as a fraction);
  the same along the columns; the value is ``sum(w_row w_col x) / (4 h w)``.

Numerators and denominators are integers. The CPU kernels hold them in float32 (exact
below ``2**24``; the resize switches to float64 where ``255 * 4 h w`` is not) and divide
once. The quotient is at most 255 and a value that is not a tie lies at least ``1/den``
from one, more than half an ulp of the quotient (``den < 2**17`` in float32, ``2**46``
in float64): the correctly rounded quotient is a tie exactly when the value is, and
``rint`` of it is the exact result. The torch path (:func:`luma_torch`,
:func:`bilinear_torch`: other devices, or numba missing) uses integer ops only (a floor
division and a remainder test for the tie), which every device computes exactly. The
float32 torch ops used before land on either side of an exact tie: ``F.interpolate``
(about 2% of the outputs of a random 210x160 image resized to 84x84 are ties) and
``r * 0.2989 + ...`` (178 of the 16.7M colours, all exact ties): those bytes were one
level off.

The CPU kernels (numba, ``cache=True``) compile on first use, one to a few seconds per
variant, once per machine; numba is imported then, not at import of ``rl_envs``.
``luma_u8`` has a kernel for interleaved RGB bytes (``ToTensorImage(dtype=uint8)``'s view
of ``(H, W, 3)`` frames) and one for any strides; ``bilinear_u8`` reads rows of any
strides, vertical pass first (contiguous rows), then two taps per output pixel.
"""

from __future__ import annotations

import functools
import importlib.util
from types import SimpleNamespace

import numpy as np
import torch

__all__ = ["bilinear_torch", "bilinear_u8", "kernels_available", "luma_torch", "luma_u8", "taps"]

LUMA_NUMERATORS = (2989, 5870, 1140)
"""The luma weights ``0.2989, 0.587, 0.114`` over :data:`LUMA_DENOMINATOR`."""
LUMA_DENOMINATOR = 10000
_F32_EXACT = 2**24


@functools.cache
def kernels_available() -> bool:
    """True when numba is importable (the CPU kernels can be compiled)."""
    return importlib.util.find_spec("numba") is not None


@functools.cache
def _kernels() -> SimpleNamespace:
    import numba

    jit = numba.njit(cache=True, nogil=True, error_model="numpy")
    return SimpleNamespace(
        luma_rgb=jit(_luma_rgb), luma_planes=jit(_luma_planes), bilinear=jit(_bilinear)
    )


# -- kernels (compiled by numba; plain Python would be correct, and slow) ----------------
def _luma_rgb(x, out):  # noqa: ANN001, ANN202
    """``out[m]`` = luma of ``x[3m : 3m + 3]``: interleaved RGB bytes, C-contiguous.

    The products are exact in float32; one division, rounded half to even.
    """
    wr, wg, wb = np.float32(2989.0), np.float32(5870.0), np.float32(1140.0)
    den = np.float32(10000.0)
    for m in range(out.shape[0]):
        n = wr * np.float32(x[3 * m]) + wg * np.float32(x[3 * m + 1])
        n += wb * np.float32(x[3 * m + 2])
        out[m] = np.uint8(np.rint(n / den))


def _luma_planes(x, out):  # noqa: ANN001, ANN202
    """``out[n, i, j]`` = luma of ``x[n, :, i, j]``; ``x`` ``(N, 3, H, W)``, any strides."""
    wr, wg, wb = np.float32(2989.0), np.float32(5870.0), np.float32(1140.0)
    den = np.float32(10000.0)
    for n in range(out.shape[0]):
        for i in range(out.shape[1]):
            r, g, b, o = x[n, 0, i], x[n, 1, i], x[n, 2, i], out[n, i]
            for j in range(o.shape[0]):
                v = wr * np.float32(r[j]) + wg * np.float32(g[j]) + wb * np.float32(b[j])
                o[j] = np.uint8(np.rint(v / den))


def _bilinear(x, out, rows, row_w, cols, col_w):  # noqa: ANN001, ANN202
    """``out[m]`` = bilinear resize of ``x[m]`` (``(M, H, W)`` bytes, any strides).

    ``rows``/``cols``: ``(2, n_out)`` source indices; ``row_w``/``col_w``: their integer
    weights as floats (float32 or float64: the precision the numerators need). Vertical
    pass on whole rows first, then two column taps per output pixel, then one division.
    """
    dt = row_w.dtype.type
    den = dt(4 * out.shape[1] * out.shape[2])
    line = np.empty(x.shape[2], dtype=row_w.dtype)
    acc = np.empty(out.shape[2], dtype=row_w.dtype)
    for m in range(out.shape[0]):
        for p in range(out.shape[1]):
            top, bottom = x[m, rows[0, p]], x[m, rows[1, p]]
            wt, wb = row_w[0, p], row_w[1, p]
            for j in range(line.shape[0]):
                line[j] = wt * dt(top[j]) + wb * dt(bottom[j])
            for q in range(acc.shape[0]):
                acc[q] = col_w[0, q] * line[cols[0, q]] + col_w[1, q] * line[cols[1, q]]
            o = out[m, p]
            for q in range(acc.shape[0]):
                o[q] = np.uint8(np.rint(acc[q] / den))


# -- weights ---------------------------------------------------------------------------
@functools.cache
def taps(n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """The source indices ``(2, n_out)`` and integer weights ``(2, n_out)`` (over
    ``2 n_out``) of a bilinear resize ``n_in -> n_out`` along one dim (module docstring).

    Examples:
        >>> idx, w = taps(5, 2)  # sources 0.75 and 3.25
        >>> idx.tolist(), w.tolist()
        ([[0, 3], [1, 4]], [[1, 3], [3, 1]])
    """
    s = np.maximum(n_in * (2 * np.arange(n_out) + 1) - n_out, 0)
    first, frac = np.divmod(s, 2 * n_out)
    idx = np.stack([first, np.minimum(first + 1, n_in - 1)]).astype(np.intp)
    weights = np.stack([2 * n_out - frac, frac]).astype(np.int64)
    return idx, weights


@functools.cache
def _float_taps(n_in: int, n_out: int, dtype: type) -> tuple[np.ndarray, np.ndarray]:
    idx, weights = taps(n_in, n_out)
    return idx, weights.astype(dtype)


def _bilinear_dtype(h: int, w: int) -> type:
    """float32 when every numerator (at most ``255 * 4 h w``) is exact in it."""
    return np.float32 if 255 * 4 * h * w < _F32_EXACT else np.float64


# -- dispatch --------------------------------------------------------------------------
def _on_kernels(*tensors: torch.Tensor) -> bool:
    return all(t.device.type == "cpu" for t in tensors) and kernels_available()


def _flat(x: torch.Tensor, lead: int) -> torch.Tensor:
    """``x`` with its leading dims (all but the last ``lead``) merged (a view when it can)."""
    return x.reshape(-1, *x.shape[x.ndim - lead :])


def luma_u8(src: torch.Tensor, dst: torch.Tensor) -> None:
    """``dst`` ``[..., 1, H, W]`` = exact luma of ``src`` ``[..., 3, H, W]``, both uint8.

    The CPU kernel when numba is there, else :func:`luma_torch`; any layout of ``src``.
    """
    if not _on_kernels(src, dst) or not dst.is_contiguous():
        dst.copy_(luma_torch(src))
        return
    k, out = _kernels(), dst.view(-1)
    rgb = src.movedim(-3, -1)
    if rgb.is_contiguous():  # interleaved bytes: (H, W, 3) frames seen as (3, H, W)
        k.luma_rgb(rgb.reshape(-1).numpy(), out.numpy())
    else:
        k.luma_planes(_flat(src, 3).numpy(), out.view(-1, *dst.shape[-2:]).numpy())


def bilinear_u8(src: torch.Tensor, dst: torch.Tensor) -> None:
    """``dst`` ``[..., C, h, w]`` = exact bilinear resize of ``src`` ``[..., C, H, W]``.

    The CPU kernel when numba is there, else :func:`bilinear_torch`; any layout of ``src``.
    """
    h, w = dst.shape[-2:]
    if not _on_kernels(src, dst) or not dst.is_contiguous():
        dst.copy_(bilinear_torch(src, h, w))
        return
    dtype = _bilinear_dtype(h, w)
    rows, row_w = _float_taps(src.shape[-2], h, dtype)
    cols, col_w = _float_taps(src.shape[-1], w, dtype)
    x, out = _flat(src, 2).numpy(), dst.view(-1, h, w).numpy()
    _kernels().bilinear(x, out, rows, row_w, cols, col_w)


def _round_ratio(num: torch.Tensor, den: int) -> torch.Tensor:
    """Integer ``num / den`` rounded half to even, as uint8 (integer ops only)."""
    q = torch.div(num, den, rounding_mode="floor")
    twice_rem = (num - q * den) * 2
    up = (twice_rem > den) | ((twice_rem == den) & (q % 2 == 1))
    return (q + up).to(torch.uint8)


def luma_torch(src: torch.Tensor) -> torch.Tensor:
    """Exact luma ``[..., 1, H, W]`` of uint8 ``src`` ``[..., 3, H, W]``, on its device."""
    r, g, b = src.to(torch.int32).unbind(-3)
    wr, wg, wb = LUMA_NUMERATORS
    num = (r * wr).add_(g, alpha=wg).add_(b, alpha=wb)
    return _round_ratio(num, LUMA_DENOMINATOR).unsqueeze(-3)


def bilinear_torch(src: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Exact bilinear resize of uint8 ``src`` ``[..., C, H, W]`` to ``[..., C, h, w]``."""
    total = 255 * 4 * h * w
    dtype = torch.int32 if total < 2**31 else torch.int64
    x = src.to(dtype)
    for dim, n_out in ((-2, h), (-1, w)):
        idx, weights = (torch.as_tensor(a, device=src.device) for a in taps(x.shape[dim], n_out))
        shape = (-1, 1) if dim == -2 else (-1,)
        pair = [x.index_select(dim, idx[k]) * weights[k].to(dtype).view(shape) for k in (0, 1)]
        x = pair[0].add_(pair[1])
    return _round_ratio(x, 4 * h * w)
