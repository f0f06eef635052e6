"""The small objects the rollout loop calls, one per axis of variation, chosen once.

- *Actors* (where the policy runs): :class:`PolicyActor` calls the policy on the policy
  input; :class:`DevicePolicyActor` runs it on another device through preallocated
  buffers; :class:`RandomActor` (``policy=None`` and ``init_random_frames``) copies
  actions drawn for the whole batch at once.
- *After-step hooks*: :class:`TrajectoryLimit` implements ``max_frames_per_traj``.

An axis the user does not use costs nothing in the loop (an empty list, or the plain
actor).
"""

from __future__ import annotations

from typing import Any

import torch
from rl_envs import FastPathEnv
from tensordict import TensorDictBase

from rl_collectors._keys import DONE, NEXT
from rl_collectors._layout import leaf_keys

__all__ = ["DevicePolicyActor", "PolicyActor", "RandomActor", "TrajectoryLimit"]


class PolicyActor:
    """Call the policy on the policy input, in place."""

    __slots__ = ("policy",)

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    def __call__(self, policy_input: TensorDictBase) -> None:
        self.policy(policy_input)


class RandomActor:
    """Uniform random actions from the env's ``full_action_spec``, drawn a batch at a time.

    :meth:`begin` draws the actions of the next ``steps`` steps with one ``rand`` call;
    each step then costs one ``copy_`` per action key into the policy input (a ``rand``
    per step costs several microseconds of dispatch, a tenth of a CartPole step). Same
    distribution and the same global RNG as ``rl_envs.RandomPolicy``.
    """

    __slots__ = ("spec", "keys", "pairs", "t")

    def __init__(self, spec: Any, action_keys: list[tuple]) -> None:
        self.spec, self.keys = spec, action_keys
        self.pairs: list[tuple[torch.Tensor, tuple[torch.Tensor, ...]]] = []
        self.t = 0

    def begin(self, steps: int, policy_input: TensorDictBase) -> None:
        """Draw the actions of the next ``steps`` calls, to be written into ``policy_input``'s
        action leaves (fetched here: a policy's ``set`` may have replaced them)."""
        draws = self.spec.rand((steps,))
        self.pairs = [(policy_input.get(key), draws.get(key).unbind(0)) for key in self.keys]
        self.t = 0

    def __call__(self, policy_input: TensorDictBase) -> None:
        t = self.t
        for dst, rows in self.pairs:
            dst.copy_(rows[t])
        self.t = t + 1


class DevicePolicyActor:
    """Run the policy on ``device``: copy its inputs there, copy its outputs back.

    The inputs are the non-output leaves of ``policy_input``; both sides are preallocated, so a
    step costs one ``copy_`` per leaf and direction.
    """

    def __init__(
        self, policy: Any, policy_input: TensorDictBase, out_keys: list[tuple], device: torch.device
    ) -> None:
        self.policy = policy
        self.inputs = policy_input.exclude(*out_keys).to(device)
        self.in_pairs = [(self.inputs.get(k), policy_input.get(k)) for k in leaf_keys(self.inputs)]
        self.out_keys = out_keys

    def __call__(self, policy_input: TensorDictBase) -> None:
        for dst, src in self.in_pairs:
            dst.copy_(src, non_blocking=True)
        self.policy(self.inputs)
        for key in self.out_keys:
            policy_input.get(key).copy_(self.inputs.get(key), non_blocking=True)


class TrajectoryLimit:
    """``max_frames_per_traj``: truncate and reset sub-envs after ``max_steps`` steps.

    Runs after each step: counts steps per sub-env, and where the count reaches the
    limit marks ``("next", "truncated")`` and ``("next", "done")`` in the batch at ``t``
    and resets those sub-envs (``env.fast_reset(mask)``), so the next step starts a new
    trajectory. Numpy on the CPU, a handful of vector ops per step.
    """

    def __init__(self, env: FastPathEnv, buffer: TensorDictBase, max_steps: int) -> None:
        self.env, self.max_steps = env, max_steps
        nb = env.batch_size
        self.count = torch.zeros(tuple(nb), dtype=torch.int64).numpy()
        self.done = [
            buffer.get((NEXT, DONE))[..., t, 0].numpy() for t in range(buffer.batch_size[-1])
        ]
        self.trunc = [
            buffer.get((NEXT, "truncated"))[..., t, 0].numpy() for t in range(buffer.batch_size[-1])
        ]

    def reset(self) -> None:
        self.count[...] = 0

    def __call__(self, t: int) -> None:
        count, done = self.count, self.done[t]
        count += 1
        count[done] = 0
        over = count >= self.max_steps
        if over.any():
            self.trunc[t][over] = True
            done[over] = True
            count[over] = 0
            self.env.fast_reset(torch.from_numpy(over))
