"""Where a TorchRL name lives here: by its module path first, then by name."""

from __future__ import annotations

from rl_migrate._names import EXPORTS, NAMES
from rl_migrate._table import PATHS

__all__ = ["resolve", "resolve_module"]


def resolve(module: str, name: str) -> str | None:
    """The module here to import ``name`` from, for ``from <module> import <name>``.

    The module that keeps TorchRL's path when it exports the name, else the package that
    exports the name, else ``None`` (no counterpart).

    Examples:
        >>> resolve("torchrl.envs.libs.gym", "GymEnv")
        'rl_envs.libs.gym'
        >>> resolve("torchrl.envs.utils", "ExplorationType")
        'rl_modules'
        >>> resolve("torchrl.envs", "NoSuchName") is None
        True
    """
    target = PATHS.get(module)
    if target is not None and name in EXPORTS.get(target, ()):
        return target
    return NAMES.get(name)


def resolve_module(module: str) -> str | None:
    """The module here for ``import <module>`` (``None``: split or no counterpart).

    Examples:
        >>> resolve_module("torchrl.envs.libs.gym")
        'rl_envs.libs.gym'
    """
    return PATHS.get(module)
