"""``check_env_specs``: a short rollout checked against the specs, every mismatch reported."""

from __future__ import annotations

import logging
from typing import Any

import torch
from tensordict import TensorDictBase

from rl_envs._composite import Composite
from rl_envs._env import EnvBase
from rl_envs._keys import NEXT
from rl_envs.exceptions import SpecError

__all__ = ["check_env_specs"]

logger = logging.getLogger(__name__)


def _expected(env: EnvBase) -> tuple[Composite, Composite]:
    root = env.observation_spec.clone()
    root.update(env.state_spec)
    root.update(env.full_action_spec)
    root.update(env.full_done_spec)
    nxt = env.observation_spec.clone()
    nxt.update(env.full_reward_spec)
    nxt.update(env.full_done_spec)
    return root, nxt


def _key_report(where: str, spec: Composite, td: TensorDictBase) -> list[str]:
    expected = {k for k in spec.keys(True, True)}
    got = {k for k in td.keys(True, True)}
    return [
        f"{where}{k!r}: present in the data but in no spec" for k in sorted(got - expected, key=str)
    ]


def check_env_specs(env: EnvBase, steps: int = 3, *, seed: int | None = None) -> None:
    """Run ``reset`` and a ``steps``-step rollout and check every entry against the specs.

    Checks, for the reset output and each step of the rollout (root and ``"next"``):
    every spec key is present, with the spec's shape, dtype and range, no key is
    produced that no spec declares, the rollout has batch size ``[*B, T]`` and holds the
    keys of ``env.fake_tensordict()``.

    Args:
        env: the env to check (it is reset; it is not closed).
        steps: rollout length (finished sub-envs are reset and the rollout goes on).
        seed: optional seed passed to ``env.set_seed`` first.

    Raises:
        SpecError: listing every mismatch, one line each (key, expected, received).

    Examples:
        >>> from rl_envs import GymEnv
        >>> env = GymEnv("CartPole-v1", num_envs=2)
        >>> check_env_specs(env, seed=0)
        >>> env.close()
    """
    if seed is not None:
        env.set_seed(seed)
    root_spec, next_spec = _expected(env)
    problems: list[str] = []
    reset_td = env.reset()
    reset_spec = env.observation_spec.clone()
    reset_spec.update(env.state_spec)
    reset_spec.update(env.full_done_spec)
    problems += [f"reset: {m}" for m in reset_spec.mismatches(reset_td)]
    problems += _key_report("reset: ", reset_spec, reset_td)
    data = env.rollout(steps, break_when_any_done=False)
    want = torch.Size((*env.batch_size, steps))
    if data.batch_size != want:
        problems.append(
            f"rollout: expected batch size {tuple(want)}, received {tuple(data.batch_size)}"
        )
    else:
        problems += _check_steps(data, root_spec, next_spec, steps)
    fake = env.fake_tensordict()
    fake_keys = {k for k in fake.keys(True, True)}
    data_keys = {k for k in data.keys(True, True)}
    for k in sorted(fake_keys - data_keys, key=str):
        problems.append(f"rollout: {k!r} is in fake_tensordict() but missing from the rollout")
    if problems:
        raise SpecError(
            f"check_env_specs({type(env).__name__}) found {len(problems)} problem(s):\n  "
            + "\n  ".join(problems)
        )
    logger.info("check_env_specs(%s) succeeded", type(env).__name__)


def _check_steps(
    data: TensorDictBase, root_spec: Composite, next_spec: Composite, steps: int
) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for t in range(steps):
        step = data[(Ellipsis, t)]
        nxt: Any = step.get(NEXT) if NEXT in step else None
        lines = [f"root {m}" for m in root_spec.mismatches(step.exclude(NEXT))]
        lines += _key_report("root ", root_spec, step.exclude(NEXT))
        if nxt is None:
            lines.append("'next': missing from the rollout")
        else:
            lines += [f"next {m}" for m in next_spec.mismatches(nxt)]
            lines += _key_report("next ", next_spec, nxt)
        for line in lines:  # report each problem once, with the first step it shows up
            if line not in seen:
                seen.add(line)
                problems.append(f"step {t}: {line}")
    return problems
