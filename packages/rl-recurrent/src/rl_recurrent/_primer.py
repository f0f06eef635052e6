"""The env transform that declares and zero-fills hidden states (needs rl-envs)."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

__all__ = ["make_primer"]


def make_primer(keys: Sequence[Any], shape: tuple[int, ...]) -> Any:
    """Build ``rl_envs.TensorDictPrimer`` with a zero ``Unbounded(shape)`` spec per key.

    Raises:
        ImportError: if rl-envs (or its ``TensorDictPrimer``) is not installed.
    """
    if importlib.util.find_spec("rl_envs") is None:
        raise ImportError(
            "make_tensordict_primer() needs rl-envs: pip install 'rl-recurrent[envs]'"
        )
    import rl_envs

    primer_cls = getattr(rl_envs, "TensorDictPrimer", None)
    if primer_cls is None:
        raise ImportError(
            "make_tensordict_primer() needs rl_envs.TensorDictPrimer, which this rl-envs "
            f"(version {getattr(rl_envs, '__version__', '?')}) does not provide"
        )
    specs = {key: rl_envs.Unbounded(shape=shape) for key in keys}
    return primer_cls(specs, default_value=0.0)
