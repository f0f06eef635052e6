"""``ActionScaling``: the policy acts in ``[-1, 1]``, the env gets its own ``Box`` range."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from rl_envs._composite import Composite
from rl_envs._keys import ACTION
from rl_envs._specs import Bounded
from rl_envs._transforms import Transform
from rl_envs._transforms_map import key_list
from rl_envs.exceptions import SpecError

__all__ = ["ActionScaling"]


class ActionScaling(Transform):
    """Expose a normalised action range and map actions linearly onto the env's bounds.

    TorchRL's ``ActionScaling`` (gymnasium's ``RescaleAction`` does the same with
    ``min_action``/``max_action``, here ``low``/``high``). The outer action spec is
    ``Bounded(low, high)``, by default ``[-1, 1]`` (``standard_normal=True``) or
    ``[0, 1]`` (``standard_normal=False``); ``inv_action`` maps an action ``a`` to

        a_env = env_low + (a - low) * (env_high - env_low) / (high - low)

    clamped to ``[env_low, env_high]`` (float rounding at the edges never makes an
    invalid action). The map is one fused pass over the whole batch into a
    preallocated tensor (the same one every step, as ``GymWrapper`` prefers).

    Args:
        in_keys_inv: the action keys (default ``["action"]``).
        standard_normal: ``[-1, 1]`` when True, ``[0, 1]`` when False.
        low: the outer lower bound (overrides ``standard_normal``'s).
        high: the outer upper bound.

    Raises:
        SpecError: when the env is built, an action key is not ``Bounded`` with finite
            bounds, or not floating point.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), ActionScaling())
        >>> env.action_spec.high.tolist(), env.base_env.action_spec.high.tolist()
        ([[1.0], [1.0]], [[2.0], [2.0]])
        >>> env.transform[0].inv_action(torch.tensor([[-1.0], [0.5]])).tolist()
        [[-2.0], [1.0]]
        >>> env.close()
    """

    def __init__(
        self,
        in_keys_inv: Sequence[Any] | None = None,
        *,
        standard_normal: bool = True,
        low: Any = None,
        high: Any = None,
    ):
        super().__init__([], [])
        self.in_keys_inv = key_list(in_keys_inv, [ACTION])
        self.low = (-1.0 if standard_normal else 0.0) if low is None else low
        self.high = 1.0 if high is None else high
        if not bool((torch.as_tensor(self.low) < torch.as_tensor(self.high)).all()):
            raise ValueError(
                f"ActionScaling: low must be < high, received low={self.low!r}, high={self.high!r}"
            )
        self._maps: dict[Any, tuple[torch.Tensor, ...]] = {}

    def transform_action_spec(self, spec: Composite) -> Composite:
        for key in self.in_keys_inv:
            inner = spec.get(key)
            if inner is None:
                raise SpecError(
                    f"ActionScaling: {key!r} is not an action key of the env; "
                    f"action keys: {spec.keys(True, True)}"
                )
            if not isinstance(inner, Bounded) or not inner.dtype.is_floating_point:
                raise SpecError(
                    f"ActionScaling: action {key!r} must be a floating-point Bounded spec "
                    f"(a Box), received {inner!r}"
                )
            if not bool(torch.isfinite(inner.low).all() and torch.isfinite(inner.high).all()):
                raise SpecError(
                    f"ActionScaling: action {key!r} needs finite bounds, "
                    f"received {inner.low} and {inner.high}"
                )
            outer = Bounded(self.low, self.high, inner.shape, inner.device, inner.dtype)
            slope = (inner.high - inner.low) / (outer.high - outer.low)
            offset = inner.low - outer.low * slope
            buf = torch.empty(inner.shape, dtype=inner.dtype, device=inner.device)
            self._maps[key] = (slope, offset, inner.low, inner.high, buf)
            spec[key] = outer
        return spec

    def _apply(self, key: Any, action: torch.Tensor) -> torch.Tensor:
        slope, offset, low, high, buf = self._maps[key]
        out = buf if action.shape == buf.shape and action.device == buf.device else None
        out = torch.mul(action, slope, out=out) if out is not None else action * slope
        out.add_(offset)
        return torch.clamp(out, low, high, out=out)

    def inv_action(self, action: Any) -> Any:
        if isinstance(action, torch.Tensor):
            return self._apply(self.in_keys_inv[0], action)
        action = action.copy()
        for key in self.in_keys_inv:
            action.set(key, self._apply(key, action.get(key)))
        return action

    def __repr__(self) -> str:
        return f"ActionScaling(in_keys_inv={self.in_keys_inv}, low={self.low}, high={self.high})"
