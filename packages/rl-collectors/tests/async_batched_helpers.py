"""Envs and policies for the AsyncBatchedCollector tests (importable by spawned workers).

``SleepyEnv`` is a real env: each step sleeps a configured time (``time.sleep``, which
releases the GIL like an I/O-bound or C simulator would) and the observation counts the
steps of the running episode, so a test can check that every trajectory is contiguous
and complete from the data alone.
"""

from __future__ import annotations

import random
import time
import warnings
from functools import partial
from typing import Any

import torch
from rl_collectors import AsyncBatchedCollector
from rl_envs import Categorical, Composite, EnvBase, Unbounded
from tensordict import TensorDict
from tensordict.nn import TensorDictModule


class SleepyEnv(EnvBase):
    """A single env: observation ``[t]`` (steps into the episode), episode length ``episode_len``.

    Args:
        sleep_s: seconds each step sleeps; a pair ``(low, high)`` draws it uniformly per step.
        episode_len: steps per episode (terminated at the last one).
        fail_at: raise ``RuntimeError`` on this step (counted over the env's life).
    """

    def __init__(
        self,
        sleep_s: float | tuple[float, float] = 0.0,
        episode_len: int = 5,
        fail_at: int | None = None,
    ):
        super().__init__(batch_size=())
        self.observation_spec = Composite(observation=Unbounded((1,)), shape=())
        self.action_spec = Categorical(2, shape=())
        self.sleep_s, self.episode_len, self.fail_at = sleep_s, episode_len, fail_at
        self.t, self.steps = 0, 0

    def _reset(self, td):
        self.t = 0
        return TensorDict(observation=torch.zeros(1), batch_size=())

    def _step(self, td):
        self.steps += 1
        if self.fail_at is not None and self.steps >= self.fail_at:
            raise RuntimeError("boom from SleepyEnv")
        s = self.sleep_s
        time.sleep(random.uniform(*s) if isinstance(s, tuple) else s)
        self.t += 1
        done = torch.tensor([self.t >= self.episode_len])
        return TensorDict(
            observation=torch.tensor([float(self.t)]),
            reward=torch.ones(1),
            terminated=done,
            batch_size=(),
        )


def make_sleepy(
    sleep_s: float | tuple[float, float] = 0.0, episode_len: int = 5, fail_at: int | None = None
) -> SleepyEnv:
    return SleepyEnv(sleep_s, episode_len, fail_at)


class ParityNet(torch.nn.Module):
    """``action = (t mod 2)`` from the observation, plus a float output ``score = 2 * obs``."""

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return obs[..., 0].long() % 2, 2 * obs


def parity_policy() -> TensorDictModule:
    return TensorDictModule(ParityNet(), in_keys=["observation"], out_keys=["action", "score"])


def sleepy_collector(
    sleep_s: float, episode_len: int, num_envs: int, **kwargs: Any
) -> AsyncBatchedCollector:
    """An ``AsyncBatchedCollector`` of ``num_envs`` ``SleepyEnv`` driven by the parity
    policy; ``kwargs`` go to the collector."""
    make = partial(make_sleepy, sleep_s, episode_len)
    return AsyncBatchedCollector(make, parity_policy(), num_envs=num_envs, **kwargs)


def warning_shown() -> bool:
    """Whether a ``UserWarning`` would reach the user in this process."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.warn("probe warning from a worker", UserWarning, stacklevel=1)
    return bool(caught)
