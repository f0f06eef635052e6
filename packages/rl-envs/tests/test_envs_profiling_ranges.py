"""Named ranges of rl-envs show up under torch.profiler when RL_PROFILING=1."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("gymnasium")

SCRIPT = """
import torch
from torch.profiler import profile
from rl_envs import GymEnv, StepCounter, TransformedEnv
env = TransformedEnv(GymEnv("CartPole-v1", num_envs=2,
                            categorical_action_encoding=True), StepCounter(3))
with profile() as prof:
    td = env.reset()
    td = env.rand_step(td)
    td = env.reset(td["next"].exclude("reward").set("_reset", td["next", "done"].clone()))
    env.step_and_maybe_reset(env.rand_action(td))
    env.rollout(3)
names = {e.name for e in prof.events()}
print(sorted(n for n in names if "Env" in n))
"""

EXPECTED = [
    "EnvBase.reset",
    "EnvBase.rollout",
    "EnvBase.step",
    "EnvBase.step_and_maybe_reset",
    "TransformedEnv._reset",
    "TransformedEnv._step",
]


def test_ranges_recorded_when_armed():
    env = {**os.environ, "RL_PROFILING": "1"}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr
    for name in EXPECTED:
        assert name in out.stdout, (name, out.stdout)


def test_unarmed_methods_are_plain_functions():
    from rl_envs import EnvBase

    if not os.environ.get("RL_PROFILING"):
        assert not hasattr(EnvBase.step, "__wrapped__")


def test_public_names_import():
    import rl_envs

    for name in rl_envs.__all__:
        assert getattr(rl_envs, name) is not None
