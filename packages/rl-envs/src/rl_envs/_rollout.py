"""The one step loop (:func:`step_loop`), run by ``EnvBase.rollout`` and every collector.

:func:`step_loop` takes a step (actor, copies into the storage, :func:`carry_state`, the
env's ``fast_step``, whose finished sub-envs reset through ``reset_where``); what
differs between its callers is data: a :class:`StepPlan` (the copy pairs, the carry, the
after-step hooks), the actor, and a ``stop`` for ``break_when_any_done``.

For ``EnvBase.rollout`` the storage is allocated TIME-MAJOR, ``[T, *B, *event]`` per
leaf, by the writer the collectors share (:class:`~rl_envs.RolloutWriter`,
``time_dim=0``), so each step copies every env-owned buffer into slot ``t`` with ONE
contiguous copy (the writer's pairs: numpy views on the CPU, ``d[t] = s``), and no
TensorDict is built per step. At the end the
storage is handed out as a ``permute`` view with time moved to the last batch dim,
``[*B, T]`` (the data model's layout; no copy). Why time-major here and time-last in the
collectors: ``docs/architecture.md``, "Rollout storage" (``benchmarks/bench_layout.py``).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from rl_profiling import record
from tensordict import TensorDictBase

from rl_envs._keys import DONE, DONE_KEYS, NEXT, TERMINATED, TRUNCATED
from rl_envs._writer import RolloutWriter

if TYPE_CHECKING:
    from rl_envs._env import EnvBase
    from rl_envs._moving import MovingObs

__all__ = ["StepPlan", "carry_pairs", "carry_state", "run_rollout", "step_loop", "time_last"]

_ROLLOUT_RANGES = ("EnvBase.policy", "EnvBase.fast_step")


@dataclass
class StepPlan:
    """What :func:`step_loop` copies at each step, built once per batch (or rollout).

    Attributes:
        policy_input: the TensorDict the actor reads and writes (the env's root leaves
            plus the policy's outputs); ``None`` for an actor that does not read one.
        root: ``(slot, src)`` pairs copied as ``slot[t] = src`` before the step (sources
            that keep their identity: the env's root buffers; numpy views on the CPU).
        outs: ``(slot, key)`` pairs copied as ``slot[t].copy_(policy_input.get(key))``
            before the step (a policy writes new tensors each call, so they are read by
            key; :meth:`RolloutWriter.keyed`), or, ``slot`` a numpy array (a CPU policy
            writing CPU storage), as ``slot[t] = policy_input.get(key).detach().numpy()``
            (a numpy slice assignment: a fraction of ``Tensor.copy_``); empty for an actor
            that writes its outputs into the batch itself.
        carry: :func:`carry_pairs` of the keys that cross a step (recurrent state).
        next: ``(slot, src)`` pairs copied as ``slot[t] = src`` after the step (the env's
            next buffers).
        after: hooks called as ``hook(t)`` after step ``t``'s copies
            (``max_frames_per_traj``).
        ranges: the profiling ranges of the actor call and the env step
            (``EnvBase.rollout`` names them ``EnvBase.policy`` and ``EnvBase.fast_step``).
        moving: the observation the env writes straight into the storage
            (:class:`MovingObs`), its pairs then absent from ``root`` and ``next``; ``None``
            for the copies of the env's buffers.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> from rl_envs import StepPlan, step_loop
        >>> obs, seen = torch.zeros(2), torch.zeros(3, 2)
        >>> def step(action):
        ...     obs.add_(action)
        >>> plan = StepPlan(None, next=[(seen, obs)])
        >>> step_loop(3, lambda td, t: 1.0, step, plan)[0]
        3
        >>> seen[:, 0]
        tensor([1., 2., 3.])
    """

    policy_input: Any
    root: list = field(default_factory=list)
    outs: list = field(default_factory=list)
    carry: list = field(default_factory=list)
    next: list = field(default_factory=list)
    after: list = field(default_factory=list)
    ranges: tuple[str, str] = ("Collector.policy", "EnvBase.fast_step")
    moving: MovingObs | None = None


def step_loop(
    steps: int,
    actor: Callable[[Any, int], Any],
    step: Callable[[Any], Any],
    plan: StepPlan,
    stop: Callable[[int], Any] | None = None,
) -> tuple[int, float, float, float]:
    """THE step loop of every rollout: ``EnvBase.rollout`` and every collector run it.

    Step ``t``: ``action = actor(plan.policy_input, t)``; copy the root pairs and the
    policy outputs into slot ``t``; carry the state that crosses a step
    (:func:`carry_state`); ``step(action)`` (the env's fast step, which decides and
    applies the resets of finished sub-envs); copy the next pairs; run the after-step
    hooks; stop early when ``stop(t)`` is true. With ``plan.moving`` (a
    :class:`MovingObs`) the env writes its observation into slot ``t`` of ``"next"`` and
    slot ``t + 1`` of the root itself, and the policy reads slot ``t``.

    Args:
        steps: the number of steps to run.
        actor: ``(policy_input, t) -> action``: the policy call, or a random draw.
        step: the env's ``fast_step``.
        plan: the :class:`StepPlan` of the storage being written.
        stop: ``t -> bool``, checked after each step (``break_when_any_done``); not with
            ``plan.moving``.

    Returns:
        ``(steps_run, policy_seconds, env_seconds, total_seconds)`` by the wall clock
        (four clock reads a step).
    """
    policy_input, root, outs, carry, nxt, after, moving = (
        plan.policy_input, plan.root, plan.outs, plan.carry, plan.next, plan.after, plan.moving)
    if moving is not None and stop is not None:
        raise ValueError("step_loop: a plan with a MovingObs writes every step's root into the "
                         "storage; expected stop=None (break_when_any_done), got a stop")
    clock, (policy_range, step_range) = time.perf_counter, plan.ranges
    t_policy = t_env = 0.0
    start = clock()
    try:
        for t in range(steps):
            t0 = clock()
            if moving is not None:
                moving.point(t)  # the policy reads, and the env writes, this step's slots
            with record(policy_range):
                action = actor(policy_input, t)
            t1 = clock()
            for slot, src in root:
                slot[t] = src
            if moving is not None and not t:
                moving.first_root()
            for slot, key in outs:
                if type(slot) is np.ndarray:  # a CPU policy's output into CPU storage
                    slot[t] = policy_input.get(key).detach().numpy()
                else:
                    slot[t].copy_(policy_input.get(key))
            if carry:
                carry_state(policy_input, carry)
            t2 = clock()
            with record(step_range):  # the step, and the reset of finished sub-envs
                step(action)
            t3 = clock()
            for slot, src in nxt:
                slot[t] = src
            for hook in after:
                hook(t)
            t_policy += t1 - t0
            t_env += t3 - t2
            if stop is not None and stop(t):
                return t + 1, t_policy, t_env, clock() - start
    finally:
        if moving is not None:
            moving.release()
    return steps, t_policy, t_env, clock() - start


def time_last(storage: TensorDictBase) -> TensorDictBase:
    """The ``[T, *B]`` storage as a ``[*B, T]`` view (``permute``; no copy)."""
    nb = storage.batch_dims - 1
    if nb == 0:
        return storage
    return storage.permute(*range(1, nb + 1), 0)


def run_rollout(
    env: EnvBase,
    steps: int,
    policy: Any,
    break_when_any_done: bool,
    tensordict: TensorDictBase | None,
) -> tuple[TensorDictBase, torch.Tensor]:
    """Run the loop; returns the ``[*B, T]`` data and the last step's done mask ``[*B]``."""
    root, nxt = env.buffers()
    if tensordict is not None:
        for key in root.keys(True, True):
            if key in tensordict.keys(True, True):
                root.get(key).copy_(tensordict.get(key))
    template = env.fake_tensordict()
    if policy is None:
        return _random_loop(env, steps, break_when_any_done, template)
    return _policy_loop(env, steps, policy, break_when_any_done, template, tensordict)


def _finish(
    storage: TensorDictBase, t_end: int, steps: int, nxt: TensorDictBase, env: EnvBase
) -> tuple[TensorDictBase, torch.Tensor]:
    """Hand out the ``[T, *B]`` storage as ``[*B, T]`` (cut to ``t_end`` steps on a break)."""
    done = nxt.get(DONE).reshape(env.batch_size).clone()
    if t_end < steps:
        return time_last(storage[:t_end]).clone(), done
    return time_last(storage), done


def _bulk_actions(
    env: EnvBase, steps: int, storage: TensorDictBase
) -> tuple[Any, torch.Tensor] | None:
    """Draw every random action of the rollout in ONE call; the draws ARE the storage.

    Returns ``(per_step_source, reused_tensor)``: each step copies row ``t`` into one
    reused action tensor (the env sees the same, already validated tensor: no torch call
    per step; a small op right after an env step costs several us here, its code being
    cold). ``None`` when not applicable (composite or non-CPU action spec).
    """
    if len(env.action_keys) != 1 or env.device.type != "cpu":
        return None
    draws = env.action_spec.rand((steps,), generator=env._rng)  # [T, *B, *event]: time-major
    storage.set(env.action_key, draws)
    return draws.numpy(), torch.empty_like(draws[0])


def _random_loop(
    env: EnvBase, steps: int, brk: bool, template: TensorDictBase
) -> tuple[TensorDictBase, torch.Tensor]:
    root, nxt = env.buffers()
    flags = [k for k in DONE_KEYS if k in root]
    writer = RolloutWriter(template.exclude(*flags), steps, time_dim=0)
    storage = writer.storage
    for k in flags:  # a root is never finished: its done flags are False. calloc'd zeros
        shape = (steps, *root.get(k).shape)  # cost no page touch
        storage.set(k, torch.from_numpy(np.zeros(shape, dtype=bool)).to(root.get(k).device))
    root_pairs = writer.pairs(root.exclude(*flags))
    # ``done`` is ``terminated | truncated`` (an EnvBase invariant): computed once at the end
    derive_done = all(k in nxt for k in DONE_KEYS)
    next_pairs = writer.pairs(nxt.exclude(DONE) if derive_done else nxt, prefix=(NEXT,))
    bulk = _bulk_actions(env, steps, storage)
    numpy_ok = bulk is not None and all(
        isinstance(d, np.ndarray) for d, _ in root_pairs + next_pairs
    )
    if not numpy_ok:
        next_pairs = writer.pairs(nxt, prefix=(NEXT,))  # ``done`` copied, not derived
        actor: Any = _DrawActor(env, storage)
        done_t = nxt.get(DONE)
        stop = (lambda t: bool(done_t.any())) if brk else None
    else:
        draws, action = bulk
        actor = _BulkActor(draws, action)
        done_np = nxt.get(DONE).numpy()
        stop = (lambda t: np.count_nonzero(done_np)) if brk else None
    plan = StepPlan(None, root_pairs, next=next_pairs, ranges=_ROLLOUT_RANGES)
    t_end = step_loop(steps, actor, env.fast_step, plan, stop)[0]
    if numpy_ok and derive_done:
        out = storage.get(NEXT)
        torch.logical_or(out.get(TERMINATED), out.get(TRUNCATED), out=out.get(DONE))
    return _finish(storage, t_end, steps, nxt, env)


class _BulkActor:
    """Step ``t``'s action: row ``t`` of the draws copied into one reused action tensor
    (the env sees the same, already validated tensor: no torch call per step)."""

    def __init__(self, draws: np.ndarray, action: torch.Tensor) -> None:
        self.draws, self.action, self.view = draws, action, action.numpy()

    def __call__(self, policy_input: Any, t: int) -> torch.Tensor:
        np.copyto(self.view, self.draws[t])
        return self.action


class _DrawActor:
    """An action drawn per step and stored at ``t`` (non-CPU buffers, composite actions)."""

    def __init__(self, env: EnvBase, storage: TensorDictBase) -> None:
        self.single = len(env.action_keys) == 1
        spec = env.action_spec if self.single else env.full_action_spec
        self.rand = functools.partial(spec.rand, generator=env._rng)
        self.storage, self.env = storage, env

    def __call__(self, policy_input: Any, t: int) -> Any:
        action = self.rand()
        if self.single:
            self.storage.get(self.env.action_key)[t].copy_(action)
        else:
            for key in self.env.action_keys:
                self.storage.get(key)[t].copy_(action.get(key))
        return action


class _PolicyActor:
    """The rollout's policy call: grad mode as at the rollout's start (the loop's copies
    run without it); a policy that returns another TensorDict has its outputs set into
    the policy input. The first call happens before the loop (its outputs size the
    storage), so step 0 does not call again."""

    def __init__(self, policy: Any, env: EnvBase, env_keys: set, grad: bool) -> None:
        self.policy, self.grad, self.env_keys, self.called = policy, grad, env_keys, False
        self.key = env.action_key if len(env.action_keys) == 1 else None

    def call(self, ptd: TensorDictBase) -> None:
        with torch.set_grad_enabled(self.grad):
            out = self.policy(ptd)
        if out is not None and out is not ptd:
            for key in out.keys(True, True):
                if key not in self.env_keys:
                    ptd.set(key, out.get(key))

    def __call__(self, ptd: TensorDictBase, t: int) -> Any:
        if self.called:
            self.call(ptd)
        self.called = True
        return ptd if self.key is None else ptd.get(self.key)


def _policy_loop(
    env: EnvBase,
    steps: int,
    policy: Any,
    brk: bool,
    template: TensorDictBase,
    tensordict: TensorDictBase | None,
) -> tuple[TensorDictBase, torch.Tensor]:
    root, nxt = env.buffers()
    ptd = root.copy()  # shares the root leaves: the policy reads the live buffers
    env_keys = set(template.exclude(NEXT).keys(True, True))
    if tensordict is not None:
        for key, value in tensordict.exclude(NEXT).items(True, True):
            if key not in env_keys:  # a copy: the carry writes into it in place
                ptd.set(key, value.clone())
    actor = _PolicyActor(policy, env, env_keys, torch.is_grad_enabled())
    actor.call(ptd)  # step 0's call: what the policy writes sizes the storage
    storage, (outs, next_pairs), policy_next = _policy_storage(env, ptd, template, steps)
    plan = StepPlan(ptd, [], outs, carry_pairs(policy_next), next_pairs, ranges=_ROLLOUT_RANGES)
    done_t = nxt.get(DONE)
    with torch.no_grad():
        t_end = step_loop(steps, actor, env.fast_step, plan,
                          (lambda t: bool(done_t.any())) if brk else None)[0]
    return _finish(storage, t_end, steps, nxt, env)


def _policy_storage(
    env: EnvBase, ptd: TensorDictBase, template: TensorDictBase, steps: int
) -> tuple:
    """Storage for the env keys plus whatever the policy wrote (root and ``"next"``), its
    copy pairs (by key from the policy input, root leaves and the policy's ``"next"``
    outputs, copied before the step; the env's next leaves, after it) and the policy's
    ``"next"`` keys."""
    full = template.clone()
    nxt_env = set(template.get(NEXT).keys(True, True))
    policy_next: list[tuple] = []
    for key in list(ptd.keys(True, True)):
        key_t = (key,) if isinstance(key, str) else tuple(key)
        if key_t[0] == NEXT:  # written by the policy (ptd starts without "next")
            policy_next.append(key_t[1:])
            if _unwrap(key_t[1:]) not in nxt_env:
                full.set(key_t, torch.zeros_like(ptd.get(key_t)))
                root_key = _unwrap(key_t[1:])
                if root_key not in ptd.keys(True, True):  # first root value: zeros
                    ptd.set(root_key, torch.zeros_like(ptd.get(key_t)))
                if root_key not in full.keys(True, True):
                    full.set(root_key, torch.zeros_like(ptd.get(key_t)))
        elif key not in full.keys(True, True):
            full.set(key, torch.zeros_like(ptd.get(key)))
    writer = RolloutWriter(full, steps, time_dim=0)
    root_outs = writer.keyed(list(full.exclude(NEXT).keys(True, True)))
    next_outs = writer.keyed([(NEXT, *k) for k in policy_next])
    _, nxt = env.buffers()
    env_only = nxt.exclude(*[_unwrap(k) for k in policy_next])  # the policy's value wins
    next_pairs = writer.pairs(env_only, prefix=(NEXT,))
    return writer.storage, (root_outs + next_outs, next_pairs), policy_next


def carry_pairs(keys: list) -> list[tuple[Any, Any]]:
    """The plan of :func:`carry_state`: ``(("next", *k), k)`` for each carried key ``k``
    (the root keys whose ``("next", k)`` a policy writes: recurrent state), built once.

    Args:
        keys: the carried keys, strings or tuples, without the ``"next"`` prefix.

    Returns:
        ``(source, destination)`` keys (a one-element key as its string: the cheaper
        ``get``).

    Examples:
        >>> carry_pairs(["h", ("rnn", "c")])
        [(('next', 'h'), 'h'), (('next', 'rnn', 'c'), ('rnn', 'c'))]
    """
    out = []
    for key in keys:
        k = (key,) if isinstance(key, str) else tuple(key)
        out.append(((NEXT, *k), _unwrap(k)))
    return out


def carry_state(step_td: TensorDictBase, pairs: list[tuple[Any, Any]]) -> None:
    """THE carry rule of every rollout loop (``EnvBase.rollout`` and ``Collector``).

    After the policy call and the copy of step ``t`` into the batch, and BEFORE the env
    steps: copy each ``("next", k)`` the policy wrote onto ``k`` of ``step_td``, in
    place. The env's step then resets its finished sub-envs and, for the keys it holds at
    its root (a ``TensorDictPrimer``), writes their reset value over the carried one
    there (``InitTracker`` sets ``is_init``): the next trajectory never starts from the
    previous one's state. No other code moves state from one step to the next.

    Args:
        step_td: the step's TensorDict (the env's root leaves plus the policy's outputs).
        pairs: :func:`carry_pairs` of the carried keys.

    Examples:
        >>> import torch
        >>> from tensordict import TensorDict
        >>> td = TensorDict({"h": torch.zeros(2), "next": {"h": torch.ones(2)}}, [2])
        >>> carry_state(td, carry_pairs(["h"]))
        >>> td["h"]
        tensor([1., 1.])
    """
    for src, dst in pairs:
        step_td.get(dst).copy_(step_td.get(src))


def _unwrap(key: tuple) -> Any:
    return key[0] if len(key) == 1 else key

