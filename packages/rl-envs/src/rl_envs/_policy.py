"""``RandomPolicy``: uniform random actions from an action spec; ``device_cast``: a policy
run on its parameters' device (``rollout(auto_cast_to_device=True)``)."""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDictBase

from rl_envs._composite import Composite
from rl_envs._keys import ACTION

__all__ = ["RandomPolicy", "device_cast"]


class RandomPolicy:
    """Write a random valid action into the input TensorDict.

    Args:
        action_spec: the env's ``action_spec`` (a leaf) or ``full_action_spec``.
        action_key: where a leaf spec's action is written.
        generator: optional ``torch.Generator`` for reproducible actions.

    Examples:
        >>> from tensordict import TensorDict
        >>> from rl_envs import Categorical
        >>> policy = RandomPolicy(Categorical(2, shape=(4,)))
        >>> policy(TensorDict(batch_size=(4,)))["action"].shape
        torch.Size([4])
    """

    def __init__(
        self, action_spec: Any, action_key: Any = ACTION, generator: torch.Generator | None = None
    ):
        self.action_spec = action_spec
        self.action_key = action_key
        self.generator = generator

    def __call__(self, tensordict: TensorDictBase) -> TensorDictBase:
        if isinstance(self.action_spec, Composite):
            tensordict.update(self.action_spec.rand(generator=self.generator))
        else:
            tensordict.set(self.action_key, self.action_spec.rand(generator=self.generator))
        return tensordict

    def __repr__(self) -> str:
        return f"RandomPolicy({self.action_spec!r})"


def device_cast(policy: Any, env_device: Any) -> Any:
    """``rollout(auto_cast_to_device=True)``'s policy: its input moved to the device of its
    parameters, its outputs written back on the env's (the loop sets them into its input);
    ``policy`` itself where the devices agree or it has no parameters."""
    params = getattr(policy, "parameters", None)
    first = next(iter(params()), None) if callable(params) else None
    if first is None or env_device is None or first.device == torch.device(env_device):
        return policy
    device, back = first.device, torch.device(env_device)

    def call(tensordict: TensorDictBase) -> TensorDictBase:
        moved = tensordict.to(device)
        out = policy(moved)  # a policy that writes in place returns None or its input
        return (moved if out is None else out).to(back)

    return call
