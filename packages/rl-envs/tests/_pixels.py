"""Test envs with image observations, written with the simple pair (``_reset``/``_step``)."""

from __future__ import annotations

import torch
from rl_envs import Bounded, Categorical, Composite, EnvBase, Unbounded
from tensordict import TensorDict


class PixelEnv(EnvBase):
    """``n`` sub-envs showing random frames of ``shape`` (uint8 by default).

    Sub-env ``i`` terminates after ``limit + i`` steps and is auto-reset, so sub-envs
    finish at different steps (mid-batch resets). ``frame_id`` counts every frame the
    env ever showed, per sub-env, so a reference can tell frames apart.
    """

    def __init__(self, n=3, shape=(6, 5, 3), limit=3, dtype=torch.uint8, seed=0):
        super().__init__(batch_size=(n,))
        self.n, self.shape, self.dtype = n, tuple(shape), dtype
        if dtype == torch.uint8:
            pix = Bounded(0, 255, (n, *shape), dtype=torch.uint8)
        else:
            pix = Bounded(0.0, 1.0, (n, *shape), dtype=dtype)
        self.observation_spec = Composite(observation=pix, frame_id=Unbounded((n, 1)), shape=(n,))
        self.action_spec = Categorical(2, (n,))
        self.reward_spec = Unbounded((n, 1))
        self.limit = limit + torch.arange(n).unsqueeze(-1)
        self.t = torch.zeros(n, 1, dtype=torch.int64)
        self.frame_id = torch.zeros(n, 1)
        self.gen = torch.Generator().manual_seed(seed)

    def _frames(self, k):
        if self.dtype == torch.uint8:
            return torch.randint(0, 256, (k, *self.shape), generator=self.gen, dtype=torch.uint8)
        return torch.rand((k, *self.shape), generator=self.gen, dtype=self.dtype)

    def _reset(self, td):
        mask = torch.ones(self.n, dtype=torch.bool) if td is None else td["_reset"].reshape(self.n)
        self.t[mask] = 0
        self.frame_id[mask] += 1
        return TensorDict(
            observation=self._frames(self.n), frame_id=self.frame_id.clone(), batch_size=(self.n,)
        )

    def _step(self, td):
        self.t += 1
        self.frame_id += 1
        reward = torch.randn(self.n, 1, generator=self.gen) * 3
        return TensorDict(
            observation=self._frames(self.n),
            frame_id=self.frame_id.clone(),
            reward=reward,
            terminated=self.t >= self.limit,
            batch_size=(self.n,),
        )


def ones_policy(n):
    action = torch.ones(n, dtype=torch.int64)
    return lambda td: td.set("action", action.clone())

