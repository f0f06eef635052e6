"""``MapTransform``: the shared base of the transforms that write ``f(in_key)`` to ``out_key``.

An observation key is mapped at the root and under ``"next"``, a reward key under
``"next"`` only. The fast path relies on the env contract (see ``EnvBase``): after a step
the root equals ``"next"`` on every sub-env that is not done, so the root output is a copy
of the ``"next"`` output and only the done rows (auto-reset, holding their reset
observation) are mapped a second time. A map that is expensive (``Resize``) thus runs
once per step, not twice. A map that is a view of its input (``ToTensorImage`` keeping
uint8: a permutation of the dims) returns it from ``_alias``: the out leaf is that view
of the input leaf, bound once, and the transform does no work at all per step.

On the CPU a step of a small batch (MuJoCo's one env) costs a few microseconds per torch op,
more than the arithmetic: a transform may implement ``_write_all_np``, the same write on
numpy views bound once, and the base class then also copies the root and tests the done
flags in numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_envs._buffers import np_view
from rl_envs._composite import Composite
from rl_envs._keys import DONE
from rl_envs._specs import Bounded, TensorSpec, Unbounded
from rl_envs._transforms import Transform
from rl_envs._transforms_lib import new_leaf
from rl_envs.exceptions import SpecError

__all__ = ["MapTransform", "bounds_spec", "event_shape", "key_list", "uniform_bounds"]


def key_list(keys: Any, default: Sequence[Any]) -> list[Any]:
    """``keys`` as a list (a single key becomes a one-element list), ``default`` if None."""
    if keys is None:
        return list(default)
    if isinstance(keys, (str, tuple)):
        return [keys]
    return list(keys)


def event_shape(spec: TensorSpec, batch_ndim: int) -> torch.Size:
    """The shape of one sub-env's value: the spec's shape without the batch dims."""
    return torch.Size(spec.shape[batch_ndim:])


def bounds_spec(old: TensorSpec, shape: Any, dtype: torch.dtype, low: Any, high: Any) -> TensorSpec:
    """``Bounded(low, high)`` of the new shape/dtype, or ``Unbounded`` when both are None."""
    if low is None and high is None:
        return Unbounded(shape, old.device, dtype)
    low = float("-inf") if low is None else low
    high = float("inf") if high is None else high
    return Bounded(low, high, shape, old.device, dtype)


def uniform_bounds(old: TensorSpec) -> tuple[Any, Any]:
    """The smallest scalar ``(low, high)`` containing ``old``'s values, or ``(None, None)``."""
    if isinstance(old, Bounded):
        return old.low.min().item(), old.high.max().item()
    return None, None


def _with_leaf(td: TensorDictBase, key: Any, leaf: torch.Tensor) -> TensorDictBase:
    """A shallow copy of ``td`` holding ``leaf`` (an existing tensor) at ``key``."""
    out = td.copy()
    out.set(key, leaf)
    return out


