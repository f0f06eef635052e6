"""A small TorchRL-style env (the simple ``_reset``/``_step`` pair) used by the tests."""

from __future__ import annotations

import torch
from rl_envs import Bounded, Categorical, Composite, EnvBase, Unbounded
from tensordict import TensorDict


class CountEnv(EnvBase):
    """Each sub-env counts up by its action (0 or 1); sub-env ``i`` terminates at ``limit + i``.

    Reports only ``terminated`` (``done`` and ``truncated`` are completed by EnvBase) unless
    ``report`` says otherwise.
    """

    def __init__(self, n: int = 3, limit: int = 3, report: str = "terminated"):
        super().__init__(batch_size=(n,))
        self.observation_spec = Composite(observation=Unbounded((n, 1)), shape=(n,))
        self.action_spec = Categorical(2, (n,))
        self.reward_spec = Bounded(0.0, 1.0, (n, 1))
        self.limit = limit + torch.arange(n).unsqueeze(-1).float()
        self.count = torch.zeros(n, 1)
        self.report = report
        self.seed_seen = None
        self.resets = 0

    def _reset(self, td):
        self.resets += 1
        mask = torch.ones(self.batch_size[0], 1, dtype=torch.bool) if td is None else td["_reset"]
        self.count = torch.where(mask, 0.0, self.count)
        return TensorDict(observation=self.count.clone(), batch_size=self.batch_size)

    def _step(self, td):
        self.count = self.count + td["action"].unsqueeze(-1).float()
        flag = self.count >= self.limit
        out = TensorDict(
            observation=self.count.clone(),
            reward=torch.ones_like(self.count),
            batch_size=self.batch_size,
        )
        out[self.report] = flag
        return out

    def _set_seed(self, seed):
        self.seed_seen = seed
