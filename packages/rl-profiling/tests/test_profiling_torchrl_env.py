"""TorchRL's ``TORCHRL_PROFILING=1``: arms profiling like ``RL_PROFILING=1`` and says
once, at import, that our variable is ``RL_PROFILING``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

CODE = (
    "import json, os, subprocess, sys\n"
    "import rl_profiling\n"
    "child = subprocess.run([sys.executable, '-c', "
    "'import rl_profiling; print(rl_profiling.ARMED)'],\n"
    "                       capture_output=True, text=True, check=True)\n"
    "print(json.dumps([rl_profiling.ARMED, os.environ.get('RL_PROFILING'),\n"
    "                  child.stdout.strip(), child.stderr]))\n"
)


def _run(**env_vars: str) -> tuple[list, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RL_PROFILING", "TORCHRL_PROFILING")}
    env.update(env_vars)
    proc = subprocess.run([sys.executable, "-c", CODE], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return json.loads(proc.stdout), proc.stderr


@pytest.mark.timeout(120)
def test_torchrl_variable_arms_and_warns_once_naming_ours():
    (armed, exported, child_armed, child_stderr), stderr = _run(TORCHRL_PROFILING="1")
    assert armed is True and exported == "1" and child_armed == "True"
    assert stderr.count("TORCHRL_PROFILING=1") == 1 and "RL_PROFILING=1 instead" in stderr
    assert "TORCHRL_PROFILING" not in child_stderr  # the child is armed by RL_PROFILING: no repeat


@pytest.mark.timeout(120)
def test_our_variable_wins_and_nothing_is_said():
    (armed, _, _, _), stderr = _run(TORCHRL_PROFILING="1", RL_PROFILING="0")
    assert armed is False and "TORCHRL_PROFILING" not in stderr


@pytest.mark.timeout(120)
def test_unset_or_false_torchrl_variable_is_silent():
    (armed, exported, _, _), stderr = _run(TORCHRL_PROFILING="0")
    assert armed is False and exported is None and stderr == ""
