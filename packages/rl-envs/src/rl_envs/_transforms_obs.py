"""The shipped observation/state transforms: DoubleToFloat, TensorDictPrimer and
ObservationNorm (TorchRL names and semantics). The episode-bookkeeping ones are in
:mod:`rl_envs._transforms_lib`.

Per-step work runs on numpy views of the CPU buffers and on tensors otherwise; every op
writes into preallocated leaves.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_envs._composite import Composite
from rl_envs._keys import DONE, OBSERVATION
from rl_envs._obs_norm_stats import StatDims
from rl_envs._specs import Bounded, TensorSpec, Unbounded
from rl_envs._transforms import Transform
from rl_envs._transforms_lib import new_leaf

__all__ = ["DoubleToFloat", "ObservationNorm", "TensorDictPrimer"]


def _rewritten_leaves(
    root: TensorDictBase,
    next: TensorDictBase,
    keys: Iterable[Any],
    spec_of: Callable[[torch.Tensor], TensorSpec],
) -> tuple[TensorDictBase, TensorDictBase, list[tuple[Any, Any]]]:
    """Give each key a fresh leaf of ``spec_of(old root leaf)`` in ``root`` and ``next``.

    Returns:
        The new ``root`` and ``next``, and ``(old, new)`` leaf views (numpy on the CPU),
        root then next for each key: what a transform rewriting those keys reads and writes.
    """
    pairs = []
    view = Transform._view
    for key in keys:
        src_r, src_n = root.get(key), next.get(key)
        spec = spec_of(src_r)
        root, r = new_leaf(root, key, spec)
        next, n = new_leaf(next, key, spec)
        pairs += [(view(src_r), view(r)), (view(src_n), view(n))]
    return root, next, pairs


class DoubleToFloat(Transform):
    """Cast float64 observations to float32 (and float32 actions back to float64).

    Args:
        in_keys: observation keys to cast (default: every float64 observation).
        in_keys_inv: action keys whose outer spec becomes float32 and that are cast back to
            float64 before reaching the env (an explicit, documented cast).

    Examples:
        >>> from rl_envs import Composite, Unbounded
        >>> t = DoubleToFloat()
        >>> spec = Composite(observation=Unbounded((2, 3), dtype=torch.float64), shape=(2,))
        >>> t.transform_observation_spec(spec)["observation"].dtype
        torch.float32
    """

    def __init__(
        self, in_keys: Sequence[Any] | None = None, in_keys_inv: Sequence[Any] | None = None
    ):
        super().__init__(in_keys, in_keys)
        self._auto = in_keys is None
        self.in_keys_inv = list(in_keys_inv or [])

    def transform_observation_spec(self, spec: Composite) -> Composite:
        if self._auto:
            self.in_keys = [k for k, s in spec.items(True, True) if s.dtype == torch.float64]
            self.out_keys = list(self.in_keys)
        for key in self.in_keys:
            old = spec[key]
            if old.dtype != torch.float64:
                raise TypeError(f"DoubleToFloat: {key!r} is {old.dtype}, expected torch.float64")
            spec[key] = old._rebuild(old.shape, dtype=torch.float32)
        return spec

    def transform_action_spec(self, spec: Composite) -> Composite:
        for key in self.in_keys_inv:
            old = spec[key]
            spec[key] = old._rebuild(old.shape, dtype=torch.float32)
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        device = root.device
        root, next, self._pairs = _rewritten_leaves(
            root, next, self.in_keys, lambda src: Unbounded(src.shape, device, torch.float32)
        )
        return root, next

    def _cast(self) -> None:
        for src, dst in self._pairs:
            dst[...] = src

    def on_reset(self, mask: torch.Tensor | None) -> None:
        self._cast()

    def on_step(self) -> None:
        self._cast()
        return None

    def inv_action(self, action: Any) -> Any:
        if not self.in_keys_inv:
            return action
        if isinstance(action, torch.Tensor):
            return action.to(torch.float64)
        for key in self.in_keys_inv:
            action.set(key, action.get(key).to(torch.float64))
        return action


class TensorDictPrimer(Transform):
    """Add entries (e.g. recurrent states) filled with a default value at reset.

    The primed keys appear at the root and under ``"next"`` (copied from the root at each
    step); a finished sub-env gets the default value back in the next root.

    Args:
        primers: mapping key -> spec, shaped WITHOUT the batch dims (they are prepended).
        default_value: fill value (or ``"random"`` to draw from the spec).

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv, Unbounded
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2),
        ...                      TensorDictPrimer({"h": Unbounded((8,))}))
        >>> env.reset()["h"].shape
        torch.Size([2, 8])
        >>> env.close()
    """

    def __init__(
        self,
        primers: Composite | dict[str, TensorSpec] | None = None,
        default_value: float | str = 0.0,
        **kwargs: TensorSpec,
    ):
        self.primers = dict(primers.items() if isinstance(primers, Composite) else (primers or {}))
        self.primers.update(kwargs)
        super().__init__([], list(self.primers))
        self.default_value = default_value

    def transform_observation_spec(self, spec: Composite) -> Composite:
        for key, p in self.primers.items():
            spec[key] = p.expand((*spec.shape, *p.shape))
        self._specs = {k: spec[k] for k in self.primers}
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        self._pairs = []
        for key, spec in self._specs.items():
            root, r = new_leaf(root, key, spec)
            next, n = new_leaf(next, key, spec)
            self._pairs.append((r, n, spec))
        self._done = next.get(DONE)
        return root, next

    def _fill(self, dst: torch.Tensor, spec: TensorSpec, mask: torch.Tensor | None) -> None:
        value = (
            spec.rand()
            if self.default_value == "random"
            else torch.full_like(dst, float(self.default_value))
        )
        if mask is None:
            dst.copy_(value)
        else:
            m = mask.reshape(*mask.shape, *([1] * (dst.ndim - mask.ndim)))
            torch.where(m, value, dst, out=dst)

    def on_reset(self, mask: torch.Tensor | None) -> None:
        for r, _, spec in self._pairs:
            self._fill(r, spec, mask)

    def on_step(self) -> None:
        for r, n, _ in self._pairs:  # every primed key, before any reset below
            n.copy_(r)
        done = self._done.reshape(self._done.shape[:-1])
        if done.any():
            for r, _, spec in self._pairs:
                self._fill(r, spec, done)
        return None


class ObservationNorm(Transform):
    """Affine normalisation: ``obs * scale + loc`` (or ``(obs - loc) / scale`` when
    ``standard_normal``), with statistics from :meth:`init_stats`.

    Args:
        loc: location (tensor broadcastable to the observation's event shape), or None
            until :meth:`init_stats`.
        scale: scale, likewise.
        in_keys: observation keys (default ``["observation"]``); normalised in place of
            the key (the raw value stays available in the base env).
        standard_normal: the formula, as in TorchRL.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=4),
        ...                      ObservationNorm(standard_normal=True))
        >>> _ = env.set_seed(0)  # random actions: seeded, the same statistics every run
        >>> _ = torch.manual_seed(0)
        >>> env.transform[0].init_stats(200)
        >>> obs = env.rollout(500, break_when_any_done=False)["observation"]
        >>> bool(obs.mean((0, 1)).abs().max() < 0.5)
        True
        >>> env.close()
    """

    def __init__(
        self,
        loc: Any = None,
        scale: Any = None,
        in_keys: Sequence[Any] | None = None,
        *,
        standard_normal: bool = False,
        eps: float = 1e-6,
    ):
        super().__init__(in_keys or [OBSERVATION], in_keys or [OBSERVATION])
        self.standard_normal = standard_normal
        self.eps = eps
        self.loc = None if loc is None else torch.as_tensor(loc, dtype=torch.float32)
        self.scale = None if scale is None else torch.as_tensor(scale, dtype=torch.float32)

    @property
    def initialized(self) -> bool:
        return self.loc is not None and self.scale is not None

    def init_stats(self, num_iter: int, reduce_dim: int | Sequence[int] = 0, cat_dim: int = 0,
                   key: Any = None, keep_dims: Sequence[int] | None = None) -> None:
        """Estimate loc/scale from ``num_iter`` random-action steps of the parent env.

        TorchRL's method and arguments. The parent (the env below this transform) runs
        ``num_iter`` steps with random actions, resetting finished sub-envs, and the
        statistics are the mean and standard deviation of ``key`` over every sample (all
        env and time dims), one value per element of the observation. That is what
        TorchRL computes with ``reduce_dim=0, cat_dim=0`` for a single env and with
        ``reduce_dim=(0, 1)`` for a batched one; our envs always have an env dim, so
        both forms give the same statistics here.

        Args:
            num_iter: steps of the parent env (each step gives one frame per sub-env).
            reduce_dim: TorchRL's sample dims to reduce over: ``0`` or a tuple of
                leading dims starting at 0 (``(0,)``, ``(0, 1)``).
            cat_dim: TorchRL's dim the collected batches are concatenated along; one of
                ``reduce_dim``.
            key: the entry to read (default: the first of ``in_keys``).
            keep_dims: TorchRL's dims of ``reduce_dim`` kept as size 1 in ``loc`` /
                ``scale``; ``reduce_dim`` may then also name observation dims (e.g.
                ``reduce_dim=[0, 1, 2], keep_dims=[0]`` on ``[T, C, H, W]`` frames).

        Raises:
            RuntimeError: the transform is not attached to an env.
            ValueError: ``num_iter``, ``reduce_dim`` or ``cat_dim`` is out of range (for
                instance a feature dim: the statistics are per element), or ``key`` is not
                in the parent env's ``observation_spec``.
        """
        parent = self.parent
        if parent is None:
            raise RuntimeError(
                "ObservationNorm.init_stats: attach the transform to a TransformedEnv first"
            )
        if not isinstance(num_iter, int) or num_iter < 1:
            raise ValueError(f"init_stats: num_iter: expected a positive int, got {num_iter!r}")
        key = self.in_keys[0] if key is None else key
        known = list(parent.observation_spec.keys(True, True))
        if _unravel(key) not in {_unravel(k) for k in known}:
            raise ValueError(
                f"init_stats: key: expected an entry of the parent env's observation_spec "
                f"({', '.join(map(repr, known))}), got {key!r}"
            )
        nb = len(parent.batch_size)
        event = len(parent.observation_spec[key].shape) - nb
        dims = StatDims(reduce_dim, cat_dim, keep_dims, sample_dims=nb + 1, event_dims=event)
        data = parent.rollout(num_iter, break_when_any_done=False)
        loc, scale = dims.stats(data.get(key).to(torch.float64))
        scale = scale.clamp_min(self.eps)
        if not self.standard_normal:
            scale = 1.0 / scale
            loc = -loc * scale
        self.loc, self.scale = loc.float(), scale.float()
        if self._owner is not None:
            self._owner._invalidate()

    def state_dict(self) -> dict[str, Any]:
        """``loc`` and ``scale`` (``None`` before :meth:`init_stats`)."""
        return {"loc": self.loc, "scale": self.scale}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``loc`` and ``scale``; the env's specs and buffers are rebuilt."""
        self.loc, self.scale = state["loc"], state["scale"]
        if self._owner is not None:
            self._owner._invalidate()

    def _affine(self, x: torch.Tensor) -> torch.Tensor:
        loc, scale = self.loc.to(x), self.scale.to(x)  # type: ignore[union-attr]
        return (x - loc) / scale if self.standard_normal else x * scale + loc

    def transform_observation_spec(self, spec: Composite) -> Composite:
        for key in self.in_keys:
            old = spec[key]
            if not old.dtype.is_floating_point:
                raise TypeError(
                    f"ObservationNorm: {key!r} must be floating point, received {old.dtype}"
                )
            new: TensorSpec = Unbounded(old.shape, old.device, old.dtype)
            if isinstance(old, Bounded) and self.initialized:
                a, b = self._affine(old.low), self._affine(old.high)
                lo, hi = torch.minimum(a, b), torch.maximum(a, b)
                lo = torch.where(torch.isnan(lo), float("-inf"), lo)
                hi = torch.where(torch.isnan(hi), float("inf"), hi)
                new = Bounded(lo, hi, old.shape, old.device, old.dtype)
            spec[key] = new
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        root, next, self._pairs = _rewritten_leaves(
            root, next, self.in_keys, lambda src: Unbounded(src.shape, src.device, src.dtype)
        )
        if self.initialized:
            like = self._pairs[0][1] if self._pairs else None
            to = (
                (lambda t: t.numpy().astype(like.dtype))
                if isinstance(like, np.ndarray)
                else (lambda t: t.to(like))
            )
            self._loc_v, self._scale_v = to(self.loc), to(self.scale)
            if self.standard_normal:
                self._scale_v = 1.0 / self._scale_v
        return root, next

    def _apply(self) -> None:
        if not self.initialized:
            raise RuntimeError(
                "ObservationNorm: loc/scale are not set; call init_stats() or pass them"
            )
        for src, dst in self._pairs:
            if self.standard_normal:
                dst[...] = src
                dst -= self._loc_v
                dst *= self._scale_v
            else:
                dst[...] = src
                dst *= self._scale_v
                dst += self._loc_v

    def on_reset(self, mask: torch.Tensor | None) -> None:
        if self.initialized:
            self._apply()

    def on_step(self) -> None:
        self._apply()
        return None


def _unravel(key: Any) -> tuple:
    """A nested key as a tuple (``"obs"`` and ``("obs",)`` are the same entry)."""
    return (key,) if isinstance(key, str) else tuple(key)
