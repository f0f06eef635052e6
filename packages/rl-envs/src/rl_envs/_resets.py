"""The one place a reset is decided and applied: :func:`reset_where`.

Every reset of a sub-env goes through it: a full reset (the start of a rollout or of a
collector's batch, ``EnvBase.reset``), the sub-envs that finished a step (an env without
gymnasium's same-step autoreset, a simple ``_step``/``_reset`` env), those a transform
ends (``StepCounter``'s ``max_steps``) and those the collector's ``max_frames_per_traj``
truncates. The rule: a sub-env resets right after the step that finished it, so the
env's root buffer already holds the next episode's first state when the next step starts;
the others keep stepping. What a reset does for one env is that env's ``fast_reset``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from tensordict import TensorDictBase

__all__ = ["reset_where"]


def reset_where(env: Any, mask: torch.Tensor | None = None) -> TensorDictBase | None:
    """Reset ``env``'s sub-envs where ``mask`` is set, every sub-env when it is ``None``.

    Args:
        env: a :class:`~rl_envs.FastPathEnv` (any env of this package).
        mask: a boolean tensor or numpy array over ``env.batch_size`` (an array is taken
            without a copy), or ``None`` for all sub-envs.

    Returns:
        The env's root buffer after the reset, or ``None`` when ``mask`` selects nothing
        (no reset happened).

    Examples:
        >>> import torch
        >>> from rl_envs import GymEnv, reset_where
        >>> env = GymEnv("CartPole-v1", num_envs=2)
        >>> root = reset_where(env)
        >>> root["observation"].shape
        torch.Size([2, 4])
        >>> reset_where(env, torch.zeros(2, dtype=torch.bool)) is None
        True
        >>> env.close()
    """
    if mask is None:
        return env.fast_reset(None)
    if isinstance(mask, np.ndarray):  # numpy's count costs a fraction of a torch op here
        if not np.count_nonzero(mask):
            return None
        return env.fast_reset(torch.from_numpy(mask))
    if not mask.any():
        return None
    return env.fast_reset(mask)
