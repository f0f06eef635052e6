"""The preallocated ``[*B, T]`` batch and the per-step copy plans built once from it.

The env owns two buffers that its fast path rewrites in place on every step (``root``:
the state the next step starts from; ``next``: what the step produced). The collector
owns:

- ``policy_input``: a TensorDict whose env leaves *are* the env's root leaves
  (no copy); the policy adds its outputs (``action``, ...) to it on every call;
- ``buffer``: the batch, ``[*B, T]`` (time last);
- ``plan`` (an ``rl_envs.StepPlan``, run by ``rl_envs.step_loop``, bound to each batch by
  a ``BatchPlanner`` that read the fixed sources once): the (destination, source) pairs to
  copy at step ``t``: env root leaves and policy outputs into
  ``buffer[..., t]`` before the step, env next leaves into ``buffer["next"][..., t]``
  after it. CPU pairs are numpy views (a numpy slice
  assignment costs a fraction of ``Tensor.copy_``); other devices use torch. Each batch
  handed out to a caller is that caller's: the next one is written into a new ``buffer``
  (``RolloutWriter.renew``: the last one's leaf list, no template walked) with a new
  ``plan`` (cheaper than a copy of the batch).

The allocation and the pairs are ``rl_envs.RolloutWriter``'s (``EnvBase.rollout`` uses the
same writer, time-major); this module says which leaves go where.
"""

from __future__ import annotations

from typing import Any

import torch
from rl_envs import RolloutWriter, StepPlan
from tensordict import TensorDict, TensorDictBase

from rl_collectors._keys import NEXT, POLICY_VERSION, TRAJ_IDS

__all__ = [
    "BatchPlanner",
    "alloc_buffer",
    "leaf_keys",
    "make_policy_input",
    "nested",
]


def nested(key: Any) -> tuple:
    """A key as a tuple (``"a"`` -> ``("a",)``)."""
    return (key,) if isinstance(key, str) else tuple(key)


def leaf_keys(td: TensorDictBase) -> list[tuple]:
    """Every leaf key of ``td`` as a tuple."""
    return [nested(k) for k in td.keys(True, True)]


def make_policy_input(
    env_root: TensorDictBase, extra: TensorDictBase | None = None
) -> TensorDictBase:
    """The policy input: the env's root leaves (shared, not copied) plus ``extra`` leaves."""
    policy_input = TensorDict(batch_size=env_root.batch_size, device=env_root.device)
    for key in leaf_keys(env_root):
        policy_input.set(key, env_root.get(key))
    if extra is not None:
        for key in leaf_keys(extra):
            if key not in policy_input.keys(True, True):
                policy_input.set(key, extra.get(key))
    return policy_input


def alloc_buffer(
    root: TensorDictBase, nxt: TensorDictBase, steps: int, device: torch.device
) -> RolloutWriter:
    """The writer of the zeroed ``[*B, steps]`` batch (``.storage``): ``root`` leaves,
    ``next`` leaves, collector keys.

    ``root`` must not hold a ``"next"`` entry (pass the next leaves as ``nxt``).
    """
    template = root.copy()
    template.set(NEXT, nxt)
    writer = RolloutWriter(template, steps, time_dim=root.batch_dims, device=device, zeros=True)
    batch = writer.storage.batch_size
    writer.storage.set(TRAJ_IDS, torch.zeros(batch, dtype=torch.int64, device=device))
    writer.storage.set(POLICY_VERSION, torch.zeros(batch, dtype=torch.int64, device=device))
    return writer


class BatchPlanner:
    """The part of every batch's ``rl_envs.StepPlan`` that the collector's fixed buffers
    decide, read once per layout (at construction, and again when the env rebuilds its
    buffers); :meth:`plan` binds it to one batch's writer (pairs from
    ``rl_envs.RolloutWriter``), which ``rl_envs.step_loop`` copies step by step.

    ``policy_input`` leaves that are not policy outputs keep their identity (env root leaves
    and carried recurrent state), so they are copied from fixed sources. ``constant_keys``
    are root leaves the fast path never changes from their zero value (the root done
    flags: a fast step writes only observations and state into the root, a fast reset
    sets the flags to ``False``): they stay as allocated and are not copied. A new batch
    costs one pair per leaf.
    """

    def __init__(
        self,
        policy_input: TensorDictBase,
        env_next: TensorDictBase,
        out_keys: list[tuple],
        constant_keys: list[tuple] = (),
        carry: list = (),
        after: list = (),
        moving: Any = None,
    ) -> None:
        moved = [] if moving is None else [(moving.key,)]  # the env writes it into the batch
        root_keys = [k for k in leaf_keys(policy_input)
                     if k not in out_keys and k not in constant_keys and k not in moved]
        self.policy_input = policy_input
        self.root = RolloutWriter.sources(policy_input, root_keys)
        self.next = RolloutWriter.sources(
            env_next, [k for k in leaf_keys(env_next) if k not in moved])
        self.out_keys, self.carry, self.after = list(out_keys), list(carry), list(after)
        self.moving = moving
        # the policy's outputs are CPU tensors when its input is (read by key each step)
        self.cpu_outputs = policy_input.device is not None and policy_input.device.type == "cpu"

    def plan(self, writer: RolloutWriter) -> StepPlan:
        """The plan of ``writer``'s storage: ``carry``, ``after`` and the moving
        observation (``rl_envs.MovingObs``) go into it."""
        moving = None if self.moving is None else self.moving.bind(writer)
        return StepPlan(self.policy_input, writer.bind(self.root),
                        writer.keyed(self.out_keys, arrays=self.cpu_outputs), list(self.carry),
                        writer.bind(self.next, prefix=(NEXT,)), list(self.after),
                        moving=moving)
