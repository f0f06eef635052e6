"""Gymnasium helpers behind ``GymWrapper``: partial resets of vector envs (the autoreset
adapters) and the copies of numpy results into the buffers.

``NEXT_STEP`` and ``DISABLED`` autoreset modes need a partial reset (only the finished
sub-envs) so that no reset step reaches the data: built-in Sync/Async vector envs take
``reset(options={"reset_mask": m})``; numpy-vectorised envs that lack it get an adapter
from ``ADAPTERS`` (keyed by the class's qualified name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ADAPTERS", "PartialReset", "leaf", "transfer"]

PartialReset = Callable[[np.ndarray], tuple[Any, dict, bool]]
"""``reset(mask) -> (obs, info, rows_only)``: ``obs`` holds every sub-env, or only the
reset ones (in order) when ``rows_only``."""


def _cartpole_partial_reset(venv: Any) -> PartialReset:
    """Partial reset for gymnasium's numpy ``CartPoleVectorEnv`` (its ``reset`` resets all).

    Draws the new states exactly as its own autoreset does (``np_random.uniform`` in
    ``[low, high]``) and clears its pending-reset flags.
    """

    def reset(mask: np.ndarray) -> tuple[Any, dict, bool]:
        n = int(mask.sum())
        new = venv.np_random.uniform(low=venv.low, high=venv.high, size=(4, n))
        venv.state[:, mask] = new
        venv.steps[mask] = 0
        venv.prev_done[mask] = False
        return new.T.astype(np.float32), {}, True

    return reset


ADAPTERS: dict[str, Callable[[Any], PartialReset]] = {
    "gymnasium.envs.classic_control.cartpole.CartPoleVectorEnv": _cartpole_partial_reset,
}


def leaf(obs: Any, path: tuple) -> Any:
    for p in path:
        obs = obs[p]
    return obs


def transfer(dst: np.ndarray, src: Any) -> None:
    """``dst[...] = src``; column by column for Fortran-ordered 2-D sources (numpy's
    transposing copy is ~5x slower than 2-D column copies, e.g. numpy-vectorised CartPole)."""
    if type(src) is np.ndarray and src.ndim == 2 and not src.flags.c_contiguous and src.shape[1] <= 16:
        for j in range(src.shape[1]):
            dst[:, j] = src[:, j]
    else:
        np.copyto(dst, src)
