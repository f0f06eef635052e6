"""How ``GymEnv`` builds its gymnasium vector env: the vectorization mode and its arguments.

``vectorization_mode=None`` follows gymnasium's own choice (``gym.make_vec``'s default):
the env's vector entry point where it registers one (CartPole's numpy env, ALE's C++
``AtariVectorEnv``), else ``"sync"``. Two refinements keep the wrapper's guarantees:

- ``vector_kwargs`` configure gymnasium's ``SyncVectorEnv`` / ``AsyncVectorEnv`` only, so
  when they are given the default is ``"sync"``;
- a vector env that cannot give the final observation of a finished sub-env (it
  autoresets on the next step and cannot reset a subset of its sub-envs) is closed and
  replaced by ``"sync"``, with a log line saying so. An explicit ``"vector_entry_point"``
  raises instead (see ``GymWrapper``).

Every vectorizer is asked for ``SAME_STEP`` autoreset where it takes the argument: the
final observation then comes with the step, without a second call.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any

from rl_envs._gym_autoreset import keeps_final_obs

__all__ = ["MODES", "ensure_registered", "make_vector_env"]

logger = logging.getLogger(__name__)

MODES = ("sync", "async", "vector_entry_point")

_NAMESPACE_MODULES = {"ALE": ("ale_py", "atari")}
"""Env id namespace -> (module that registers it on import, rl-envs extra installing it)."""


def ensure_registered(env_name: str) -> Any:
    """The ``EnvSpec`` of ``env_name``, importing the package that registers its namespace.

    gymnasium 1.x no longer registers plugins on its own: ``"ALE/Breakout-v5"`` needs
    ``import ale_py`` first. A missing package is named with the extra that installs it.
    """
    import gymnasium as gym

    namespace = env_name.split("/", 1)[0] if "/" in env_name else None
    if namespace in _NAMESPACE_MODULES and env_name not in gym.registry:
        module, extra = _NAMESPACE_MODULES[namespace]
        if importlib.util.find_spec(module) is None:
            raise ImportError(
                f"GymEnv: {env_name!r} needs the {module!r} package; "
                f"install it with `pip install rl-envs[{extra}]`"
            )
        gym.register_envs(importlib.import_module(module))
    return gym.spec(env_name)


def _vector_creator(spec: Any) -> Callable[..., Any]:
    from gymnasium.envs.registration import load_env_creator

    entry = spec.vector_entry_point
    return entry if callable(entry) else load_env_creator(entry)


def _takes(fn: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # builtins without a signature
        return False


def resolve_mode(spec: Any, mode: str | None, vector_kwargs: Mapping[str, Any] | None) -> str:
    """The explicit mode, or gymnasium's default for ``spec`` (``None``; see the module)."""
    if mode is not None:
        if mode not in MODES:
            raise ValueError(
                f"GymEnv: vectorization_mode must be None, 'sync', 'async' or "
                f"'vector_entry_point', received {mode!r}"
            )
        if mode == "vector_entry_point" and spec.vector_entry_point is None:
            raise ValueError(
                f"GymEnv: vectorization_mode='vector_entry_point', but {spec.id!r} registers "
                "no vector entry point; use None (gymnasium's choice), 'sync' or 'async'"
            )
        return mode
    usable = spec.vector_entry_point is not None and not spec.additional_wrappers
    return "vector_entry_point" if usable and not vector_kwargs else "sync"


def _vector_args(
    spec: Any, mode: str, vector_kwargs: Mapping[str, Any] | None, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """``vector_kwargs`` for sync/async (SAME_STEP, no copy, spawn); for the vector entry
    point, SAME_STEP is added to the env kwargs where its constructor takes it."""
    import gymnasium as gym

    same_step = gym.vector.AutoresetMode.SAME_STEP
    vk = dict(vector_kwargs or {})
    if mode in ("sync", "async"):
        vk.setdefault("autoreset_mode", same_step)
        vk.setdefault("copy", False)
        if mode == "async":
            vk.setdefault("context", "spawn")
    elif spec.vector_entry_point is not None and _takes(_vector_creator(spec), "autoreset_mode"):
        kwargs.setdefault("autoreset_mode", same_step)
    return vk


def make_vector_env(
    env_name: str,
    num_envs: int,
    mode: str | None,
    vector_kwargs: Mapping[str, Any] | None,
    kwargs: dict[str, Any],
    wrappers: list[Any] | None = None,
) -> tuple[Any, str]:
    """Build the vector env; returns it and the mode actually used.

    Args:
        env_name: a registered gymnasium id.
        num_envs: number of sub-envs.
        mode: ``None`` (gymnasium's default, see the module) or one of :data:`MODES`.
        vector_kwargs: arguments of ``SyncVectorEnv`` / ``AsyncVectorEnv``.
        kwargs: arguments of the env (or of the vector entry point); not modified.
        wrappers: gymnasium wrappers applied to each sub-env (sync/async only; with
            ``mode=None`` they make the mode ``"sync"``).

    Raises:
        ValueError: ``wrappers`` with ``mode="vector_entry_point"``.
    """
    import gymnasium as gym

    spec = ensure_registered(env_name)
    if wrappers and mode == "vector_entry_point":
        raise ValueError(
            "GymEnv: from_pixels=True wraps each sub-env, which a vector entry point does not "
            "allow; use vectorization_mode=None, 'sync' or 'async'"
        )
    chosen = "sync" if wrappers and mode is None else resolve_mode(spec, mode, vector_kwargs)
    env_kwargs = dict(kwargs)
    vk = _vector_args(spec, chosen, vector_kwargs, env_kwargs)
    venv = gym.make_vec(
        env_name,
        num_envs=num_envs,
        vectorization_mode=chosen,
        vector_kwargs=vk or None,
        **({"wrappers": wrappers} if wrappers else {}),
        **env_kwargs,
    )
    if mode is None and chosen == "vector_entry_point" and not keeps_final_obs(venv):
        logger.info(
            "GymEnv(%r): its vector env %s cannot report final observations; using 'sync'",
            env_name,
            type(venv.unwrapped).__name__,
        )
        venv.close()
        return make_vector_env(env_name, num_envs, "sync", vector_kwargs, kwargs)
    return venv, chosen
