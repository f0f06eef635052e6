"""``FastPathEnv``: the typed contract between an env and what drives its fast path."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch
from tensordict import TensorDictBase

__all__ = ["FastPathEnv"]


@runtime_checkable
class FastPathEnv(Protocol):
    """What a collector (or a batched env) needs from an env to step it with no per-step
    TensorDict: every :class:`EnvBase` (``GymEnv``, ``SerialEnv``, ``ParallelEnv``,
    ``TransformedEnv``, your subclasses) is one.

    The env owns two TensorDicts, ``root`` (the state a step starts from) and ``next``
    (what the step produced), of batch size ``batch_size``. ``fast_reset`` and
    ``fast_step`` rewrite their leaves **in place** and return the same two objects on
    every call, so a driver caches the leaves once and copies from them after each call.

    Attributes:
        batch_size: the env's batch shape ``[*B]``.
        device: where the env's tensors live.
        action_key: the single action key (``"action"``); ``action_keys`` lists them all.
        full_action_spec: the Composite of every action key.
        action_checks_left: how many more ``fast_step`` calls check the action's values
            against the spec (shape and dtype are checked on every call); a driver whose
            actions are already checked sets it to 0.

    Usage (what ``Collector`` does, in short):

    .. code-block:: python

        root, nxt = env.buffers()           # the env-owned buffers, built once
        env.fast_reset(None)                # every sub-env: writes root
        step = env.fast_step                # bound once, outside the loop
        for t in range(T):
            action = policy(root)           # the driver's own copy of root
            nxt, root = step(action)        # writes next (real final obs) and root
            done = nxt["done"]              # finished sub-envs are already reset in root

    Examples:
        >>> from rl_envs import FastPathEnv, GymEnv
        >>> env = GymEnv("CartPole-v1", num_envs=2)
        >>> isinstance(env, FastPathEnv)
        True
        >>> root = env.fast_reset(None)
        >>> nxt, root2 = env.fast_step(env.action_spec.rand())
        >>> root2 is root and nxt is env.buffers()[1]
        True
        >>> env.close()
    """

    batch_size: torch.Size
    device: torch.device
    action_checks_left: int

    @property
    def action_key(self) -> Any:
        """The single action key."""

    @property
    def action_keys(self) -> list[Any]:
        """Every action key."""

    @property
    def full_action_spec(self) -> Any:
        """The Composite of every action key."""

    def buffers(self) -> tuple[TensorDictBase, TensorDictBase]:
        """The env-owned ``(root, next)`` TensorDicts, built from the specs on first use."""

    def bind_buffers(self, root: TensorDictBase, next: TensorDictBase) -> None:
        """Make the fast path write into ``root``/``next`` from now on (rows of a batched
        env's shared buffers, a collector's storage); same keys, shapes and dtypes."""

    def fast_reset(self, reset_mask: torch.Tensor | None = None) -> TensorDictBase:
        """Reset every sub-env (``None``) or the masked ones (bool ``[*B]``) into ``root``."""

    def fast_step(self, action: Any) -> tuple[TensorDictBase, TensorDictBase]:
        """Step every sub-env with ``action``; write ``next`` and ``root``; reset the
        finished sub-envs in ``root``; return ``(next, root)``."""

    def validate_action(self, action: Any) -> None:
        """Raise ``InvalidActionError`` when ``action`` breaks the action spec."""

    def set_seed(self, seed: int | None = None, static_seed: bool = False) -> int | None:
        """Seed the env; return the seed for the next env."""

    def close(self) -> None:
        """Release the env; idempotent."""
