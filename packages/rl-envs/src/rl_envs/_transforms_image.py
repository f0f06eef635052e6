"""Pixel transforms: ToTensorImage, Resize and GrayScale (TorchRL names and meaning).

Each runs on the whole batch at once (one torch op or one compiled call over
``[*B, ...]``, no loop over sub-envs in Python) and checks the layout and dtype of its
input when the ``TransformedEnv`` is built: a wrong one raises
:class:`~rl_envs.exceptions.SpecError` naming the key, the expected and the received
shape or dtype. On uint8 images, ``GrayScale`` and the bilinear ``Resize`` compute the
exact result rounded half to even (:mod:`rl_envs._image_kernels`: numba kernels on the
CPU, integer torch ops elsewhere), written straight into the output leaf.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from tensordict import TensorDictBase

from rl_envs._image_kernels import bilinear_u8, luma_u8
from rl_envs._keys import PIXELS
from rl_envs._specs import Bounded, TensorSpec
from rl_envs._transforms_map import MapTransform, bounds_spec, event_shape, key_list, uniform_bounds
from rl_envs.exceptions import SpecError

__all__ = ["GrayScale", "Resize", "ToTensorImage"]

GRAY_WEIGHTS = (0.2989, 0.587, 0.114)
"""ITU-R 601-2 luma weights of R, G and B (torchvision's ``rgb_to_grayscale``)."""
_MODES = ("nearest", "nearest-exact", "bilinear", "bicubic", "area")


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    return x.round_().clamp_(0, 255).to(torch.uint8)


def _round_into(dst: torch.Tensor, y: torch.Tensor, *, clamp: bool = True) -> None:
    """``dst[...] = _to_uint8(y)`` for CPU tensors, ``y`` used as scratch (numpy's cast of
    in-range float32 to uint8 is ~4x cheaper than torch's); ``clamp=False`` when ``y`` is
    known to lie in ``[0, 255]``."""
    y = y.round_().clamp_(0, 255) if clamp else y.round_()
    np.copyto(dst.numpy(), y.numpy().reshape(dst.shape), "unsafe")


def _cpu_scratch(io: list[tuple[Any, ...]], shape_of: Any) -> dict[Any, torch.Tensor]:
    """Per key of a ``MapTransform``'s bound ``_io`` whose leaves are on the CPU: a float32
    buffer of ``shape_of(src, dst)``, allocated once (a step writes into it)."""
    return {
        key: torch.empty(shape_of(src, dst), dtype=torch.float32)
        for key, src, dst, *_ in io
        if dst.device.type == "cpu" and src.dtype == torch.uint8
    }


def check_chw(
    name: str, key: Any, spec: TensorSpec, batch_ndim: int, channels: int | None = None
) -> torch.Size:
    """Raise :class:`SpecError` unless ``key`` holds float or uint8 ``(..., C, H, W)`` images."""
    event = event_shape(spec, batch_ndim)
    if len(event) < 3:
        raise SpecError(
            f"{name}: {key!r} must hold images of shape (..., C, H, W) after the batch dims "
            f"{tuple(spec.shape[:batch_ndim])}, received shape {tuple(spec.shape)}"
        )
    if event[-1] <= 4 < event[-3]:
        raise SpecError(
            f"{name}: {key!r} must be channels-first (..., C, H, W); received shape "
            f"{tuple(spec.shape)}, which looks like (H, W, C): put ToTensorImage first"
        )
    if channels is not None and event[-3] != channels:
        raise SpecError(
            f"{name}: {key!r} must have {channels} channels at dim -3 (..., {channels}, H, W), "
            f"received shape {tuple(spec.shape)}"
        )
    if spec.dtype != torch.uint8 and not spec.dtype.is_floating_point:
        raise SpecError(f"{name}: {key!r} must be uint8 or floating point, received {spec.dtype}")
    return event


class ToTensorImage(MapTransform):
    """Images ``(H, W, C)`` (or ``(H, W)``) -> ``(C, H, W)``; uint8 becomes float in ``[0, 1]``.

    TorchRL's ``ToTensorImage``. An ``(H, W)`` input (e.g. ALE's grayscale frames) gets a
    channel dim: ``(1, H, W)``. With ``dtype=torch.uint8`` the bytes are kept as they are
    (only the layout changes): 4x less memory in a replay buffer, converted on sample.
    When only the layout changes (no scaling, the same dtype), the output is TorchRL's
    ``permute`` view of the input: ``(C, H, W)``-shaped, channels-last in memory, bound
    once, no copy and no work per step; the transforms after it read it in place.

    Args:
        from_int: divide by 255. Default (None): when the input dtype is an integer.
        dtype: output dtype (default ``torch.get_default_dtype()``); ``torch.uint8``
            keeps the values (the input must then be uint8).
        in_keys: image keys (default ``["pixels"]``, TorchRL's ``IMAGE_KEYS``).
        out_keys: where the result goes (default: in place of ``in_keys``).

    Raises:
        SpecError: when the env is built, if a key is not ``(H, W, C)`` with ``C`` in
            ``{1, 3, 4}`` (e.g. already channels-first), or its dtype does not fit.

    Examples:
        >>> from rl_envs import Bounded, Composite
        >>> frames = Bounded(0, 255, (8, 210, 160, 3), dtype=torch.uint8)
        >>> spec = Composite(pixels=frames, shape=(8,))
        >>> out = ToTensorImage().transform_observation_spec(spec)["pixels"]
        >>> tuple(out.shape), out.dtype, out.high.max().item()
        ((8, 3, 210, 160), torch.float32, 1.0)
    """

    obs_only = True

    def __init__(
        self,
        from_int: bool | None = None,
        *,
        dtype: torch.dtype | None = None,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
    ):
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if dtype != torch.uint8 and not dtype.is_floating_point:
            raise ValueError(
                f"ToTensorImage: dtype must be floating point or torch.uint8, received {dtype}"
            )
        if dtype == torch.uint8 and from_int:
            raise ValueError(
                "ToTensorImage: from_int=True scales to [0, 1], which dtype=torch.uint8 cannot hold"
            )
        super().__init__(key_list(in_keys, [PIXELS]), out_keys)
        self.from_int, self.dtype = from_int, dtype
        self._hw: dict[Any, bool] = {}
        self._scale: dict[Any, bool] = {}

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        event, batch = event_shape(spec, batch_ndim), tuple(spec.shape[:batch_ndim])
        if len(event) < 2 or (len(event) >= 3 and event[-1] not in (1, 3, 4)):
            raise SpecError(
                f"ToTensorImage: {key!r} must hold (H, W, C) images with C in (1, 3, 4), or "
                f"(H, W), after the batch dims {batch}; received shape {tuple(spec.shape)}"
            )
        is_int = not spec.dtype.is_floating_point
        scale = is_int if self.from_int is None else self.from_int
        if (scale or self.dtype == torch.uint8) and spec.dtype != torch.uint8:
            raise SpecError(f"ToTensorImage: {key!r} must be uint8, received {spec.dtype}")
        self._hw[key], self._scale[key] = len(event) == 2, scale and self.dtype != torch.uint8
        chw = (1, *event) if len(event) == 2 else (*event[:-3], event[-1], event[-3], event[-2])
        shape = (*batch, *chw)
        if self._scale[key]:
            return Bounded(0.0, 1.0, shape, spec.device, self.dtype)
        return bounds_spec(spec, shape, self.dtype, *uniform_bounds(spec))

    def _layout(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        return x.unsqueeze(-3) if self._hw[key] else x.movedim(-1, -3)

    def _alias(self, src: torch.Tensor, key: Any) -> torch.Tensor | None:
        if self._scale[key] or src.dtype != self.dtype:
            return None
        return self._layout(src, key)

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        y = self._layout(x, key).to(self.dtype)
        return y.div_(255) if self._scale[key] else y

    def _write_all(self, key: Any, src: torch.Tensor, dst: torch.Tensor) -> None:
        dst.copy_(self._layout(src, key))  # one pass: cast and re-layout into the leaf
        if self._scale[key]:
            dst.div_(255)


class Resize(MapTransform):
    """Resize ``(..., C, H, W)`` images to ``(..., C, w, h)`` with ``F.interpolate``.

    TorchRL's ``Resize``, with its naming: ``w`` is the size of dim -2 and ``h`` that of
    dim -1 (``Resize(84, 84)`` for Atari). A uint8 pipeline stays uint8: bilinear
    without antialiasing gives the exact interpolated value rounded half to even
    (integer weights; ``F.interpolate`` in float32 lands on either side of the exact
    ties, about 2% of the pixels of random 210x160 images resized to 84x84); the other
    modes interpolate in float32 and round to the nearest integer.

    Args:
        w: output size of dim -2.
        h: output size of dim -1 (default: ``w``).
        interpolation: an ``F.interpolate`` mode: ``"bilinear"`` (default, as TorchRL),
            ``"nearest"``, ``"nearest-exact"``, ``"bicubic"`` or ``"area"``.
        in_keys: image keys (default ``["pixels"]``, TorchRL's ``IMAGE_KEYS``).
        out_keys: where the result goes (default: in place of ``in_keys``).
        antialias: ``F.interpolate``'s anti-aliasing (bilinear and bicubic only); off by
            default, as in ``F.interpolate``.

    Raises:
        SpecError: when the env is built, if a key is not channels-first
            ``(..., C, H, W)`` (an ``(H, W, C)`` image is named as such), or not
            uint8/floating point.

    Examples:
        >>> from rl_envs import Bounded, Composite
        >>> frames = Bounded(0, 255, (8, 1, 210, 160), dtype=torch.uint8)
        >>> spec = Composite(pixels=frames, shape=(8,))
        >>> out = Resize(84, 84).transform_observation_spec(spec)["pixels"]
        >>> tuple(out.shape), out.dtype
        ((8, 1, 84, 84), torch.uint8)
    """

    obs_only = True

    def __init__(
        self,
        w: int,
        h: int | None = None,
        interpolation: str = "bilinear",
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        *,
        antialias: bool = False,
    ):
        h = w if h is None else h
        for name, v in (("w", w), ("h", h)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"Resize: {name} must be a positive int, received {v!r}")
        if interpolation not in _MODES:
            raise ValueError(
                f"Resize: interpolation must be one of {_MODES}, received {interpolation!r}"
            )
        if antialias and interpolation not in ("bilinear", "bicubic"):
            raise ValueError(
                f"Resize: antialias needs bilinear or bicubic, received {interpolation!r}"
            )
        super().__init__(key_list(in_keys, [PIXELS]), out_keys)
        self.w, self.h, self.interpolation, self.antialias = w, h, interpolation, antialias
        self._clamp: dict[Any, tuple[Any, Any]] = {}

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        check_chw("Resize", key, spec, batch_ndim)
        low, high = uniform_bounds(spec)
        if self.interpolation == "bicubic" and low is not None:
            self._clamp[key] = (low, high)  # bicubic overshoots: keep it inside the spec
        return bounds_spec(spec, (*spec.shape[:-2], self.w, self.h), spec.dtype, low, high)

    def _interpolate(self, y: torch.Tensor, key: Any) -> torch.Tensor:
        """``F.interpolate`` of float ``[N, C, H, W]`` images, clamped where the mode overshoots."""
        smooth = self.interpolation in ("bilinear", "bicubic")
        y = F.interpolate(
            y,
            size=(self.w, self.h),
            mode=self.interpolation,
            align_corners=False if smooth else None,
            antialias=self.antialias,
        )
        return y.clamp_(*self._clamp[key]) if key in self._clamp else y

    def _exact(self, dtype: torch.dtype) -> bool:
        """uint8 bilinear without antialiasing: :func:`bilinear_u8`'s exact arithmetic."""
        bilinear = self.interpolation == "bilinear" and not self.antialias
        return bilinear and dtype == torch.uint8

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        lead, (c, hh, ww) = x.shape[:-3], x.shape[-3:]
        if self._exact(x.dtype):
            out = torch.empty((*lead, c, self.w, self.h), dtype=x.dtype, device=x.device)
            bilinear_u8(x, out)
            return out
        y = x.reshape(-1, c, hh, ww)
        y = self._interpolate(y.float() if x.dtype == torch.uint8 else y, key)
        y = _to_uint8(y) if x.dtype == torch.uint8 else y
        return y.reshape(*lead, c, self.w, self.h)

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        root, next = super().bind(root, next)
        flat = lambda src, dst: (src[..., 0, 0, 0].numel(), *src.shape[-3:])  # noqa: E731
        self._float = {} if self._exact(torch.uint8) else _cpu_scratch(self._io, flat)
        return root, next

    def _write(self, key: Any, src: torch.Tensor, dst: torch.Tensor, rows: Any) -> None:
        """uint8: exact bilinear into the leaf; other uint8 modes on the CPU: ``_map``'s
        float ops, the float32 input in a buffer bound once."""
        if rows is None and self._exact(src.dtype):
            return bilinear_u8(src, dst)
        buf = self._float.get(key)
        if rows is not None or buf is None:
            return super()._write(key, src, dst, rows)
        buf.view(src.shape).copy_(src)
        _round_into(dst, self._interpolate(buf, key))
        return None


class GrayScale(MapTransform):
    """RGB ``(..., 3, H, W)`` -> luma ``(..., 1, H, W)``: ITU-R 601-2 weights.

    TorchRL's ``GrayScale`` (torchvision's ``rgb_to_grayscale`` weights
    ``0.2989 R + 0.587 G + 0.114 B``). uint8 images get the exact luma
    ``(2989 R + 5870 G + 1140 B) / 10000`` rounded half to even, in integer arithmetic
    (torchvision truncates; float32 arithmetic lands on either side of the exact ties).

    Args:
        in_keys: image keys (default ``["pixels"]``, TorchRL's ``IMAGE_KEYS``).
        out_keys: where the result goes (default: in place of ``in_keys``).

    Raises:
        SpecError: when the env is built, if a key is not ``(..., 3, H, W)``
            (e.g. ``(H, W, 3)``), or not uint8/floating point.

    Examples:
        >>> from rl_envs import Bounded, Composite
        >>> spec = Composite(pixels=Bounded(0.0, 1.0, (8, 3, 84, 84)), shape=(8,))
        >>> tuple(GrayScale().transform_observation_spec(spec)["pixels"].shape)
        (8, 1, 84, 84)
    """

    obs_only = True

    def __init__(self, in_keys: Sequence[Any] | None = None, out_keys: Sequence[Any] | None = None):
        super().__init__(key_list(in_keys, [PIXELS]), out_keys)

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        check_chw("GrayScale", key, spec, batch_ndim, channels=3)
        shape = (*spec.shape[:-3], 1, *spec.shape[-2:])
        return bounds_spec(spec, shape, spec.dtype, *uniform_bounds(spec))

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        if x.dtype == torch.uint8:
            out = torch.empty((*x.shape[:-3], 1, *x.shape[-2:]), dtype=x.dtype, device=x.device)
            luma_u8(x, out)
            return out
        r, g, b = x.unbind(-3)
        y = (r * GRAY_WEIGHTS[0]).add_(g, alpha=GRAY_WEIGHTS[1]).add_(b, alpha=GRAY_WEIGHTS[2])
        return y.unsqueeze(-3)

    def _write_all(self, key: Any, src: torch.Tensor, dst: torch.Tensor) -> None:
        """``_map``'s arithmetic straight into the leaf (uint8: the exact kernel)."""
        if src.dtype == torch.uint8:
            return luma_u8(src, dst)
        r, g, b = src.unbind(-3)
        y = dst.select(-3, 0)
        torch.mul(r, GRAY_WEIGHTS[0], out=y).add_(g, alpha=GRAY_WEIGHTS[1])
        y.add_(b, alpha=GRAY_WEIGHTS[2])
        return None
