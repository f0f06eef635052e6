"""What ``AsyncBatchedCollector`` builds once, before any worker starts.

From one env (the template) and the user's policy: the slots every env steps into, the
policy prepared and probed on one env's input (its output keys checked), and the templates
of one recorded frame for the frame store. ``_async_batched`` runs what these build.
"""

from __future__ import annotations

from typing import Any

import torch
from rl_envs import FastPathEnv
from tensordict import TensorDictBase

from rl_collectors._async_envs import make_env
from rl_collectors._inference_server import flat
from rl_collectors._keys import NEXT
from rl_collectors._layout import nested
from rl_collectors._options import CollectorOptions
from rl_collectors._policy import BatchedRandomPolicy, find_outputs, prepare_policy
from rl_collectors.exceptions import CollectorError

__all__ = ["frame_templates", "make_envs", "make_slots", "probe_policy"]

Slots = tuple[TensorDictBase, TensorDictBase, torch.Tensor]


def make_envs(fns: list) -> list[Any]:
    """Build every env here (threading backend); close the built ones if one fails."""
    envs: list[Any] = []
    try:
        for fn in fns:
            envs.append(make_env(fn))
    except BaseException:
        for env in envs:
            env.close()
        raise
    return envs


def make_slots(env: FastPathEnv, num_envs: int) -> Slots:
    """``num_envs`` copies of ``env``'s root and ``"next"`` buffers and of its action.

    Raises:
        ValueError: the env has more than one action key.
    """
    if len(env.action_keys) != 1:
        raise ValueError(
            f"create_env_fn: expected an env with one action key, got {env.action_keys}"
        )
    root, nxt = env.buffers()

    def stack(td: TensorDictBase) -> TensorDictBase:
        return td.unsqueeze(0).expand(num_envs, *td.batch_size).clone()

    action = env.full_action_spec.zero().get(env.action_key)
    return stack(root), stack(nxt), action.unsqueeze(0).expand(num_envs, *action.shape).clone()


def probe_policy(
    policy: Any, env: Any, slots: Slots, options: CollectorOptions, device: torch.device
) -> tuple[Any, list[Any], TensorDictBase]:
    """Prepare the policy and probe it once on one env's input.

    Returns:
        The prepared policy (a batched random policy when ``policy`` is None), its output
        keys, and the probe's outputs (on the CPU).

    Raises:
        CollectorError: the policy writes under ``"next"``, or not the env's action
            (dtype and shape).
    """
    action, action_key = slots[2], env.action_key
    act_shape = action.shape[1 + len(env.batch_size):]
    if policy is None:
        prepared: Any = BatchedRandomPolicy(env.action_spec, action_key, act_shape)
    else:
        prepared = prepare_policy(policy, env, device)
    probe = flat(slots[0], action.shape[0])[:1].clone().to(device)
    out_keys = find_outputs(
        prepared, probe, [action_key], options.interaction, options.trust_policy
    )
    if any(k[0] == NEXT for k in out_keys):
        raise CollectorError(
            f"policy: writes keys under 'next' {out_keys} (recurrent state), not supported here"
        )
    out = probe.get(nested(action_key))
    if out.dtype != action.dtype or tuple(out.shape[1:]) != tuple(act_shape):
        raise CollectorError(
            f"policy: expected the action {action_key!r} as {action.dtype} "
            f"of shape [k, *{tuple(act_shape)}] "
            f"for k envs, got {out.dtype} of shape {tuple(out.shape)}"
        )
    return prepared, out_keys, probe.select(*out_keys).to("cpu")


def frame_templates(
    slots: Slots, out_keys: list[Any], probe: TensorDictBase
) -> tuple[TensorDictBase, TensorDictBase]:
    """One frame's root (with the policy's outputs) and ``"next"``, for the frame store."""
    num_envs = slots[2].shape[0]
    root = flat(slots[0], num_envs)[0].clone()
    for key in out_keys:
        root.set(key, probe.get(key)[0].clone())
    return root, flat(slots[1], num_envs)[0].clone()
