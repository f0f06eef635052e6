"""Small helpers shared by the fast paths: masks, leaf lists, numpy views of CPU buffers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDictBase

if TYPE_CHECKING:
    from rl_envs._env import EnvBase

from rl_envs._keys import DONE, NEXT, RESET, TERMINATED, TRUNCATED

__all__ = [
    "as_numpy",
    "batch_mask",
    "complete_done",
    "masked_assign",
    "merge_reset",
    "np_view",
    "set_next",
    "zero_buffers",
]


def np_view(t: torch.Tensor) -> np.ndarray | None:
    """A numpy array sharing memory with ``t`` (CPU only), else ``None``."""
    if t.device.type != "cpu" or t.requires_grad:
        return None
    return t.numpy()


def as_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


def batch_mask(mask: Any, batch_size: torch.Size, key: str = RESET) -> torch.Tensor:
    """Normalise a reset/done mask to a bool tensor of shape ``batch_size``.

    Accepts ``[*B]`` or ``[*B, 1]`` (the done-spec shape).
    """
    mask = torch.as_tensor(mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"{key!r}: expected a bool mask, received dtype {mask.dtype}")
    if mask.shape == batch_size:
        return mask
    if mask.shape == (*batch_size, 1):
        return mask.reshape(batch_size)
    raise ValueError(
        f"{key!r}: expected a mask of shape {tuple(batch_size)} or {(*batch_size, 1)}, "
        f"received {tuple(mask.shape)}"
    )


def masked_assign(dst: torch.Tensor, src: torch.Tensor, mask: torch.Tensor) -> None:
    """``dst[mask] = src[mask]`` in place, ``mask`` shaped like the leading dims of dst."""
    m = mask.reshape(*mask.shape, *([1] * (dst.ndim - mask.ndim)))
    torch.where(m.to(dst.device), src.to(dst.device, dst.dtype), dst, out=dst)


def complete_done(next_td: TensorDictBase, done_shape: torch.Size) -> TensorDictBase:
    """Fill in the missing done flags: ``done = terminated | truncated``.

    An env that reports only ``done`` gets ``terminated = done`` and ``truncated = False``
    (the TorchRL convention); one that reports ``terminated`` and/or ``truncated`` gets
    ``done`` as their union. Shapes are normalised to ``done_shape`` (``[*B, 1]``).
    """
    keys = next_td.keys()
    present = {
        k: next_td.get(k).reshape(done_shape).bool()
        for k in (DONE, TERMINATED, TRUNCATED)
        if k in keys
    }
    if not present:
        raise KeyError(f"the step output has none of the done keys {(DONE, TERMINATED, TRUNCATED)}")
    if TERMINATED not in present:
        present[TERMINATED] = (
            present[DONE] if DONE in present else torch.zeros_like(present[TRUNCATED])
        )
    if TRUNCATED not in present:
        present[TRUNCATED] = torch.zeros_like(present[TERMINATED])
    union = present[TERMINATED] | present[TRUNCATED]
    present[DONE] = union | present[DONE] if DONE in present else union
    for k, v in present.items():
        next_td.set(k, v)
    return next_td


def exclude_next(td: TensorDictBase) -> TensorDictBase:
    return td.exclude(NEXT, RESET)


def zero_buffers(env: EnvBase) -> tuple[TensorDictBase, TensorDictBase]:
    """Fresh zero ``(root, next)`` buffers from ``env``'s specs: root holds the observation,
    state and done keys; next the observation, reward and done keys."""
    root = env.observation_spec.zero()
    root.update(env.state_spec.zero())
    root.update(env.full_done_spec.zero())
    nxt = env.observation_spec.zero()
    nxt.update(env.full_reward_spec.zero())
    nxt.update(env.full_done_spec.zero())
    return root, nxt


def merge_reset(
    tensordict: TensorDictBase, root: TensorDictBase, mask: torch.Tensor
) -> TensorDictBase:
    """A copy of ``tensordict`` (without ``"_reset"``/``"next"``) whose root entries take
    the values of ``root`` on the sub-envs selected by ``mask`` (a partial reset's output)."""
    out = tensordict.exclude(RESET, NEXT).clone()
    for key in root.keys(True, True):
        new = root.get(key)
        if key in out.keys(True, True):
            value = out.get(key).clone()
            masked_assign(value, new, mask)
            out.set(key, value)
        else:
            out.set(key, new.clone())
    return out


def set_next(tensordict: TensorDictBase, env_next: TensorDictBase) -> list[Any]:
    """Write ``env_next`` under ``"next"``, keeping what the policy already put there.

    Returns the keys of ``"next"`` that the env did not produce.
    """
    if NEXT not in tensordict:
        tensordict.set(NEXT, env_next)
        return []
    existing = tensordict.get(NEXT)
    env_keys = set(env_next.keys(True, True))
    extra = [k for k in existing.keys(True, True) if k not in env_keys]
    existing.update(env_next)
    return extra
