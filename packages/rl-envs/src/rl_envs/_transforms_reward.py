"""Element-wise value transforms: ClipTransform, RewardClipping, SignTransform and
RewardScaling (TorchRL names and meaning).

Each works on observation keys (root and ``"next"``) or reward keys (``"next"``), in
one op over the whole batch written into the transform's preallocated leaf, and
updates the spec's bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rl_envs._composite import Composite
from rl_envs._keys import OBSERVATION, REWARD
from rl_envs._specs import Bounded, TensorSpec, Unbounded
from rl_envs._transforms_map import MapTransform, key_list
from rl_envs.exceptions import SpecError

__all__ = ["ClipTransform", "RewardClipping", "RewardScaling", "SignTransform"]


def _limit(value: Any, dtype: torch.dtype, which: str) -> torch.Tensor:
    """``value`` as a tensor of ``dtype``; None becomes the dtype's own extreme."""
    if value is not None:
        return torch.as_tensor(value).to(dtype)
    if dtype.is_floating_point:
        return torch.tensor(float("-inf") if which == "low" else float("inf"), dtype=dtype)
    info = torch.iinfo(dtype)
    return torch.tensor(info.min if which == "low" else info.max, dtype=dtype)


class ClipTransform(MapTransform):
    """Clip values into ``[low, high]``; the spec becomes ``Bounded`` accordingly.

    TorchRL's ``ClipTransform``. The new bounds are the intersection of the old ones
    (when the spec was ``Bounded``) and ``[low, high]``.

    With ``in_keys_inv``, actions are clipped on their way into the env, to ``[low,
    high]`` intersected with the env's own bounds (the env's bounds alone when neither is
    given): an unbounded policy (PPO's Gaussian) then acts on a ``Box`` env, as
    gymnasium's ``ClipAction`` does. The outer action spec becomes ``Unbounded`` and the
    stored action is the policy's own, so its log-prob stays exact.

    Args:
        in_keys: observation or reward keys (default ``["observation"]``, or none when
            ``in_keys_inv`` is given).
        out_keys: where the results go (default: in place of ``in_keys``).
        in_keys_inv: action keys to clip on the way in, or None.
        low: lower bound (scalar or tensor broadcastable to the event shape), or None.
        high: upper bound, or None.

    Raises:
        ValueError: neither bound given for ``in_keys``, or ``low > high``.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> clip = ClipTransform(low=-0.5, high=0.5)
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), clip)
        >>> obs = env.rollout(5)["next", "observation"]
        >>> bool(obs.abs().max() <= 0.5), env.observation_spec["observation"].high.tolist()[0]
        (True, [0.5, 0.5, 0.5])
        >>> env.close()
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2),
        ...                      ClipTransform(in_keys_inv=["action"]))
        >>> (type(env.action_spec).__name__,
        ...  env.transform[0].inv_action(torch.tensor([[9.0], [-1.0]])).tolist())
        ('Unbounded', [[2.0], [-1.0]])
        >>> env.close()
    """

    _default_keys: tuple[Any, ...] = (OBSERVATION,)

    def __init__(
        self,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        *,
        in_keys_inv: Sequence[Any] | None = None,
        low: Any = None,
        high: Any = None,
    ):
        name = type(self).__name__
        self.in_keys_inv = key_list(in_keys_inv, [])
        if self.in_keys_inv and in_keys is None:
            in_keys = []
        if low is None and high is None and (in_keys is None or in_keys):
            raise ValueError(f"{name}: give low and/or high, received neither")
        if (
            low is not None
            and high is not None
            and bool((torch.as_tensor(low) > torch.as_tensor(high)).any())
        ):
            raise ValueError(f"{name}: low must be <= high, received low={low!r}, high={high!r}")
        super().__init__(key_list(in_keys, self._default_keys), out_keys)
        self.low, self.high = low, high
        self._bounds: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
        self._np_bounds: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        low = _limit(self.low, spec.dtype, "low").to(spec.device)
        high = _limit(self.high, spec.dtype, "high").to(spec.device)
        self._bounds[key] = (low, high)
        self._np_bounds[key] = (low.cpu().numpy(), high.cpu().numpy())
        if isinstance(spec, Bounded):
            low, high = torch.maximum(spec.low, low), torch.minimum(spec.high, high)
            low = torch.minimum(low, high)  # disjoint ranges: everything clips to high
        return Bounded(low, high, spec.shape, spec.device, spec.dtype)

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        low, high = self._bounds[key]
        return torch.maximum(torch.minimum(x, high.to(x.device)), low.to(x.device))

    def _write_all(self, key: Any, src: torch.Tensor, dst: torch.Tensor) -> None:
        low, high = self._bounds[key]
        torch.minimum(src, high, out=dst)
        torch.maximum(dst, low, out=dst)

    def _write_all_np(self, key: Any, src: np.ndarray, dst: np.ndarray) -> None:
        low, high = self._np_bounds[key]
        np.minimum(src, high, out=dst)
        np.maximum(dst, low, out=dst)

    def transform_action_spec(self, spec: Composite) -> Composite:
        for key in self.in_keys_inv:
            inner = spec.get(key)
            if inner is None or not inner.dtype.is_floating_point:
                raise SpecError(
                    f"{type(self).__name__}: in_keys_inv {key!r} must be a floating-point action "
                    f"key; action spec: {spec!r}"
                )
            low = _limit(self.low, inner.dtype, "low").to(inner.device)
            high = _limit(self.high, inner.dtype, "high").to(inner.device)
            if isinstance(inner, Bounded):  # the env's bounds, per element, batch included
                low, high = torch.maximum(inner.low, low), torch.minimum(inner.high, high)
            self._bounds[("inv", key)] = (low, high)
            spec[key] = Unbounded(inner.shape, inner.device, inner.dtype)
        return spec

    def inv_action(self, action: Any) -> Any:
        if not self.in_keys_inv:
            return action
        if isinstance(action, torch.Tensor):
            low, high = self._bounds[("inv", self.in_keys_inv[0])]
            return torch.maximum(torch.minimum(action, high), low)
        action = action.copy()
        for key in self.in_keys_inv:
            low, high = self._bounds[("inv", key)]
            action.set(key, torch.maximum(torch.minimum(action.get(key), high), low))
        return action



