"""``NormalizeReward``: rewards divided by the running std of the discounted return.

Gymnasium's ``NormalizeReward`` wrapper (as CleanRL's and RL-Zoo's PPO on MuJoCo use it),
as a transform. Each sub-env keeps its discounted return of the running episode,

    G <- gamma * G + r        (G = 0 at the start of each episode)

and after each step the running mean and variance of every sub-env's ``G`` (Chan et al.'s
parallel update, float64, starting from mean 0, variance 1 and a count of 1e-4 as
gymnasium's ``RunningMeanStd``) give the scale: ``r / sqrt(var + eps)``. The reward is not
centred: a constant reward per step (Hopper's alive bonus) keeps its sign and meaning.

Unlike gymnasium's wrapper, ``G`` restarts at every episode start, truncation included
(gymnasium clears it on termination only, for backward compatibility).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_envs._keys import REWARD
from rl_envs._transforms_map import key_list
from rl_envs._transforms_vecnorm import SharedStatsTransform, _name

__all__ = ["NormalizeReward"]


class NormalizeReward(SharedStatsTransform):
    """Divide rewards by the running std of each sub-env's discounted return.

    Gymnasium's ``NormalizeReward`` (same statistics, ``gamma`` and ``epsilon``; see the
    module notes for the one difference). The statistics are float64 tensors in shared
    memory, so the workers of a multi-process collector update one set (as ``VecNorm``'s);
    ``state_dict()`` holds them for checkpoints; ``freeze()`` stops the updates.

    Args:
        gamma: the discount of the return whose std scales the reward.
        eps: added to the variance before the square root.
        in_keys: reward keys (default ``["reward"]``).
        out_keys: where the results go (default: in place of ``in_keys``).
        lock: a ``multiprocessing`` lock held during updates (optional).
        frozen: start frozen.

    Raises:
        ValueError: ``gamma`` outside [0, 1] or ``eps`` not positive.
        SpecError: when the env is built, a key is not floating point, or its shape
            differs from the statistics' (from a loaded state).

    Examples:
        >>> from rl_envs import GymEnv, TransformedEnv
        >>> env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2), NormalizeReward(gamma=0.9))
        >>> data = env.rollout(3, break_when_any_done=False)
        >>> [round(r, 3) for r in data["next", "reward"][0, :, 0].tolist()]  # 1 / std(G)
        [99.999, 2.222, 1.432]
        >>> sorted(env.transform[0].state_dict())
        ['reward_count', 'reward_mean', 'reward_var']
        >>> env.close()
    """

    _parts = ("mean", "var", "count")
    _initial = {"var": 1.0, "count": 1e-4}
    _unbound = ("_returns", "_scale", "_np_stats")

    def __init__(
        self,
        gamma: float = 0.99,
        eps: float = 1e-8,
        in_keys: Sequence[Any] | None = None,
        out_keys: Sequence[Any] | None = None,
        *,
        lock: Any = None,
        frozen: bool = False,
    ):
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"NormalizeReward: gamma must be in [0, 1], received {gamma!r}")
        if not eps > 0.0:
            raise ValueError(f"NormalizeReward: eps must be > 0, received {eps!r}")
        super().__init__(key_list(in_keys, [REWARD]), out_keys, lock, frozen)
        self.gamma, self.eps = float(gamma), float(eps)
        self._returns: dict[Any, np.ndarray] = {}
        self._scale: dict[Any, torch.Tensor] = {}
        self._np_stats: dict[Any, tuple[np.ndarray, ...]] = {}

    def scale(self, key: Any = REWARD) -> torch.Tensor:
        """The current factor ``1 / sqrt(var + eps)`` of ``key`` (float64, event shape)."""
        return (self._stats[f"{_name(key)}_var"] + self.eps).rsqrt()

    # -- transform ----------------------------------------------------------------------
    def bind(
        self, root: TensorDictBase, next: TensorDictBase
    ) -> tuple[TensorDictBase, TensorDictBase]:
        root, next = super().bind(root, next)
        for key, src_n, *_ in self._io:
            self._returns[key] = np.zeros(src_n.shape, dtype=np.float64)  # per sub-env: ours
            self._scale[key] = self.scale(key).to(src_n.dtype)  # on the CPU, numpy writes it
            stats = [self._stats[f"{_name(key)}_{p}"].numpy() for p in self._parts]
            self._np_stats[key] = (*stats, self._scale[key].numpy())  # views, bound once
        return root, next

    def _observe_step(self) -> None:
        # numpy on small arrays throughout: one MuJoCo env's step is a few tens of us
        done = self._done_np if self._done_np is not None else self._done.cpu().numpy()
        for (key, src_n, *_), views in zip(self._io, self._np_io, strict=True):
            reward = views[1] if views is not None else src_n.detach().cpu().numpy()
            g = self._returns[key]
            mean, var, count, scale = self._np_stats[key]
            if g.size == 1 and mean.size == 1 and not self.frozen and self.lock is None:
                _step_one(g, reward, self.gamma, self.eps, mean, var, count, scale)
            else:
                np.multiply(g, self.gamma, out=g)
                np.add(g, reward, out=g)
                if not self.frozen:
                    with self._locked():
                        _merge(mean, var, count, g.reshape(-1, *mean.shape))
                np.divide(1.0, np.sqrt(var + self.eps), out=scale, casting="unsafe")
            g[done] = 0.0  # an episode ended: the next step starts a new return

    def _observe_reset(self, mask: torch.Tensor | None) -> None:
        for g in self._returns.values():
            if mask is None:
                g.fill(0.0)
            else:
                g[mask.cpu().numpy()] = 0.0

    def _map(self, x: torch.Tensor, key: Any) -> torch.Tensor:
        return x * self._scale[key].to(x.device)

    def _write_all(self, key: Any, src: torch.Tensor, dst: torch.Tensor) -> None:
        torch.mul(src, self._scale[key].to(src.device), out=dst)

    def _write_all_np(self, key: Any, src: np.ndarray, dst: np.ndarray) -> None:
        np.multiply(src, self._np_stats[key][3], out=dst)

    def __repr__(self) -> str:
        return (
            f"NormalizeReward(in_keys={self.in_keys}, gamma={self.gamma}, eps={self.eps}, "
            f"frozen={self.frozen})"
        )


def _step_one(g: np.ndarray, reward: np.ndarray, gamma: float, eps: float, mean: np.ndarray,
              var: np.ndarray, count: np.ndarray, scale: np.ndarray) -> None:
    """One sub-env, one reward value: the discounted return, :func:`_merge` of it and the
    scale, in Python floats (float64, the same operations in the same order: the same
    bits), where each of the ~20 numpy calls on one-element arrays costs about a
    microsecond (a MuJoCo env's step is ~200 us)."""
    x = float(g.flat[0]) * gamma + float(reward.flat[0])
    g.flat[0] = x
    c, m = float(count.flat[0]), float(mean.flat[0])
    total = c + 1
    delta = x - m  # _merge with n = 1: the batch mean is x, its variance 0
    v = (float(var.flat[0]) * c + (0.0 + delta * delta * (c * 1 / total))) / total
    mean.flat[0], var.flat[0], count.flat[0] = m + delta * (1 / total), v, total
    scale.flat[0] = 1.0 / math.sqrt(v + eps)


def _merge(mean: np.ndarray, var: np.ndarray, count: np.ndarray, batch: np.ndarray) -> None:
    """Merge ``batch`` (``[n, *event]``) into the running ``mean``, ``var`` and ``count``, in
    place (Chan et al.'s parallel update, as gymnasium's ``RunningMeanStd``)."""
    n, c = batch.shape[0], float(count)
    b_mean = np.add.reduce(batch, 0) / n
    dev = batch - b_mean
    b_var = np.add.reduce(dev * dev, 0) / n
    total = c + n
    delta = b_mean - mean
    var *= c
    var += b_var * n + delta * delta * (c * n / total)
    var /= total
    mean += delta * (n / total)
    count[...] = total
