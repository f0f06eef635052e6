"""The shipped episode-bookkeeping transforms: StepCounter, InitTracker and RewardSum
(TorchRL names and semantics). The observation/state transforms (DoubleToFloat,
TensorDictPrimer, ObservationNorm) are in :mod:`rl_envs._transforms_obs`.

Per-step work runs on numpy views of the CPU buffers (a small numpy op costs a fraction
of a torch dispatch) and on tensors otherwise; every op writes into preallocated leaves.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_envs._composite import Composite
from rl_envs._keys import DONE, EPISODE_REWARD, IS_INIT, REWARD, STEP_COUNT, TRUNCATED
from rl_envs._specs import Bounded, TensorSpec, Unbounded
from rl_envs._specs_discrete import Categorical
from rl_envs._transforms import Transform

__all__ = ["InitTracker", "RewardSum", "StepCounter", "new_leaf"]


def new_leaf(td: TensorDictBase, key: Any, spec: TensorSpec) -> tuple[TensorDictBase, torch.Tensor]:
    """A shallow copy of ``td`` with a fresh zero leaf for ``key``."""
    out = td.copy()
    leaf = spec.zero()
    out.set(key, leaf)
    return out, leaf


def _logical_not(x: Any, out: Any) -> Any:
    return (
        np.logical_not(x, out=out) if isinstance(x, np.ndarray) else torch.logical_not(x, out=out)
    )


class StepCounter(Transform):
    """Count the steps of each episode in ``step_count``; truncate at ``max_steps``.

    Args:
        max_steps: when set, an episode reaching it gets ``truncated = done = True`` and is
            reset (its final observation stays in ``("next", "observation")``).
        step_count_key: where the count is written (root and ``"next"``, ``[*B, 1]`` int64).

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("Pendulum-v1", num_envs=2), StepCounter(3))
        >>> env.rollout(3)["next", "step_count"][0, :, 0].tolist()
        [1, 2, 3]
        >>> env.close()
    """

    def __init__(self, max_steps: int | None = None, *, step_count_key: str = STEP_COUNT):
        if max_steps is not None and (not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(
                f"StepCounter: max_steps must be a positive int or None, received {max_steps!r}"
            )
        super().__init__([], [step_count_key])
        self.max_steps = max_steps
        self.step_count_key = step_count_key

    def transform_observation_spec(self, spec: Composite) -> Composite:
        shape = (*spec.shape, 1)
        if self.max_steps is None:
            spec[self.step_count_key] = Unbounded(shape, spec.device, torch.int64)
        else:
            spec[self.step_count_key] = Bounded(0, self.max_steps, shape, spec.device, torch.int64)
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        spec = Unbounded((*root.batch_size, 1), root.device, torch.int64)
        root, r = new_leaf(root, self.step_count_key, spec)
        next, n = new_leaf(next, self.step_count_key, spec)
        self._r, self._n = self._view(r), self._view(n)
        self._done, self._trunc = self._view(next.get(DONE)), self._view(next.get(TRUNCATED))
        self._tmp = self._view(torch.zeros_like(next.get(DONE)))
        self._tmp2 = self._view(torch.zeros_like(next.get(DONE)))
        return root, next

    def on_reset(self, mask: torch.Tensor | None) -> None:
        self._r[self._rows(mask, self._r)] = 0

    def on_step(self) -> torch.Tensor | None:
        r, n, done, tmp = self._r, self._n, self._done, self._tmp
        n[...] = r
        n += 1
        finished = None
        if self.max_steps is not None:
            hit = (
                (n >= self.max_steps) if isinstance(n, np.ndarray) else torch.ge(n, self.max_steps)
            )
            if hit.any():
                _logical_not(done, tmp)
                tmp &= hit  # reached the limit and not already done: this transform ends them
                self._trunc |= hit
                done |= hit
                finished = (
                    torch.as_tensor(tmp[..., 0].copy())
                    if isinstance(tmp, np.ndarray)
                    else tmp[..., 0].clone()
                )
        _logical_not(done, self._tmp2)
        r[...] = n
        r *= self._tmp2
        return finished


class InitTracker(Transform):
    """Write ``is_init``: ``True`` on the root of an episode's first step, else ``False``.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), InitTracker())
        >>> data = env.rollout(3)
        >>> data["is_init"][:, 0].all().item(), data["is_init"][:, 1:].any().item()
        (True, False)
        >>> env.close()
    """

    def __init__(self, init_key: str = IS_INIT):
        super().__init__([], [init_key])
        self.init_key = init_key

    def transform_observation_spec(self, spec: Composite) -> Composite:
        spec[self.init_key] = Categorical(2, (*spec.shape, 1), spec.device, torch.bool)
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        spec = Categorical(2, (*root.batch_size, 1), root.device, torch.bool)
        root, r = new_leaf(root, self.init_key, spec)
        next, _ = new_leaf(next, self.init_key, spec)
        self._r, self._done = self._view(r), self._view(next.get(DONE))
        return root, next

    def on_reset(self, mask: torch.Tensor | None) -> None:
        self._r[self._rows(mask, self._r)] = True

    def on_step(self) -> None:
        self._r[...] = self._done
        return None


class RewardSum(Transform):
    """Running sum of the reward over the episode, in ``episode_reward``.

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), RewardSum())
        >>> env.rollout(4, break_when_any_done=False)["next", "episode_reward"][0, :, 0].tolist()
        [1.0, 2.0, 3.0, 4.0]
        >>> env.close()
    """

    def __init__(self, in_keys: Sequence[Any] | None = None, out_keys: Sequence[Any] | None = None):
        in_keys = [REWARD] if in_keys is None else list(in_keys)
        out_keys = [EPISODE_REWARD] if out_keys is None and in_keys == [REWARD] else out_keys
        if out_keys is None:
            out_keys = [
                f"episode_{k}" if isinstance(k, str) else (*k[:-1], f"episode_{k[-1]}")
                for k in in_keys
            ]
        if len(out_keys) != len(in_keys):
            raise ValueError(
                f"RewardSum: in_keys and out_keys must have the same length, received {in_keys} "
                f"and {out_keys}"
            )
        super().__init__(in_keys, out_keys)

    def transform_observation_spec(self, spec: Composite) -> Composite:
        for out in self.out_keys:
            spec[out] = Unbounded((*spec.shape, 1), spec.device, torch.float32)
        return spec

    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        self._io = []
        for key, out in zip(self.in_keys, self.out_keys, strict=True):
            src = next.get(key)
            spec = Unbounded((*root.batch_size, 1), root.device, torch.float32)
            root, r = new_leaf(root, out, spec)
            next, n = new_leaf(next, out, spec)
            self._io.append((self._view(src), self._view(r), self._view(n)))
        self._done = self._view(next.get(DONE))
        self._not_done = self._view(torch.zeros_like(next.get(DONE)))
        return root, next

    def on_reset(self, mask: torch.Tensor | None) -> None:
        for _, r, _ in self._io:
            r[self._rows(mask, r)] = 0.0

    def on_step(self) -> None:
        _logical_not(self._done, self._not_done)
        for src, r, n in self._io:
            n[...] = r
            n += src
            r[...] = n
            r *= self._not_done
        return None