class RewardClipping(ClipTransform):
    """Clip the reward into ``[clamp_min, clamp_max]`` (TorchRL's ``RewardClipping``).

    Args:
        clamp_min: lower bound, or None.
        clamp_max: upper bound, or None.
        in_keys: reward keys (default ``["reward"]``).
        out_keys: where the results go (default: in place of ``in_keys``).

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), RewardClipping(-1.0, 0.0))
        >>> bool(env.rollout(5)["next", "reward"].min() >= -1.0), env.reward_spec.low.min().item()
        (True, -1.0)
        >>> env.close()
    """

    _default_keys = (REWARD,)

    def __init__(
        self,
        clamp_min: float | None = None,
        clamp_max: float | None = None,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
    ):
        super().__init__(in_keys, out_keys, low=clamp_min, high=clamp_max)
        self.clamp_min, self.clamp_max = clamp_min, clamp_max


class SignTransform(MapTransform):
    """Replace values by their sign (-1, 0 or 1): Atari's reward clipping.

    TorchRL's ``SignTransform``; the spec becomes ``Bounded(-1, 1)`` of the same dtype.

    Args:
        in_keys: reward or observation keys (default ``["reward"]``).
        out_keys: where the results go (default: in place of ``in_keys``).

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), SignTransform())
        >>> signs = set(env.rollout(5)["next", "reward"].flatten().tolist())
        >>> signs <= {-1.0, 0.0}, env.reward_spec.high.max().item()
        (True, 1.0)
        >>> env.close()
    """

    def __init__(self, in_keys: Sequence[Any] | None = None, out_keys: Sequence[Any] | None = None):
        super().__init__(key_list(in_keys, [REWARD]), out_keys)

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        if spec.dtype == torch.bool:
            raise SpecError(f"SignTransform: {key!r} must be numeric, received {spec.dtype}")
        return Bounded(-1, 1, spec.shape, spec.device, spec.dtype)

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        return torch.sign(x)

    def _write_all(self, key: Any, src: torch.Tensor, dst: torch.Tensor) -> None:
        torch.sign(src, out=dst)

    def _write_all_np(self, key: Any, src: np.ndarray, dst: np.ndarray) -> None:
        np.sign(src, out=dst)


class RewardScaling(MapTransform):
    """Affine reward: ``reward * scale + loc`` (or ``(reward - loc) / scale``).

    TorchRL's ``RewardScaling``.

    Args:
        loc: location (scalar or tensor broadcastable to the event shape).
        scale: scale (non-zero).
        in_keys: keys (default ``["reward"]``).
        out_keys: where the results go (default: in place of ``in_keys``).
        standard_normal: the formula ``(x - loc) / scale`` when True.

    Raises:
        ValueError: ``scale`` has a zero entry.
        SpecError: when the env is built, a key is not floating point.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> scaling = RewardScaling(loc=1.0, scale=0.5)
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), scaling)
        >>> env.rollout(3)["next", "reward"][0, :, 0].tolist()
        [1.5, 1.5, 1.5]
        >>> env.close()
    """

    def __init__(
        self,
        loc: Any,
        scale: Any,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        standard_normal: bool = False,
    ):
        if bool((torch.as_tensor(scale) == 0).any()):
            raise ValueError(f"RewardScaling: scale must be non-zero, received {scale!r}")
        super().__init__(key_list(in_keys, [REWARD]), out_keys)
        self.loc, self.scale, self.standard_normal = loc, scale, standard_normal
        self._affine: dict[Any, tuple[torch.Tensor, torch.Tensor]] = {}
        self._np_affine: dict[Any, tuple[np.ndarray, np.ndarray]] = {}

    def _out_spec(self, key: Any, spec: TensorSpec, batch_ndim: int) -> TensorSpec:
        if not spec.dtype.is_floating_point:
            raise SpecError(f"RewardScaling: {key!r} must be floating point, received {spec.dtype}")
        loc = torch.as_tensor(self.loc, dtype=spec.dtype, device=spec.device)
        scale = torch.as_tensor(self.scale, dtype=spec.dtype, device=spec.device)
        if self.standard_normal:  # (x - loc) / scale == x * (1 / scale) + (-loc / scale)
            loc, scale = -loc / scale, 1.0 / scale
        self._affine[key] = (loc, scale)
        self._np_affine[key] = (loc.cpu().numpy(), scale.cpu().numpy())
        if not isinstance(spec, Bounded):
            return Unbounded(spec.shape, spec.device, spec.dtype)
        a, b = spec.low * scale + loc, spec.high * scale + loc
        return Bounded(
            torch.minimum(a, b), torch.maximum(a, b), spec.shape, spec.device, spec.dtype
        )

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        loc, scale = self._affine[key]
        return x * scale.to(x.device) + loc.to(x.device)

    def _write_all(self, key: Any, src: torch.Tensor, dst: torch.Tensor) -> None:
        loc, scale = self._affine[key]
        torch.mul(src, scale, out=dst)
        dst.add_(loc)

    def _write_all_np(self, key: Any, src: np.ndarray, dst: np.ndarray) -> None:
        loc, scale = self._np_affine[key]
        np.multiply(src, scale, out=dst)
        np.add(dst, loc, out=dst)
