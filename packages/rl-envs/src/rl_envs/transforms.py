"""``torchrl.envs.transforms``'s path: every transform :mod:`rl_envs` exports, with
``Compose``, ``Transform`` and ``TransformedEnv``.

The list is read from ``rl_envs.__all__`` (every exported ``Transform`` or
``TransformedEnv`` subclass), so a transform added to the package is here too.

Examples:
    >>> from rl_envs.transforms import StepCounter, UnsqueezeTransform
    >>> "ObservationNorm" in __all__
    True
"""

from __future__ import annotations

import rl_envs as _rl_envs
from rl_envs._transforms import Transform as _Transform
from rl_envs._transforms import TransformedEnv as _TransformedEnv


def _is_transform(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, (_Transform, _TransformedEnv))


__all__ = sorted(n for n in _rl_envs.__all__ if _is_transform(getattr(_rl_envs, n)))
globals().update({name: getattr(_rl_envs, name) for name in __all__})
