"""The fast pair derived from the simple pair: what ``EnvBase.fast_reset``/``fast_step``
do for an env that implements only ``_reset(td)``/``_step(td)`` (TorchRL style).

Correct, not the fastest: ``_reset``/``_step`` build a TensorDict per call, copied here
into the env-owned buffers (see the ``EnvBase`` docstring for the contract).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from tensordict import TensorDict, TensorDictBase

from rl_envs._buffers import complete_done, masked_assign
from rl_envs._keys import DONE, DONE_KEYS, RESET
from rl_envs._resets import reset_where

if TYPE_CHECKING:
    from rl_envs._env import EnvBase

__all__ = ["fast_reset_from_simple", "fast_step_from_simple"]


def fast_reset_from_simple(env: EnvBase, reset_mask: torch.Tensor | None) -> TensorDictBase:
    """``env._reset`` on all (``None``) or the masked sub-envs, written into the root buffer."""
    root, _ = env.buffers()
    td = None
    if reset_mask is not None:
        td = TensorDict({RESET: reset_mask.reshape(*env.batch_size, 1)}, batch_size=env.batch_size)
    out = env._reset(td)
    for key in env.observation_spec.keys(True, True) + env.state_spec.keys(True, True):
        if key in out.keys(True, True):
            if reset_mask is None:
                root.get(key).copy_(out.get(key))
            else:
                masked_assign(root.get(key), out.get(key), reset_mask)
    for key in DONE_KEYS:
        root.get(key).zero_()
    return root


def fast_step_from_simple(env: EnvBase, action: Any) -> tuple[TensorDictBase, TensorDictBase]:
    """``env._step`` written into the buffers, then ``env.fast_reset`` of the finished sub-envs."""
    env.validate_action(action)
    root, nxt = env.buffers()
    if isinstance(action, torch.Tensor):
        td = TensorDict({env.action_key: action}, batch_size=env.batch_size)
    else:
        td = action
    for key in env.state_spec.keys(True, True):
        if key not in td.keys(True, True):
            td.set(key, root.get(key))
    out = complete_done(env._step(td), env.full_done_spec[DONE].shape)
    for key in nxt.keys(True, True):
        nxt.get(key).copy_(out.get(key))
    for key in env.observation_spec.keys(True, True):
        root.get(key).copy_(out.get(key))
    reset_where(env, nxt.get(DONE).reshape(env.batch_size))
    return nxt, root