class MapTransform(Transform):
    """Base class: write ``self._map(value)`` of each in-key to its out-key.

    Subclasses implement ``_map(x, key)`` (``x``: any leading dims, then the event dims)
    and ``_out_spec(key, spec, batch_ndim)`` (the out-key's spec; validate there, so a
    bad input fails when the ``TransformedEnv`` is built). ``_observe_step`` /
    ``_observe_reset`` are hooks that run before the map (``VecNorm`` updates its
    statistics there).

    Args:
        in_keys: keys read (observation or reward keys).
        out_keys: keys written (default: ``in_keys``, replaced in place of the input).
    """

    obs_only = False
    """When True, every in-key must be an observation key."""

    def __init__(self, in_keys: Sequence[Any], out_keys: Sequence[Any] | None = None):
        in_keys = list(in_keys)
        out_keys = list(in_keys) if out_keys is None else list(out_keys)
        if len(in_keys) != len(out_keys):
            raise ValueError(
                f"{type(self).__name__}: in_keys and out_keys must have the same length, "
                f"received {in_keys} and {out_keys}"
            )
        super().__init__(in_keys, out_keys)
        self._out_specs: dict[Any, TensorSpec] = {}
        self._not_obs: list[tuple[Any, Any]] = []
        self._obs_keys: list[Any] = []

    # -- specs --------------------------------------------------------------------------
    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        raise NotImplementedError

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        """The map of ``key``'s values ``x`` (leading dims, then the event dims)."""
        raise NotImplementedError

    def transform_observation_spec(self, spec: Composite) -> Composite:
        self._not_obs = []
        self._obs_keys = spec.keys(True, True)
        for key, out in zip(self.in_keys, self.out_keys, strict=True):
            if key not in spec:
                if self.obs_only:
                    raise SpecError(
                        f"{type(self).__name__}: in_key {key!r} is not an observation key "
                        f"of the env; observation keys: {self._obs_keys}"
                    )
                self._not_obs.append((key, out))
                continue
            spec[out] = self._out_specs[out] = self._out_spec(key, spec[key], len(spec.shape))
        return spec

    def transform_reward_spec(self, spec: Composite) -> Composite:
        for key, out in self._not_obs:
            if key not in spec:
                raise SpecError(
                    f"{type(self).__name__}: in_key {key!r} is neither an observation nor a "
                    f"reward key of the env; observation keys: {self._obs_keys}, "
                    f"reward keys: {spec.keys(True, True)}"
                )
            spec[out] = self._out_specs[out] = self._out_spec(key, spec[key], len(spec.shape))
        return spec

    # -- fast hooks ---------------------------------------------------------------------
    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        self._io: list[tuple[Any, ...]] = []
        root_keys = set(root.keys(True, True))
        for key, out in zip(self.in_keys, self.out_keys, strict=True):
            spec = self._out_specs[out]
            src_n, src_r = next.get(key), root.get(key) if key in root_keys else None
            view = self._alias(src_n, key)
            if view is not None:  # the map is a view of its input: no work per step
                next = _with_leaf(next, out, view)
                if src_r is not None:
                    root = _with_leaf(root, out, self._alias(src_r, key))
                continue
            next, dst_n = new_leaf(next, out, spec)
            dst_r = None
            if src_r is not None:
                root, dst_r = new_leaf(root, out, spec)
            self._io.append((key, src_n, dst_n, src_r, dst_r))
        done = next.get(DONE)
        self._done = done.reshape(done.shape[:-1])
        self._np_io: list[tuple[Any, ...] | None] = [self._numpy_views(io) for io in self._io]
        self._done_np = np_view(self._done)
        return root, next

    def __getstate__(self) -> dict[str, Any]:
        """Numpy views would pickle as copies: they are rebuilt from the bound leaves."""
        state = self.__dict__.copy()
        for views in ("_np_io", "_done_np"):
            state.pop(views, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if "_io" in state:
            self._np_io = [self._numpy_views(io) for io in self._io]
            self._done_np = np_view(self._done)

    def _numpy_views(self, io: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """``io``'s leaves as numpy views when the transform writes in numpy and every leaf
        is on the CPU (``None`` for a missing root), else ``None``."""
        if type(self)._write_all_np is None:
            return None
        views = [None if t is None else np_view(t) for t in io[1:]]
        if any(v is None for v, t in zip(views, io[1:], strict=True) if t is not None):
            return None
        return (io[0], *views)

    def _alias(self, src: torch.Tensor, key: Any) -> torch.Tensor | None:
        """The map of ``src`` when it is a view of ``src`` (then bound once), else None."""
        return None

    def _observe_step(self) -> None:
        """Hook: runs at the start of ``on_step``."""

    def _observe_reset(self, mask: torch.Tensor | None) -> None:
        """Hook: runs at the start of ``on_reset``."""

    def _write(self, key: Any, src: torch.Tensor, dst: torch.Tensor, rows: Any) -> None:
        """``dst[rows] = map(src[rows])`` (every row, by :meth:`_write_all`, when ``rows`` is
        None)."""
        if rows is None:
            self._write_all(key, src, dst)
            return
        nb = rows.ndim
        idx = rows.reshape(-1).nonzero().squeeze(-1)
        flat_src = src.reshape(-1, *src.shape[nb:])
        flat_dst = dst.view(-1, *dst.shape[nb:])  # the leaf is ours: contiguous
        if dst.device.type == "cpu":  # numpy row indexing: ~25x cheaper than torch's on images
            i = idx.cpu().numpy()
            flat_dst.numpy()[i] = self._map(torch.from_numpy(flat_src.numpy()[i]), key).numpy()
        else:
            idx = idx.to(dst.device)
            flat_dst.index_copy_(0, idx, self._map(flat_src.index_select(0, idx), key))

    def _write_all(self, key: Any, src: torch.Tensor, dst: torch.Tensor) -> None:
        """``dst = map(src)`` over every row; override to write the map's arithmetic
        straight into the leaf."""
        dst.copy_(self._map(src, key))

    _write_all_np: Any = None
    """Optional ``(key, src, dst) -> None``: :meth:`_write_all` on numpy arrays (CPU leaves)."""

    def on_reset(self, mask: torch.Tensor | None) -> None:
        self._observe_reset(mask)
        for key, _, _, src_r, dst_r in self._io:
            if src_r is not None:
                self._write(key, src_r, dst_r, mask)

    def on_step(self) -> None:
        self._observe_step()
        done = None
        for (key, src_n, dst_n, src_r, dst_r), views in zip(self._io, self._np_io, strict=True):
            if views is None:
                self._write(key, src_n, dst_n, None)
            else:
                self._write_all_np(key, views[1], views[2])
            if src_r is None:
                continue
            if views is None:  # the root equals "next" on every sub-env not done
                dst_r.copy_(dst_n)
            else:
                np.copyto(views[4], views[2])
            if done is None:
                done = self._done.clone() if self._any_done() else False
            if done is not False:
                self._write(key, src_r, dst_r, done)
        return None

    def _any_done(self) -> bool:
        if self._done_np is not None:
            return bool(self._done_np.any())
        return bool(self._done.any())
