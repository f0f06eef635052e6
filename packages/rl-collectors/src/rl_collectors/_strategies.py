"""The small objects the rollout loop calls, one per axis of variation, chosen once.

- *Actors* (where the policy runs): :class:`PolicyActor` calls the policy on the policy
  input; :class:`DevicePolicyActor` runs it on another device through preallocated
  buffers; :class:`RandomActor` (``policy=None`` and ``init_random_frames``) draws the
  actions of a whole batch at once, straight into the batch. An actor returns what the
  env steps with (the action leaf, or the policy input when the env has several action
  keys); its ``writes_batch`` says whether its outputs are in the batch already.
- *After-step hooks*: :class:`TrajectoryLimit` implements ``max_frames_per_traj``.

An axis the user does not use costs nothing in the loop (an empty list, or the plain
actor).
"""

from __future__ import annotations

from typing import Any

import torch
from rl_envs import FastPathEnv, RolloutWriter, reset_where
from tensordict import TensorDictBase

from rl_collectors._keys import DONE, NEXT
from rl_collectors._layout import leaf_keys

__all__ = ["DevicePolicyActor", "PolicyActor", "RandomActor", "TrajectoryLimit"]


def get_key(key: tuple) -> Any:
    """``key`` as the loop passes it to ``TensorDict.get``: a one-element tuple as its
    string (``get("action")`` costs ~1.0 us, ``get(("action",))`` ~1.4 us)."""
    return key[0] if len(key) == 1 else key


def env_action(action_keys: list[tuple]) -> Any:
    """``policy_input -> what the env steps with``: the action leaf when the env has one
    action key, else the policy input itself (the env reads its action keys)."""
    if len(action_keys) == 1:
        key = get_key(action_keys[0])
        return lambda policy_input: policy_input.get(key)
    return lambda policy_input: policy_input


class PolicyActor:
    """Call the policy on the policy input, in place; return the env's action."""

    __slots__ = ("policy", "action")
    writes_batch = False

    def __init__(self, policy: Any, action: Any) -> None:
        self.policy, self.action = policy, action

    def __call__(self, policy_input: TensorDictBase, t: int) -> Any:
        self.policy(policy_input)
        return self.action(policy_input)


class RandomActor:
    """Uniform random actions from the env's ``full_action_spec``, drawn a batch at a time.

    :meth:`begin` draws the actions of the next ``steps`` steps with one ``rand`` call and
    writes them into the batch (one copy per action key per batch); each step then copies
    its row into the policy input's action leaves (a numpy slice assignment on the CPU,
    a fraction of a ``Tensor.copy_``) and steps the env with the same tensors as every
    other step. Same distribution and the same global RNG as ``rl_envs.RandomPolicy``.
    """

    __slots__ = ("spec", "keys", "pairs", "action", "env_input")
    writes_batch = True
    reads_input = False  # its draws do not depend on the observation

    def __init__(self, spec: Any, action_keys: list[tuple], action: Any) -> None:
        self.spec, self.keys, self.action = spec, action_keys, action
        self.pairs: list[tuple[Any, Any]] = []
        self.env_input: Any = None

    def begin(self, steps: int, policy_input: TensorDictBase, buffer: TensorDictBase) -> None:
        """Draw the actions of the next ``steps`` calls into ``buffer[..., :steps]`` and pair
        each of ``policy_input``'s action leaves (fetched here: a policy's ``set`` may have
        replaced them) with its batch leaf, time first: step ``t`` copies row ``t``."""
        nb = policy_input.batch_dims
        draws = self.spec.rand((steps,))
        pair = RolloutWriter.copy_pair
        self.pairs = []
        for key in self.keys:
            rows = buffer.get(key).narrow(nb, 0, steps).movedim(nb, 0)
            rows.copy_(draws.get(key))
            self.pairs.append(pair(policy_input.get(key), rows))
        self.env_input = self.action(policy_input)  # the same tensors on every step

    def __call__(self, policy_input: TensorDictBase, t: int) -> Any:
        for dst, rows in self.pairs:
            dst[...] = rows[t]
        return self.env_input


class DevicePolicyActor:
    """Run the policy on ``device``: copy its inputs there, copy its outputs back.

    The inputs are the non-output leaves of ``policy_input``; both sides are preallocated, so a
    step costs one ``copy_`` per leaf and direction.
    """

    writes_batch = False

    def __init__(
        self,
        policy: Any,
        policy_input: TensorDictBase,
        out_keys: list[tuple],
        device: torch.device,
        action: Any,
    ) -> None:
        self.policy, self.action = policy, action
        self.inputs = policy_input.exclude(*out_keys).to(device)
        self.in_pairs = [(self.inputs.get(k), policy_input.get(k)) for k in leaf_keys(self.inputs)]
        self.out_keys = out_keys

    def __call__(self, policy_input: TensorDictBase, t: int) -> Any:
        for dst, src in self.in_pairs:
            dst.copy_(src, non_blocking=True)
        self.policy(self.inputs)
        for key in self.out_keys:
            policy_input.get(key).copy_(self.inputs.get(key), non_blocking=True)
        return self.action(policy_input)


class TrajectoryLimit:
    """``max_frames_per_traj``: truncate and reset sub-envs after ``max_steps`` steps.

    Runs after each step: counts steps per sub-env, and where the count reaches the
    limit marks ``("next", "truncated")`` and ``("next", "done")`` in the batch at ``t``
    and resets those sub-envs (``rl_envs.reset_where``), so the next step starts a new
    trajectory. Numpy on the CPU, a handful of vector ops per step.
    """

    def __init__(self, env: FastPathEnv, max_steps: int) -> None:
        self.env, self.max_steps = env, max_steps
        self.count = torch.zeros(tuple(env.batch_size), dtype=torch.int64).numpy()
        self.done: Any = None
        self.trunc: Any = None

    def bind(self, buffer: TensorDictBase) -> None:
        """Mark the flags of ``buffer`` (a new batch) from now on; the counts carry over."""
        self.done = buffer.get((NEXT, DONE))[..., 0].movedim(-1, 0).numpy()
        self.trunc = buffer.get((NEXT, "truncated"))[..., 0].movedim(-1, 0).numpy()

    def reset(self) -> None:
        self.count[...] = 0

    def __call__(self, t: int) -> None:
        count, done = self.count, self.done[t, ...]  # a view of step t, even for B = []
        count += 1
        count[done] = 0
        over = count >= self.max_steps
        if over.any():
            self.trunc[t, ...][over] = True
            done[over] = True
            count[over] = 0
            reset_where(self.env, over)
