"""``CatFrames``: stack the last ``N`` observations along a dim (TorchRL's name and meaning).

The stack of each sub-env lives in the transform's root leaf. A step shifts it by one
frame into the ``"next"`` leaf and appends the new observation (two slice copies over
the whole batch); the root then takes the ``"next"`` stack, except on the sub-envs that
are done, which the env has reset: their root stack is refilled from their own reset
frame (a masked write over those rows only). Work runs on numpy views of CPU leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from rl_envs._composite import Composite
from rl_envs._keys import DONE, PIXELS
from rl_envs._specs import Bounded, TensorSpec
from rl_envs._transforms import Transform
from rl_envs._transforms_lib import new_leaf
from rl_envs._transforms_map import event_shape, key_list
from rl_envs.exceptions import SpecError

__all__ = ["CatFrames"]

_PADDINGS = ("same", "constant")


class _Stack:
    """Index helpers over one key's stack: frame ``k`` is a slice of ``size`` along ``dim``."""

    def __init__(self, src_r: Any, src_n: Any, dst_r: Any, dst_n: Any, dim: int, n: int):
        self.src_r, self.src_n, self.dst_r, self.dst_n = src_r, src_n, dst_r, dst_n
        self.size, self.n = src_r.shape[dim], n
        self.tail = (slice(None),) * (-dim - 1)

    def frames(self, first: int, last: int) -> tuple:
        return (Ellipsis, slice(first * self.size, last * self.size), *self.tail)


class CatFrames(Transform):
    """Concatenate the last ``N`` observations of each sub-env along ``dim``.

    TorchRL's ``CatFrames`` (frame stacking): the newest frame is last. A sub-env that
    resets (at ``reset``, after an auto-reset in a step, or a partial reset) starts its
    stack from its own first frame, repeated ``N`` times (``padding="same"``) or
    preceded by ``padding_value`` frames (``padding="constant"``); the other sub-envs are
    untouched. Both the root and ``"next"`` hold a stack, so ``("next", key)`` of a
    finished episode is the real last stack.

    Args:
        N: number of frames.
        dim: the (negative) dim of the observation to concatenate along: ``-3`` for
            ``(C, H, W)`` images (the result is ``(N * C, H, W)``), ``-1`` for vectors.
        in_keys: observation keys (default ``["pixels"]``, TorchRL's ``IMAGE_KEYS``).
        out_keys: where the stacks go (default: in place of ``in_keys``).
        padding: ``"same"`` or ``"constant"``.
        padding_value: the fill of ``"constant"`` padding.

    Raises:
        SpecError: when the env is built, if a key is not an observation key or has
            fewer than ``-dim`` dims after the batch dims.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> stack = CatFrames(3, dim=-1, in_keys=["observation"])
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), stack)
        >>> env.observation_spec["observation"].shape
        torch.Size([2, 12])
        >>> obs = env.reset()["observation"]
        >>> bool((obs[:, :4] == obs[:, 8:]).all())
        True
        >>> env.close()
    """

    def __init__(
        self,
        N: int,
        dim: int = -3,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        *,
        padding: str = "same",
        padding_value: float = 0.0,
    ):
        if not isinstance(N, int) or isinstance(N, bool) or N < 1:
            raise ValueError(f"CatFrames: N must be a positive int, received {N!r}")
        if not isinstance(dim, int) or dim >= 0:
            raise ValueError(
                f"CatFrames: dim must be a negative int (a dim of the observation), "
                f"received {dim!r}"
            )
        if padding not in _PADDINGS:
            raise ValueError(f"CatFrames: padding must be one of {_PADDINGS}, received {padding!r}")
        in_keys = key_list(in_keys, [PIXELS])
        out_keys = list(in_keys) if out_keys is None else key_list(out_keys, [])
        if len(out_keys) != len(in_keys):
            raise ValueError(
                f"CatFrames: in_keys and out_keys must have the same length, "
                f"received {in_keys} and {out_keys}"
            )
        super().__init__(in_keys, out_keys)
        self.N, self.dim, self.padding, self.padding_value = N, dim, padding, padding_value
        self._specs: dict[Any, TensorSpec] = {}

    def transform_observation_spec(self, spec: Composite) -> Composite:
        for key, out in zip(self.in_keys, self.out_keys, strict=True):
            if key not in spec:
                raise SpecError(
                    f"CatFrames: in_key {key!r} is not an observation key of the env; "
                    f"observation keys: {spec.keys(True, True)}"
                )
            old = spec[key]
            event = event_shape(old, len(spec.shape))
            if len(event) < -self.dim:
                raise SpecError(
                    f"CatFrames: {key!r} needs at least {-self.dim} dims after the batch dims "
                    f"{tuple(spec.shape)} to stack along dim={self.dim}; received shape "
                    f"{tuple(old.shape)}"
                )
            shape = list(old.shape)
            shape[self.dim] *= self.N
            if isinstance(old, Bounded):
                cat = [old.low] * self.N, [old.high] * self.N
                new = Bounded(
                    torch.cat(cat[0], self.dim),
                    torch.cat(cat[1], self.dim),
                    shape,
                    old.device,
                    old.dtype,
                )
            else:
                new = old._rebuild(shape)
            spec[out] = self._specs[out] = new
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        self._stacks = []
        for key, out in zip(self.in_keys, self.out_keys, strict=True):
            src_r, src_n = root.get(key), next.get(key)
            root, dst_r = new_leaf(root, out, self._specs[out])
            next, dst_n = new_leaf(next, out, self._specs[out])
            views = (self._view(t) for t in (src_r, src_n, dst_r, dst_n))
            self._stacks.append(_Stack(*views, self.dim, self.N))
        self._done = self._view(next.get(DONE))
        return root, next

    def _refill(self, s: _Stack, rows: Any) -> None:
        """The root stack of ``rows`` (all: ``slice(None)``) from their current frame."""
        dst, src = s.dst_r, s.src_r[rows]
        lead = (rows,) if not isinstance(rows, slice) else ()
        if self.padding == "constant":
            dst[(*lead, *s.frames(0, s.n - 1))] = self.padding_value
            dst[(*lead, *s.frames(s.n - 1, s.n))] = src
            return
        for k in range(s.n):
            dst[(*lead, *s.frames(k, k + 1))] = src

    def on_reset(self, mask: torch.Tensor | None) -> None:
        for s in self._stacks:
            self._refill(s, self._rows(mask, s.dst_r))

    def on_step(self) -> None:
        done = self._done.reshape(self._done.shape[:-1])
        any_done = bool(done.any())
        for s in self._stacks:
            s.dst_n[s.frames(0, s.n - 1)] = s.dst_r[s.frames(1, s.n)]
            s.dst_n[s.frames(s.n - 1, s.n)] = s.src_n
            s.dst_r[...] = s.dst_n
            if any_done:
                self._refill(s, done)
        return None
