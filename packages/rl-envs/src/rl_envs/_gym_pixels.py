"""Pixel observations of gymnasium envs, as TorchRL's ``from_pixels`` / ``pixels_only``.

Each simulator is wrapped, before vectorisation, in gymnasium's ``AddRenderObservation``,
so the rendered frame is part of the observation: a finished sub-env's final frame comes
with its final observation (``SAME_STEP``'s ``final_obs``), as the state does. Frames are
uint8 ``[H, W, 3]`` under ``"pixels"``; the state stays under ``"observation"`` unless
``pixels_only``. Rendering needs ``render_mode="rgb_array"`` (set by ``GymEnv``); MuJoCo
renders headless with ``MUJOCO_GL=egl`` or ``osmesa``.

An env whose own observation is an RGB frame (ALE's ``"ALE/Pong-v5"``, ``CarRacing``) has it
under ``"pixels"`` too, by TorchRL's rule (:func:`observation_key`).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from rl_envs._keys import OBSERVATION

__all__ = ["PIXELS", "add_pixels", "observation_key", "pixel_wrapper"]

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


def _is_rgb_frame(space: Any) -> bool:
    """TorchRL's test for a frame: a ``Box`` of rank 3, last dim 3, bounds 0 and 255."""
    if type(space).__name__ != "Box" or len(space.shape) != 3 or space.shape[-1] != 3:
        return False
    return bool(np.all(np.asarray(space.low) == 0) and np.all(np.asarray(space.high) == 255))


def observation_key(space: Any, obs_key: str | None) -> str:
    """The key of a non-dict observation of a single simulator's ``space``.

    Args:
        space: the observation space of one simulator (``single_observation_space``).
        obs_key: the key asked for, or ``None`` for TorchRL's rule: ``"pixels"`` for an
            RGB frame (a ``Box`` of rank 3, last dim 3, bounds 0 and 255), else
            ``"observation"``.

    Returns:
        The key the observation is stored under.

    Raises:
        TypeError: ``obs_key`` neither ``None`` nor a non-empty string.
    """
    if obs_key is not None:
        if not isinstance(obs_key, str) or not obs_key:
            raise TypeError(
                "GymWrapper: obs_key must be None (TorchRL's rule: 'pixels' for an RGB frame, "
                f"else 'observation') or a non-empty str, received {obs_key!r}"
            )
        return obs_key
    return PIXELS if _is_rgb_frame(space) else OBSERVATION
