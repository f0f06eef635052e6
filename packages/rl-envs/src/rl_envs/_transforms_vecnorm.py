"""``VecNorm``: running mean/variance normalisation, statistics shared across processes.

TorchRL's ``VecNorm`` (decayed sums): after each step, per element of the event shape,

    sum   <- decay * sum   + sum_b x_b
    ssq   <- decay * ssq   + sum_b x_b ** 2
    count <- decay * count + B

    mean = sum / count,   std = sqrt(max(ssq / count - mean ** 2, eps)),
    out  = (x - mean) / std

where ``b`` runs over the batch (every sub-env, in one reduction). The statistics are
float64 CPU tensors in shared memory (``share_memory_()``): a ``VecNorm`` pickled to a
spawned process by ``multiprocessing`` (a ``ParallelEnv`` or a multi-process collector's
env factory) points at the very same memory, so every worker updates and reads one set of
statistics. Updates from several processes are not atomic unless a ``lock`` is given: a
lost update only delays the statistics a little.

On the CPU the per-step update, the mean/std and the map run in numpy on views bound once
(the same float64 statistics, the same float operations in the same order): a MuJoCo step
of one env spent ~20 torch ops here, several microseconds each.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_envs._keys import OBSERVATION
from rl_envs._specs import TensorSpec, Unbounded
from rl_envs._transforms_map import MapTransform, event_shape, key_list
from rl_envs.exceptions import SpecError

__all__ = ["VecNorm"]

_PARTS = ("sum", "ssq", "count")


def _name(key: Any) -> str:
    return key if isinstance(key, str) else "_".join(key)


class SharedStatsTransform(MapTransform):
    """Base of the transforms that learn float64 statistics per in-key, kept in shared
    memory (``VecNorm``, ``NormalizeReward``): allocation, freezing, ``state_dict`` /
    ``load_state_dict`` with their checks, and pickling without the env binding.

    Subclasses set ``_parts`` (the statistics' names; ``"count"`` is a scalar, the others
    have the event shape, and the first, never ``"count"``, tells it) and ``_initial`` (a
    part's starting value, 0 by default).
    """

    _parts: tuple[str, ...] = ()
    _initial: dict[str, float] = {}

    def __init__(self, in_keys: list[Any], out_keys: Sequence[Any] | None, lock: Any, frozen: bool):
        super().__init__(in_keys, out_keys)
        self.lock, self.frozen = lock, frozen
        self._stats: dict[str, torch.Tensor] = {}

    def _alloc(self, key: Any, shape: torch.Size) -> None:
        name = _name(key)
        for part in self._parts:
            t = torch.full(
                () if part == "count" else shape, self._initial.get(part, 0.0), dtype=torch.float64
            )
            self._stats[f"{name}_{part}"] = t.share_memory_()

    def _locked(self) -> Any:
        return self.lock if self.lock is not None else contextlib.nullcontext()

    def freeze(self) -> Self:
        """Stop updating the statistics (they are still applied)."""
        self.frozen = True
        return self

    def unfreeze(self) -> Self:
        """Update the statistics again."""
        self.frozen = False
        return self

    def state_dict(self) -> dict[str, torch.Tensor]:
        """A copy of the statistics: ``"<key>_<part>"`` for each in-key and part."""
        return {k: v.clone() for k, v in self._stats.items()}

    def load_state_dict(self, state_dict: dict[str, torch.Tensor]) -> None:
        """Copy ``state_dict`` into the (shared) statistics, in place; on an error nothing
        is copied.

        Raises:
            KeyError: a key of the statistics is missing, or an unknown key is given.
            SpecError: an entry's shape differs from the statistics' (key, expected and
                received shapes named).
        """
        cls = type(self).__name__
        names = {f"{_name(k)}_{p}" for k in self.in_keys for p in self._parts}
        unknown = sorted(set(state_dict) - names)
        if unknown:
            raise KeyError(
                f"{cls}.load_state_dict: unexpected keys {unknown}; expected {sorted(names)}"
            )
        missing = sorted(names - set(state_dict))
        if missing:
            raise KeyError(f"{cls}.load_state_dict: missing keys {missing}")
        for key in self.in_keys:
            first = f"{_name(key)}_{self._parts[0]}"
            if first not in self._stats:
                self._alloc(key, torch.as_tensor(state_dict[first]).shape)
        for name in sorted(names):
            value, dst = torch.as_tensor(state_dict[name]), self._stats[name]
            if value.shape != dst.shape:
                raise SpecError(
                    f"{cls}.load_state_dict: {name!r}: expected shape {tuple(dst.shape)}, "
                    f"received {tuple(value.shape)}"
                )
        for name in names:
            self._stats[name].copy_(torch.as_tensor(state_dict[name]))

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        cls = type(self).__name__
        if not spec.dtype.is_floating_point:
            raise SpecError(f"{cls}: {key!r} must be floating point, received {spec.dtype}")
        event = event_shape(spec, batch_ndim)
        have = self._stats.get(f"{_name(key)}_{self._parts[0]}")
        if have is None:
            self._alloc(key, event)
        elif have.shape != event:
            raise SpecError(
                f"{cls}: {key!r}: the statistics have shape {tuple(have.shape)} (expected "
                f"event shape), the env's values have {tuple(event)} (received, batch dims "
                f"{tuple(spec.shape[:batch_ndim])} excluded)"
            )
        return Unbounded(spec.shape, spec.device, spec.dtype)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the configuration and the (shared) statistics, not the env binding."""
        state = self.__dict__.copy()
        state["_owner"] = None
        for bound in ("_io", "_done", "_np_io", "_done_np"):
            state.pop(bound, None)
        state.update({name: {} for name in self._unbound})
        return state

    _unbound: tuple[str, ...] = ()
    """Dicts of the env binding, pickled empty (``bind`` fills them)."""


class VecNorm(SharedStatsTransform):
    """Normalise observations (and optionally rewards) by running mean and std.

    TorchRL's ``VecNorm`` (same decayed statistics, ``decay`` and ``eps``). The
    statistics are updated with every ``("next", key)`` of a step and with the reset
    values, then applied at the root and under ``"next"``. ``freeze()`` stops the
    updates (evaluation); ``frozen_copy()`` gives a frozen transform that reads the same
    (shared, still updated by training) statistics, for an evaluation env.

    Args:
        in_keys: keys to normalise (default ``["observation"]``; add ``"reward"`` to
            normalise rewards too, which TorchRL's default does).
        out_keys: where the results go (default: in place of ``in_keys``).
        decay: weight of the past in the running sums (1.0: plain averages).
        eps: lower bound of the variance.
        shapes: the event shape of each in-key (without batch dims), to allocate the
            statistics now, before the transform is sent to worker processes; by default
            they are allocated when an env is built with the transform.
        lock: a ``multiprocessing`` lock held during updates (optional; it must reach
            the workers by process inheritance, e.g. as a ``Process`` argument).
        frozen: start frozen.

    Raises:
        SpecError: when the env is built, if a key is not floating point or its shape
            differs from the statistics' (from ``shapes`` or a loaded state).

    Examples:
        >>> import torch
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=4), VecNorm(decay=1.0))
        >>> _ = torch.manual_seed(0), env.set_seed(0)  # random actions, random starts
        >>> obs = env.rollout(200, break_when_any_done=False)["next", "observation"]
        >>> bool(obs.mean((0, 1)).abs().max() < 0.25)  # about zero mean, each feature
        True
        >>> state = env.transform[0].state_dict()
        >>> sorted(state), state["observation_count"].item()
        (['observation_count', 'observation_ssq', 'observation_sum'], 804.0)
        >>> env.close()
    """

    _parts = _PARTS
    _unbound = ("_cur", "_np_stats")

    def __init__(
        self,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        *,
        decay: float = 0.9999,
        eps: float = 1e-4,
        shapes: Sequence[Sequence[int]] | None = None,
        lock: Any = None,
        frozen: bool = False,
    ):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"VecNorm: decay must be in (0, 1], received {decay!r}")
        if not eps > 0.0:
            raise ValueError(f"VecNorm: eps must be > 0, received {eps!r}")
        super().__init__(key_list(in_keys, [OBSERVATION]), out_keys, lock, frozen)
        self.decay, self.eps = float(decay), float(eps)
        self._cur: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
        self._np_stats: dict[Any, _NumpyStats] = {}
        if shapes is not None:
            if len(shapes) != len(self.in_keys):
                raise ValueError(
                    f"VecNorm: shapes needs one shape per in_key {self.in_keys}, received {shapes}"
                )
            for key, shape in zip(self.in_keys, shapes, strict=True):
                self._alloc(key, torch.Size(shape))

    # -- statistics ---------------------------------------------------------------------
    def _update(self, key: Any, x: torch.Tensor | np.ndarray) -> None:
        """Add ``x`` (``[*batch, *event]``) to ``key``'s statistics: in numpy for a numpy
        view of a key bound on the CPU, else in torch."""
        with self._locked():
            if isinstance(x, np.ndarray):
                self._np_stats[key].update(x, self.decay)
                return
            s, q, c = (self._stats[f"{_name(key)}_{p}"] for p in _PARTS)
            flat = x.detach().to("cpu", torch.float64).reshape(-1, *s.shape)
            s.mul_(self.decay).add_(flat.sum(0))
            q.mul_(self.decay).add_(flat.square().sum(0))
            c.mul_(self.decay).add_(flat.shape[0])

    def _refresh(self, key: Any, like: torch.Tensor) -> None:
        """Cache ``(mean, std)`` of ``key`` in ``like``'s dtype and device (in place, in
        numpy, for a key bound on the CPU)."""
        bound = self._np_stats.get(key)
        if bound is not None:
            bound.refresh(self.eps)
            return
        mean, std = self.mean_std(key)
        self._cur[key] = (mean.to(like), std.to(like))

    def mean_std(self, key: Any = OBSERVATION) -> tuple[torch.Tensor, torch.Tensor]:
        """The current ``(mean, std)`` of ``key`` (float64, event shape)."""
        s, q, c = (self._stats[f"{_name(key)}_{p}"] for p in _PARTS)
        if c.item() <= 0.0:
            return torch.zeros_like(s), torch.ones_like(s)
        mean = s / c
        return mean, (q / c - mean.square()).clamp_min(self.eps).sqrt()

    def frozen_copy(self) -> VecNorm:
        """A frozen ``VecNorm`` reading the same (shared) statistics: for an evaluation env."""
        new = VecNorm(
            self.in_keys, self.out_keys, decay=self.decay, eps=self.eps, lock=self.lock, frozen=True
        )
        new._stats = self._stats  # the same dict: statistics allocated later are shared too
        return new

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        root, next = super().bind(root, next)
        self._np_stats = {}
        for (key, src_n, *_), views in zip(self._io, self._np_io, strict=True):
            if views is not None:
                stats = [self._stats[f"{_name(key)}_{p}"].numpy() for p in _PARTS]
                bound = self._np_stats[key] = _NumpyStats(*stats, src_n.dtype)
                self._cur[key] = bound.current  # the torch path (reset rows) reads them too
        return root, next

    def _observe_step(self) -> None:
        for (key, src_n, *_), views in zip(self._io, self._np_io, strict=True):
            if not self.frozen:
                self._update(key, src_n if views is None else views[1])
            self._refresh(key, src_n)

    def _observe_reset(self, mask: torch.Tensor | None) -> None:
        for key, _, _, src_r, _ in self._io:
            if src_r is None:
                continue
            if not self.frozen:
                self._update(key, src_r if mask is None else src_r[mask.to(src_r.device)])
            self._refresh(key, src_r)

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        mean, std = self._cur[key]
        return (x - mean) / std

    def _write_all(self, key: Any, src: torch.Tensor, dst: torch.Tensor) -> None:
        mean, std = self._cur[key]
        torch.sub(src, mean, out=dst)
        dst.div_(std)

    def _write_all_np(self, key: Any, src: np.ndarray, dst: np.ndarray) -> None:
        bound = self._np_stats[key]
        np.subtract(src, bound.mean, out=dst)
        np.divide(dst, bound.std, out=dst)

    def __repr__(self) -> str:
        return (
            f"VecNorm(in_keys={self.in_keys}, decay={self.decay}, eps={self.eps}, "
            f"frozen={self.frozen})"
        )


