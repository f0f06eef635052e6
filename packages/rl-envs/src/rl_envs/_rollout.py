"""The rollout loop behind ``EnvBase.rollout``: preallocated storage, fast path.

The storage is allocated TIME-MAJOR, ``[T, *B, *event]`` per leaf, by the writer the
collectors share (:class:`~rl_envs.RolloutWriter`, ``time_dim=0``), so each step copies
every env-owned buffer into slot ``t`` with ONE contiguous copy (the writer's pairs: numpy
views on the CPU, ``d[t] = s``), and no TensorDict is built per step. At the end the
storage is handed out as a ``permute`` view with time moved to the last batch dim,
``[*B, T]`` (the data model's layout; no copy). Why time-major here and time-last in the
collectors: ``docs/architecture.md``, "Rollout storage" (``benchmarks/bench_layout.py``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from tensordict import TensorDictBase

from rl_envs._keys import DONE, DONE_KEYS, NEXT, TERMINATED, TRUNCATED
from rl_envs._writer import RolloutWriter

if TYPE_CHECKING:
    from rl_envs._env import EnvBase

__all__ = ["carry_pairs", "carry_state", "run_rollout", "time_last"]


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
    root_pairs, step = writer.pairs(root.exclude(*flags)), env.fast_step
    # ``done`` is ``terminated | truncated`` (an EnvBase invariant): computed once at the end
    derive_done = all(k in nxt for k in DONE_KEYS)
    next_pairs = writer.pairs(nxt.exclude(DONE) if derive_done else nxt, prefix=(NEXT,))
    bulk = _bulk_actions(env, steps, storage)
    numpy_ok = bulk is not None and all(
        isinstance(d, np.ndarray) for d, _ in root_pairs + next_pairs
    )
    if not numpy_ok:
        single = len(env.action_keys) == 1
        rand = functools.partial(
            (env.action_spec if single else env.full_action_spec).rand, generator=env._rng
        )
        next_pairs = writer.pairs(nxt, prefix=(NEXT,))  # ``done`` copied, not derived
        return _random_loop_torch(env, steps, brk, storage, (root_pairs, next_pairs), rand)
    draws, action = bulk
    act_view, done_np, t_end = action.numpy(), nxt.get(DONE).numpy(), steps
    for t in range(steps):
        for d, s in root_pairs:
            d[t] = s
        np.copyto(act_view, draws[t])
        step(action)
        for d, s in next_pairs:
            d[t] = s
        if brk and np.count_nonzero(done_np):
            t_end = t + 1
            break
    if derive_done:
        out = storage.get(NEXT)
        torch.logical_or(out.get(TERMINATED), out.get(TRUNCATED), out=out.get(DONE))
    return _finish(storage, t_end, steps, nxt, env)


def _random_loop_torch(
    env: EnvBase,
    steps: int,
    brk: bool,
    storage: TensorDictBase,
    pairs: tuple[list, list],
    rand: Any,
) -> tuple[TensorDictBase, torch.Tensor]:
    """The same loop with an action drawn per step (non-CPU buffers, composite actions);
    ``pairs`` (root, next) may hold torch pairs, copied by the same ``d[t] = s``."""
    _, nxt = env.buffers()
    root_pairs, next_pairs = pairs
    single = len(env.action_keys) == 1
    done_t, t_end = nxt.get(DONE), steps
    for t in range(steps):
        for d, s in root_pairs:
            d[t] = s
        action = rand()
        if single:
            storage.get(env.action_key)[t].copy_(action)
        else:
            for key in env.action_keys:
                storage.get(key)[t].copy_(action.get(key))
        env.fast_step(action)
        for d, s in next_pairs:
            d[t] = s
        if brk and bool(done_t.any()):
            t_end = t + 1
            break
    return _finish(storage, t_end, steps, nxt, env)


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
    if tensordict is not None:
        env_keys = set(template.keys(True, True))
        for key, value in tensordict.exclude(NEXT).items(True, True):
            if key not in env_keys:  # a copy: the carry writes into it in place
                ptd.set(key, value.clone())
    storage = None
    root_outs: list[tuple[torch.Tensor, Any]] = []  # (dst, key): read from ptd each step
    next_outs: list[tuple[torch.Tensor, Any]] = []
    next_pairs: list[tuple[Any, Any]] = []  # (dst, src): the env's next leaves
    carry: list[tuple] = []
    t_end = steps
    done_t = nxt.get(DONE)
    for t in range(steps):
        out = policy(ptd)
        ptd = ptd if out is None else out
        if storage is None:
            storage, (root_outs, next_outs, next_pairs), policy_next = _policy_storage(
                env, ptd, template, steps
            )
            carry = carry_pairs(policy_next)
        with torch.no_grad():
            for d, key in root_outs:
                d[t].copy_(ptd.get(key))
            if carry:
                carry_state(ptd, carry)
        action = ptd.get(env.action_key) if len(env.action_keys) == 1 else ptd
        env.fast_step(action)
        with torch.no_grad():
            for d, s in next_pairs:
                d[t] = s
            for d, key in next_outs:
                d[t].copy_(ptd.get(key))
        if brk and bool(done_t.any()):
            t_end = t + 1
            break
    return _finish(storage, t_end, steps, nxt, env)


def _policy_storage(
    env: EnvBase, ptd: TensorDictBase, template: TensorDictBase, steps: int
) -> tuple:
    """Storage for the env keys plus whatever the policy wrote (root and ``"next"``), its
    copy pairs (policy outputs by key, root and next; the env's next leaves) and the
    policy's ``"next"`` keys."""
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
    return writer.storage, (root_outs, next_outs, next_pairs), policy_next


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

