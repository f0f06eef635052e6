"""Key transforms: RenameTransform, ExcludeTransform, SelectTransform and CatTensors
(TorchRL names and meaning), on observation keys.

Renaming, excluding and selecting cost nothing per step: they only change which leaves
the shallow-copied buffers hold (set once, when the buffers are bound). ``CatTensors``
copies each input into its slice of one preallocated leaf per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from tensordict import TensorDictBase

from rl_envs._composite import Composite
from rl_envs._specs import Bounded, TensorSpec, Unbounded
from rl_envs._transforms import Transform
from rl_envs._transforms_lib import new_leaf
from rl_envs._transforms_map import event_shape, key_list
from rl_envs.exceptions import SpecError

__all__ = ["CatTensors", "ExcludeTransform", "RenameTransform", "SelectTransform"]


def _require_obs(name: str, keys: Sequence[Any], spec: Composite) -> None:
    have = spec.keys(True, True)
    for key in keys:
        if key not in spec:
            raise SpecError(
                f"{name}: {key!r} is not an observation key of the env; observation keys: {have}"
            )


class RenameTransform(Transform):
    """Rename observation keys: ``in_keys[i]`` becomes ``out_keys[i]`` (same tensor, no copy).

    TorchRL's ``RenameTransform``, on observation keys (the reward and done keys are
    fixed names in this package).

    Args:
        in_keys: the observation keys to rename.
        out_keys: their new names.
        create_copy: keep the old key too (both name the same tensor).

    Raises:
        SpecError: when the env is built, an in-key is not an observation key, or an
            out-key is already taken.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> rename = RenameTransform(["observation"], ["state"])
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), rename)
        >>> sorted(env.reset().keys())
        ['done', 'state', 'terminated', 'truncated']
        >>> env.close()
    """

    def __init__(
        self, in_keys: Sequence[Any], out_keys: Sequence[Any], *, create_copy: bool = False
    ):
        in_keys, out_keys = key_list(in_keys, []), key_list(out_keys, [])
        if len(in_keys) != len(out_keys) or not in_keys:
            raise ValueError(
                f"RenameTransform: in_keys and out_keys must be non-empty and of the same "
                f"length, received {in_keys} and {out_keys}"
            )
        super().__init__(in_keys, out_keys)
        self.create_copy = create_copy

    def transform_observation_spec(self, spec: Composite) -> Composite:
        _require_obs("RenameTransform", self.in_keys, spec)
        moved = [spec[k] for k in self.in_keys]
        if not self.create_copy:
            for key in self.in_keys:
                del spec[key]
        for key, value in zip(self.out_keys, moved, strict=True):
            if key in spec:
                raise SpecError(
                    f"RenameTransform: out_key {key!r} is already an observation key of the env"
                )
            spec[key] = value
        return spec

    def _rename(self, td: TensorDictBase) -> TensorDictBase:
        out = td.copy()
        moved = [out.get(k) for k in self.in_keys]
        if not self.create_copy:
            for key in self.in_keys:
                out.del_(key)
        for key, value in zip(self.out_keys, moved, strict=True):
            out.set(key, value)
        return out

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        return self._rename(root), self._rename(next)


class _DropKeys(Transform):
    """Drop the observation keys listed by ``_dropped(spec)`` from the spec and buffers."""

    def _dropped(self, spec: Composite) -> list[Any]:
        raise NotImplementedError

    def transform_observation_spec(self, spec: Composite) -> Composite:
        self._drop = self._dropped(spec)
        for key in self._drop:
            del spec[key]
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        return root.exclude(*self._drop), next.exclude(*self._drop)


class ExcludeTransform(_DropKeys):
    """Remove observation keys from the env's output (TorchRL's ``ExcludeTransform``).

    Args:
        *excluded_keys: observation keys to remove.

    Raises:
        SpecError: when the env is built, a key is not an observation key.

    Examples:
        >>> from rl_envs import GymEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), ExcludeTransform("observation"))
        >>> sorted(env.reset().keys())
        ['done', 'terminated', 'truncated']
        >>> env.close()
    """

    def __init__(self, *excluded_keys: Any):
        super().__init__(list(excluded_keys), [])
        self.excluded_keys = list(excluded_keys)

    def _dropped(self, spec: Composite) -> list[Any]:
        _require_obs("ExcludeTransform", self.excluded_keys, spec)
        return list(self.excluded_keys)


class SelectTransform(_DropKeys):
    """Keep only the given observation keys (TorchRL's ``SelectTransform``).

    Reward, done and state keys are always kept.

    Args:
        *selected_keys: observation keys to keep.

    Raises:
        SpecError: when the env is built, a key is not an observation key.

    Examples:
        >>> from rl_envs import GymEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), StepCounter())
        >>> env.append_transform(SelectTransform("step_count"))
        TransformedEnv(...)
        >>> sorted(env.reset().keys())
        ['done', 'step_count', 'terminated', 'truncated']
        >>> env.close()
    """

    def __init__(self, *selected_keys: Any):
        super().__init__(list(selected_keys), list(selected_keys))
        self.selected_keys = list(selected_keys)

    def _dropped(self, spec: Composite) -> list[Any]:
        _require_obs("SelectTransform", self.selected_keys, spec)
        keep = {k if isinstance(k, str) else tuple(k) for k in self.selected_keys}
        return [k for k in spec.keys(True, True) if k not in keep]


class CatTensors(Transform):
    """Concatenate observation keys along ``dim`` into ``out_key`` (TorchRL's ``CatTensors``).

    Args:
        in_keys: observation keys to concatenate (sorted first when ``sort``).
        out_key: the key written (default ``"observation_vector"``).
        dim: the (negative) dim of the values to concatenate along.
        del_keys: remove ``in_keys`` from the output.
        unsqueeze_if_needed: a key with no event dim (shape ``[*B]``) gets one.
        sort: sort ``in_keys`` (TorchRL's default), else keep their order.

    Raises:
        SpecError: when the env is built, a key is missing or the shapes do not match
            outside ``dim`` (key, expected and received shapes named).

    Examples:
        >>> from rl_envs import GymEnv, StepCounter, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), StepCounter())
        >>> env.append_transform(CatTensors(["observation", "step_count"], "obs", sort=False))
        TransformedEnv(...)
        >>> env.observation_spec["obs"].shape, env.observation_spec["obs"].dtype
        (torch.Size([2, 5]), torch.float32)
        >>> env.close()
    """

    def __init__(
        self,
        in_keys: Sequence[Any],
        out_key: Any = "observation_vector",
        dim: int = -1,
        *,
        del_keys: bool = True,
        unsqueeze_if_needed: bool = True,
        sort: bool = True,
    ):
        in_keys = key_list(in_keys, [])
        if not in_keys:
            raise ValueError("CatTensors: in_keys must name at least one key, received none")
        if not isinstance(dim, int) or dim >= 0:
            raise ValueError(f"CatTensors: dim must be a negative int, received {dim!r}")
        if sort:
            in_keys = sorted(in_keys, key=str)
        super().__init__(in_keys, [out_key])
        self.out_key, self.dim, self.del_keys = out_key, dim, del_keys
        self.unsqueeze_if_needed = unsqueeze_if_needed

    def _event_specs(self, spec: Composite) -> list[TensorSpec]:
        _require_obs("CatTensors", self.in_keys, spec)
        nb, out = len(spec.shape), []
        for key in self.in_keys:
            s = spec[key]
            if self.unsqueeze_if_needed and len(event_shape(s, nb)) == 0:
                s = s._rebuild((*s.shape, 1))
            out.append(s)
        ref = out[0]
        for key, s in zip(self.in_keys, out, strict=True):
            a, b = list(ref.shape), list(s.shape)
            fits = len(a) == len(b) and len(b) - nb >= -self.dim
            if fits:
                a[self.dim] = b[self.dim] = -1
            if not fits or a != b:
                raise SpecError(
                    f"CatTensors: {key!r} has shape {tuple(s.shape)}; expected "
                    f"{tuple(ref.shape)} ({self.in_keys[0]!r}'s) outside dim={self.dim}"
                )
        return out

    def transform_observation_spec(self, spec: Composite) -> Composite:
        specs = self._event_specs(spec)
        self._unsqueeze = [
            s.shape != spec[k].shape for k, s in zip(self.in_keys, specs, strict=True)
        ]
        dtype = specs[0].dtype
        for s in specs[1:]:
            dtype = torch.promote_types(dtype, s.dtype)
        shape = list(specs[0].shape)
        shape[self.dim] = sum(s.shape[self.dim] for s in specs)
        if all(isinstance(s, Bounded) for s in specs):
            low = torch.cat([s.low.to(dtype) for s in specs], self.dim)
            high = torch.cat([s.high.to(dtype) for s in specs], self.dim)
            new: TensorSpec = Bounded(low, high, shape, spec.device, dtype)
        else:
            new = Unbounded(shape, spec.device, dtype)
        if self.del_keys:
            for key in self.in_keys:
                del spec[key]
        spec[self.out_key] = self._spec = new
        self._sizes = [s.shape[self.dim] for s in specs]
        return spec

    def _pairs(self, src: TensorDictBase, dst: Any) -> list[tuple[Any, Any]]:
        pairs, start, tail = [], 0, (slice(None),) * (-self.dim - 1)
        for key, size, unsq in zip(self.in_keys, self._sizes, self._unsqueeze, strict=True):
            value = src.get(key)
            value = value.unsqueeze(-1) if unsq else value
            pairs.append((self._view(value), dst[(Ellipsis, slice(start, start + size), *tail)]))
            start += size
        return pairs

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        src_r, src_n = root, next
        if self.del_keys:
            root, next = root.exclude(*self.in_keys), next.exclude(*self.in_keys)
        root, r = new_leaf(root, self.out_key, self._spec)
        next, n = new_leaf(next, self.out_key, self._spec)
        self._root_pairs = self._pairs(src_r, self._view(r))
        self._next_pairs = self._pairs(src_n, self._view(n))
        return root, next

    @staticmethod
    def _copy(pairs: list[tuple[Any, Any]]) -> None:
        for src, dst in pairs:
            dst[...] = src

    def on_reset(self, mask: torch.Tensor | None) -> None:
        self._copy(self._root_pairs)

    def on_step(self) -> None:
        self._copy(self._next_pairs)
        self._copy(self._root_pairs)
        return None
