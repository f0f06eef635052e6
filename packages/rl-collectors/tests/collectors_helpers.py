"""Picklable policies and env factories for the collector tests (imported by spawned workers).

Tests put this directory on ``sys.path`` (``monkeypatch.syspath_prepend``), which spawn
passes on to the workers, so ``collectors_helpers.X`` resolves there too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import psutil
import torch
from tensordict.nn import TensorDictModule


class Greedy(torch.nn.Module):
    """``action = argmax(linear(observation))`` plus the logits."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.linear(obs)
        return logits, logits.argmax(-1)


def set_preference(policy: TensorDictModule, action: int) -> None:
    """Set a greedy policy's weights so that it always picks ``action`` (0 or 1)."""
    with torch.no_grad():
        policy.module.linear.weight.zero_()
        policy.module.linear.bias.copy_(
            torch.tensor([1.0, -1.0]) if action == 0 else torch.tensor([-1.0, 1.0])
        )


def greedy_policy(prefer: int | None = None) -> TensorDictModule:
    """A deterministic policy; ``prefer`` biases it to always pick that action."""
    policy = TensorDictModule(Greedy(), in_keys=["observation"], out_keys=["logits", "action"])
    if prefer is not None:
        set_preference(policy, prefer)
    return policy


def check_weight_update(collector: Any, update: Callable[[TensorDictModule], int]) -> None:
    """A collector of ``greedy_policy(prefer=1)`` workers follows ``update``'s new weights.

    Args:
        collector: the collector, still collecting with its original ``prefer=1`` policy.
        update: sends a policy's weights to the workers and returns the new version.
    """
    it = iter(collector)
    assert bool((next(it)["action"] == 1).all())
    version = update(greedy_policy(prefer=0))
    batch = next(it)
    assert bool((batch["action"] == 0).all())
    assert bool((batch["collector", "policy_version"] == version).all())


class Bomb(torch.nn.Module):
    """Acts like ``Greedy`` and raises on call number ``after`` (the probe is call 1)."""

    def __init__(self, after: int = 3) -> None:
        super().__init__()
        self.inner = Greedy()
        self.after, self.calls = after, 0

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls += 1
        if self.calls >= self.after:
            raise RuntimeError("boom from the policy")
        return self.inner(obs)


def bomb_policy(after: int = 3) -> TensorDictModule:
    return TensorDictModule(Bomb(after), in_keys=["observation"], out_keys=["logits", "action"])


def make_cartpole(num_envs: int = 2):
    from rl_envs import GymEnv

    return GymEnv("CartPole-v1", num_envs=num_envs, categorical_action_encoding=True)


def sleep_forever() -> None:
    import time

    time.sleep(3600)


def children() -> set[int]:
    """Live child processes of this one (no zombies, no multiprocessing resource tracker)."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(
                p.cmdline()
            ):
                out.add(p.pid)
        except psutil.NoSuchProcess:
            pass
    return out
