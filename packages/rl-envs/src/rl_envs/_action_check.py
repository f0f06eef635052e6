"""The action check behind ``EnvBase.validate_action``: shape and dtype on every call,
values (bounds, categories) on the first steps; nothing is ever cast silently."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from rl_envs.exceptions import InvalidActionError

if TYPE_CHECKING:
    from rl_envs._env import EnvBase

__all__ = ["action_needs_check", "check_action"]


def action_needs_check(env: EnvBase, action: Any) -> bool:
    """Whether a fast step must run :func:`check_action` on ``action``: value checks are
    still due, or ``action`` is not a plain tensor of the action leaf's dtype and shape."""
    spec = env._action_leaf
    return (
        env.action_checks_left > 0
        or spec is None
        or type(action) is not torch.Tensor
        or action.dtype != spec.dtype
        or action.shape != spec.shape
    )


def check_action(env: EnvBase, action: Any) -> None:
    """Raise :class:`InvalidActionError` naming the key when ``action`` breaks ``env``'s spec.

    Counts down ``env.action_checks_left`` (the value checks still to do).
    """
    if isinstance(action, torch.Tensor):
        spec = env._action_leaf
        if spec is None:
            raise InvalidActionError(
                f"expected a TensorDict holding the action keys {env.action_keys}, "
                "received a tensor"
            )
        if action.dtype != spec.dtype or action.shape != spec.shape:
            spec.assert_is_in(action, env.action_key, InvalidActionError)
        if env.action_checks_left > 0:
            env.action_checks_left -= 1
            spec.assert_is_in(action, env.action_key, InvalidActionError)
        return
    if not isinstance(action, TensorDictBase):
        raise InvalidActionError(
            f"{env.action_key!r}: expected a torch.Tensor, received {type(action).__name__}"
        )
    for key in env.action_keys:
        if key not in action.keys(True, True):
            raise InvalidActionError(
                f"{key!r}: missing from the input (action keys: {env.action_keys})"
            )
        spec = env.full_action_spec[key]
        value = action.get(key)
        if env.action_checks_left > 0 or value.dtype != spec.dtype or value.shape != spec.shape:
            spec.assert_is_in(value, key, InvalidActionError)
    env.action_checks_left -= 1