class _NumpyStats:
    """One key's statistics as numpy views of the shared float64 tensors, and its current
    ``(mean, std)`` in the values' dtype, written in place (``current`` holds them as
    tensors sharing that memory)."""

    def __init__(self, s: np.ndarray, q: np.ndarray, c: np.ndarray, dtype: torch.dtype):
        self.s, self.q, self.c = s, q, c
        self.current = (torch.zeros(s.shape, dtype=dtype), torch.ones(s.shape, dtype=dtype))
        self.mean, self.std = (t.numpy() for t in self.current)
        self._mean64, self._var64 = np.empty_like(s), np.empty_like(s)

    def update(self, x: np.ndarray, decay: float) -> None:
        """``VecNorm._update`` of ``x`` (``[*batch, *event]``)."""
        flat = x.reshape(-1, *self.s.shape).astype(np.float64)
        if decay != 1.0:  # x * 1.0 is x: cumulative statistics skip three calls a step
            self.s *= decay
            self.q *= decay
            self.c *= decay
        if flat.shape[0] == 1:  # one sub-env: the sum over one row is that row
            self.s += flat[0]
            self.q += np.square(flat[0])
        else:
            self.s += np.add.reduce(flat, 0)
            self.q += np.add.reduce(np.square(flat), 0)
        self.c += flat.shape[0]

    def refresh(self, eps: float) -> None:
        """``VecNorm.mean_std``, cast into ``mean`` / ``std``."""
        count = float(self.c)
        if count <= 0.0:
            self.mean.fill(0.0)
            self.std.fill(1.0)
            return
        mean, var = self._mean64, self._var64
        np.divide(self.s, count, out=mean)
        np.divide(self.q, count, out=var)
        var -= np.square(mean)
        np.maximum(var, eps, out=var)
        np.sqrt(var, out=var)
        self.mean[...] = mean
        self.std[...] = var
