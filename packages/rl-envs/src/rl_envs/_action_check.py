"""The action check behind ``EnvBase.validate_action``: shape and dtype on every call,
values (bounds, categories) on the first steps; nothing is ever cast silently."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDictBase

from rl_envs._specs_discrete import OneHot
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
            _assert_is_in(spec, action, env.action_key)
        if env.action_checks_left > 0:
            env.action_checks_left -= 1
            _assert_is_in(spec, action, env.action_key)
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
            _assert_is_in(spec, value, key)
    env.action_checks_left -= 1


def _assert_is_in(spec: Any, value: torch.Tensor, key: Any) -> None:
    """``spec.assert_is_in``; an integer action given to a one-hot spec (its shape without
    the last dim) is told how to get integer actions."""
    try:
        spec.assert_is_in(value, key, InvalidActionError)
    except InvalidActionError as err:
        if isinstance(spec, OneHot) and tuple(value.shape) == tuple(spec.shape[:-1]):
            raise InvalidActionError(
                f"{err} (the action spec is OneHot: pass one-hot actions of shape "
                f"{tuple(spec.shape)}, or build the env with categorical_action_encoding=True "
                "for integer actions, TorchRL's Categorical spec)"
            ) from None
        raise
