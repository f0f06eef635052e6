"""Subprocess helpers: arming is read once at import, so armed runs need a fresh Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "profiling_workload.py"


def python_env(armed: bool) -> dict[str, str]:
    """This process's environment with RL_PROFILING set to 1 or removed."""
    env = dict(os.environ)
    env.pop("RL_PROFILING", None)
    if armed:
        env["RL_PROFILING"] = "1"
    return env


def run_python(
    args: list[str], *, armed: bool, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python *args``; fail the test with its output if it exits non-zero."""
    proc = subprocess.run(
        [sys.executable, *args],
        env=python_env(armed),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, (
        f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )
    return proc


def run_workload(mode: str, out: Path, timeout: float) -> dict:
    proc = run_python([str(WORKLOAD), mode, str(out)], armed=True, timeout=timeout)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def torch_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """One armed Python with torch: a real torch.profiler and a ProfilerHook (see
    profiling_workload)."""
    out = tmp_path_factory.mktemp("torch_run")
    return run_workload("torch", out, timeout=240), out


@pytest.fixture(scope="session")
def stdlib_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The same loop, armed, with torch made unimportable: the stdlib recorder's trace."""
    out = tmp_path_factory.mktemp("stdlib_run")
    return run_workload("stdlib", out, timeout=60), out


@pytest.fixture
def run_py():  # noqa: ANN201
    """``run_py(args, armed=...)``: run a fresh Python (see :func:`run_python`)."""
    return run_python
