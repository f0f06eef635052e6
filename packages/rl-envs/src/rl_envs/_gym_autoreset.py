"""Gymnasium helpers behind ``GymWrapper``: partial resets of vector envs (the autoreset
adapters) and the copies of numpy results into the buffers.

``NEXT_STEP`` and ``DISABLED`` autoreset modes need a partial reset (only the finished
sub-envs) so that no reset step reaches the data: built-in Sync/Async vector envs and
those in ``RESET_MASK_ENVS`` take ``reset(options={"reset_mask": m})``; numpy-vectorised
envs that lack it get an adapter from ``ADAPTERS`` (keyed by the class's qualified name).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = [
    "ADAPTERS",
    "RESET_MASK_ENVS",
    "PartialReset",
    "keeps_final_obs",
    "leaf",
    "partial_reset_fn",
    "transfer",
]

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


RESET_MASK_ENVS = frozenset({"ale_py.vector_env.AtariVectorEnv"})
"""Vector envs (qualified class names) whose ``reset(options={"reset_mask": m})`` resets
only the masked sub-envs, returns every sub-env's observation and cancels their pending
``NEXT_STEP`` autoreset (ALE >= 0.11's C++ vector env)."""

ADAPTERS: dict[str, Callable[[Any], PartialReset]] = {
    "gymnasium.envs.classic_control.cartpole.CartPoleVectorEnv": _cartpole_partial_reset,
}


def partial_reset_fn(venv: Any, declared: bool | None) -> PartialReset | None:
    """``reset(mask)`` for ``venv`` (see ``PartialReset``), or None where it cannot.

    ``declared`` is ``GymWrapper``'s ``partial_reset``: True trusts ``reset_mask``, False
    refuses it, None detects it.
    """
    import gymnasium as gym

    base = venv.unwrapped
    name = f"{type(base).__module__}.{type(base).__qualname__}"
    builtin = isinstance(base, (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv))
    if declared or (declared is None and (builtin or name in RESET_MASK_ENVS)):
        return lambda mask: (*venv.reset(options={"reset_mask": mask}), False)
    if declared is False:
        return None
    adapter = ADAPTERS.get(name)
    if adapter is not None and base is venv:
        return adapter(base)
    return None


def keeps_final_obs(venv: Any, partial_reset: bool | None = None) -> bool:
    """Whether ``GymWrapper`` can give the real final observation of ``venv``'s finished
    sub-envs: it autoresets in ``SAME_STEP`` mode, or it can reset a subset of them."""
    import gymnasium as gym

    mode = venv.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
    if gym.vector.AutoresetMode(mode) == gym.vector.AutoresetMode.SAME_STEP:
        return True
    return partial_reset_fn(venv, partial_reset) is not None


def leaf(obs: Any, path: tuple) -> Any:
    for p in path:
        obs = obs[p]
    return obs


def transfer(dst: np.ndarray, src: Any) -> None:
    """``dst[...] = src``; column by column for Fortran-ordered 2-D sources (numpy's
    transposing copy is ~5x slower than 2-D column copies, e.g. numpy-vectorised CartPole)."""
    if (
        type(src) is np.ndarray
        and src.ndim == 2
        and not src.flags.c_contiguous
        and src.shape[1] <= 16
    ):
        for j in range(src.shape[1]):
            dst[:, j] = src[:, j]
    else:
        np.copyto(dst, src)
