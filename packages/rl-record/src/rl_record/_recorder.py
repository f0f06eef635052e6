"""``PixelRenderTransform`` and ``VideoRecorder``: env transforms (rl-envs' fast hooks)
that render frames into ``"pixels"`` and hand an episode's frames to a logger."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from rl_envs import Composite, Transform, Unbounded
from tensordict import TensorDictBase

from rl_record._common import Logger
from rl_record.exceptions import LoggerInputError, VideoFormatError

__all__ = ["PixelRenderTransform", "VideoRecorder"]


def _leaf(td: TensorDictBase, key: Any, shape: tuple, dtype: torch.dtype) -> tuple:
    out = td.copy()
    leaf = torch.zeros(shape, dtype=dtype, device=td.device)
    out.set(key, leaf)
    return out, leaf


class PixelRenderTransform(Transform):
    """Call the base env's ``render()`` after every reset and step and write the frames
    to ``"pixels"`` (``uint8 [*B, H, W, 3]``), as TorchRL's transform of that name.

    The env must render arrays: ``GymEnv(..., render_mode="rgb_array")``. The frame size
    is read from one render when the spec is built (the gymnasium env is reset first if it
    was not yet; the env's own seeded reset comes later, so the data is unchanged).

    Args:
        out_keys: where the frames go (default ``["pixels"]``).
        preproc: an optional ``numpy [N, H, W, 3] -> numpy [N, H', W', 3]`` applied to
            each render.
        render_method: the name of the render method of the gymnasium (vector) env.

    Raises:
        LoggerInputError: the env cannot render, or renders something other than one
            ``uint8 [H, W, 3]`` frame per sub-env.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2, render_mode="rgb_array"),
        ...                      PixelRenderTransform())
        >>> env.rollout(3)["next", "pixels"].shape
        torch.Size([2, 3, 400, 600, 3])
        >>> env.close()
    """

    def __init__(self, out_keys: Sequence[Any] | None = None,
                 preproc: Callable[[np.ndarray], np.ndarray] | None = None,
                 render_method: str = "render") -> None:
        super().__init__([], list(out_keys) if out_keys is not None else ["pixels"])
        self.preproc, self.render_method = preproc, render_method
        self._views: list[Any] = []

    def _render_fn(self) -> Callable[[], Any]:
        owner = self._owner
        base = owner.base_env if owner is not None else None
        for target in (base, getattr(base, "env", None)):
            fn = getattr(target, self.render_method, None)
            if callable(fn) and getattr(target, "render_mode", "rgb_array") is None:
                raise LoggerInputError(
                    f"PixelRenderTransform: {type(target).__name__} has render_mode=None: "
                    "build the env with render_mode='rgb_array'"
                )
            if callable(fn):
                return fn
        raise LoggerInputError(
            f"PixelRenderTransform: expected a base env (or its gymnasium env) with a "
            f"{self.render_method}() method, received {type(base).__name__}"
        )

    def render(self) -> np.ndarray:
        """The frames of every sub-env now, ``uint8 [N, H, W, 3]``."""
        fn = self._render_fn()
        try:
            frames = fn()
        except Exception:  # gymnasium: not reset yet (ValueError, ResetNeeded): reset, retry
            getattr(self._owner.base_env, "env", self._owner.base_env).reset()
            frames = fn()
        if frames is None:
            raise LoggerInputError(
                "PixelRenderTransform: render() returned None: build the env with "
                "render_mode='rgb_array'"
            )
        frames = np.asarray(frames if not isinstance(frames, np.ndarray) or frames.ndim == 4
                            else frames[None])
        if self.preproc is not None:
            frames = np.asarray(self.preproc(frames))
        if frames.ndim != 4 or frames.shape[-1] != 3 or frames.dtype != np.uint8:
            raise LoggerInputError(
                "PixelRenderTransform: expected uint8 frames [N, H, W, 3] from render(), "
                f"received {frames.dtype} of shape {frames.shape}"
            )
        return frames

    def transform_observation_spec(self, spec: Composite) -> Composite:
        frames = self.render()
        self._frame_shape = tuple(frames.shape[1:])
        for key in self.out_keys:
            spec[key] = Unbounded((*spec.shape, *self._frame_shape), spec.device, torch.uint8)
        return spec

    def bind(self, root: TensorDictBase, next: TensorDictBase) -> tuple:
        shape = (*root.batch_size, *self._frame_shape)
        self._views = []
        for key in self.out_keys:
            root, r = _leaf(root, key, shape, torch.uint8)
            next, n = _leaf(next, key, shape, torch.uint8)
            self._views += [r.view(-1, *self._frame_shape).numpy(),
                            n.view(-1, *self._frame_shape).numpy()]
        return root, next

    def _write(self) -> None:
        frames = self.render()
        for view in self._views:
            view[...] = frames

    def on_reset(self, mask: torch.Tensor | None) -> None:
        self._write()

    def on_step(self) -> None:
        self._write()


class VideoRecorder(Transform):
    """Keep the frames of ``in_keys`` (default ``"pixels"``) at every reset and step and
    hand them to ``logger.log_video`` on :meth:`dump`, as TorchRL's ``VideoRecorder``.

    Frames are kept at a full reset (a rollout's start) and after every step. Frames may
    be ``[*B, H, W, C]`` or ``[*B, C, H, W]`` (C = 1 or 3, ``uint8``). A batch
    of sub-envs is tiled into one grid per step (``make_grid``), else sub-env 0 is kept.

    Args:
        logger: where the video goes.
        tag: the video's name in the logger.
        in_keys: the frames' key (one).
        skip: keep one frame in ``skip`` (default 1: our envs are vector envs, and TorchRL
            uses 1 for those).
        center_crop: crop a centred square of this size.
        make_grid: tile the sub-envs (default: when there is more than one).
        out_keys: accepted for TorchRL's signature; frames are not rewritten.
        fps: frames per second (default: the logger's).
        **kwargs: passed to ``logger.log_video``.

    Raises:
        LoggerInputError: ``logger`` is not a Logger, or bad ``skip`` / ``center_crop``.
        VideoFormatError: the frames' layout or dtype at the first frame.

    Examples:
        >>> import tempfile, pathlib
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> from rl_record import CSVLogger, read_video
        >>> with tempfile.TemporaryDirectory() as d:
        ...     logger = CSVLogger("exp", log_dir=d, video_format="mp4")
        ...     recorder = VideoRecorder(logger, tag="eval")
        ...     env = TransformedEnv(GymEnv("CartPole-v1", render_mode="rgb_array"),
        ...                          PixelRenderTransform())
        ...     env = env.append_transform(recorder)
        ...     _ = env.rollout(4)
        ...     recorder.dump()
        ...     env.close()
        ...     read_video(pathlib.Path(d) / "exp/videos/eval_0.mp4").shape
        (5, 400, 600, 3)
    """

    def __init__(self, logger: Logger, tag: str, in_keys: Sequence[Any] | None = None,
                 skip: int | None = None, center_crop: int | None = None,
                 make_grid: bool | None = None, out_keys: Sequence[Any] | None = None,
                 fps: int | None = None, **kwargs: Any) -> None:
        if not isinstance(logger, Logger):
            raise LoggerInputError(
                f"VideoRecorder: logger must be an rl_record Logger, received "
                f"{type(logger).__name__}"
            )
        skip = 1 if skip is None else skip
        if not isinstance(skip, int) or skip < 1:
            raise LoggerInputError(f"VideoRecorder: skip must be an int >= 1, received {skip!r}")
        if center_crop is not None and (not isinstance(center_crop, int) or center_crop < 1):
            raise LoggerInputError(
                f"VideoRecorder: center_crop must be a positive int or None, got {center_crop!r}"
            )
        super().__init__(list(in_keys) if in_keys is not None else ["pixels"], out_keys)
        self.logger, self.tag, self.skip, self.center_crop = logger, tag, skip, center_crop
        self.make_grid, self.fps, self.kwargs = make_grid, fps, kwargs
        self.obs: list[torch.Tensor] = []
        self.count = 0
        self._calls = 0

    def bind(self, root: TensorDictBase, next: TensorDictBase) -> tuple:
        self._root, self._next = root.get(self.in_keys[0]), next.get(self.in_keys[0])
        return root, next

    def _frame(self, pixels: torch.Tensor) -> torch.Tensor:
        """One ``uint8 [C, H, W]`` frame from ``[*B, H, W, C]`` / ``[*B, C, H, W]``."""
        if pixels.dtype != torch.uint8 or pixels.ndim < 3:
            raise VideoFormatError(
                f"VideoRecorder: {self.in_keys[0]!r} must be uint8 frames [*B, H, W, C] or "
                f"[*B, C, H, W], received {pixels.dtype} of shape {tuple(pixels.shape)}"
            )
        frames = pixels.reshape(-1, *pixels.shape[-3:])
        if frames.shape[-1] in (1, 3) and frames.shape[-3] not in (1, 3):
            frames = frames.permute(0, 3, 1, 2)
        if self.center_crop is not None:
            c, (h, w) = self.center_crop, frames.shape[-2:]
            top, left = max((h - c) // 2, 0), max((w - c) // 2, 0)
            frames = frames[..., top : top + c, left : left + c]
        grid = self.make_grid if self.make_grid is not None else frames.shape[0] > 1
        if not grid:
            return frames[0].clone()
        n, (ch, h, w) = frames.shape[0], frames.shape[1:]
        cols = math.ceil(math.sqrt(n))
        rows = math.ceil(n / cols)
        canvas = frames.new_zeros(rows * cols, ch, h, w)
        canvas[:n] = frames
        return canvas.view(rows, cols, ch, h, w).permute(2, 0, 3, 1, 4).reshape(ch, rows * h,
                                                                                cols * w)

    def _keep(self, pixels: torch.Tensor) -> None:
        if self._calls % self.skip == 0:
            self.obs.append(self._frame(pixels))
        self._calls += 1

    def on_reset(self, mask: torch.Tensor | None) -> None:
        if mask is None:  # a rollout's start; a sub-env's reset shows in the next step
            self._keep(self._root)

    def on_step(self) -> None:
        self._keep(self._next)

    def dump(self, suffix: str | None = None) -> None:
        """Log the kept frames as one video (``[1, T, C, H, W]``) and forget them."""
        if not self.obs:
            return
        tag = f"{self.tag}_{suffix}" if suffix else self.tag
        kwargs = dict(self.kwargs)
        if self.fps is not None:
            kwargs["fps"] = self.fps
        video = torch.stack(self.obs).unsqueeze(0)
        self.obs, self._calls = [], 0
        self.logger.log_video(tag, video, step=self.count, **kwargs)
        self.count += 1
