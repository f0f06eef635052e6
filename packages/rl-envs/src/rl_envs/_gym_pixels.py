"""Pixel observations of gymnasium envs, as TorchRL's ``from_pixels`` / ``pixels_only``.

Each simulator is wrapped, before vectorisation, in gymnasium's ``AddRenderObservation``,
so the rendered frame is part of the observation: a finished sub-env's final frame comes
with its final observation (``SAME_STEP``'s ``final_obs``), as the state does. Frames are
uint8 ``[H, W, 3]`` under ``"pixels"``; the state stays under ``"observation"`` unless
``pixels_only``. Rendering needs ``render_mode="rgb_array"`` (set by ``GymEnv``); MuJoCo
renders headless with ``MUJOCO_GL=egl`` or ``osmesa``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from rl_envs._keys import OBSERVATION

__all__ = ["PIXELS", "add_pixels", "pixel_wrapper"]

PIXELS = "pixels"
"""TorchRL's key for rendered frames."""


def _wrap(env: Any, *, pixels_only: bool) -> Any:
    from gymnasium.wrappers import AddRenderObservation

    mode = getattr(env, "render_mode", None)
    if mode != "rgb_array":
        raise ValueError(
            f"from_pixels=True: the env must render with render_mode='rgb_array', received "
            f"render_mode={mode!r} (gymnasium.make(name, render_mode='rgb_array'))"
        )
    return AddRenderObservation(
        env, render_only=pixels_only, render_key=PIXELS, obs_key=OBSERVATION
    )


def pixel_wrapper(pixels_only: bool) -> Any:
    """The wrapper ``gym.make_vec(..., wrappers=[...])`` applies to each sub-env."""
    return partial(_wrap, pixels_only=pixels_only)


def add_pixels(env: Any, pixels_only: bool) -> Any:
    """``env`` (one ``gymnasium.Env``) with its rendered frame in its observation."""
    return _wrap(env, pixels_only=pixels_only)
