"""Shared fixtures of the cross-package integration tests."""

from __future__ import annotations

import importlib.util
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import psutil
import pytest


def _shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:  # no /dev/shm on this platform
        return set()


def _interpreter_service(proc: psutil.Process) -> bool:
    """multiprocessing's resource tracker: started with the first spawned process, it lives
    as long as the interpreter by design (it is what unlinks leaked segments at exit)."""
    try:
        return any("resource_tracker" in part for part in proc.cmdline())
    except psutil.Error:
        return True  # gone meanwhile


@pytest.fixture
def no_leaks() -> Iterator[None]:
    """Fail if the test leaves child processes or new /dev/shm segments behind."""
    me = psutil.Process()
    children_before = {p.pid for p in me.children(recursive=True)}
    shm_before = _shm_entries()
    yield
    deadline = time.monotonic() + 10.0
    while True:
        alive = [
            p
            for p in me.children(recursive=True)
            if p.pid not in children_before and p.is_running()
        ]
        alive = [
            p for p in alive if p.status() != psutil.STATUS_ZOMBIE and not _interpreter_service(p)
        ]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not alive, f"child processes left behind: {[(p.pid, p.cmdline()) for p in alive]}"
    leaked = {
        name for name in _shm_entries() - shm_before if name.startswith(("torch_", "psm_", "rl_"))
    }
    assert not leaked, f"shared-memory segments left behind: {sorted(leaked)}"


@pytest.fixture
def bench_script() -> Callable[[str], ModuleType]:
    """``bench_script(name)``: ``benchmarks/<name>.py`` executed as a fresh module (named
    ``<name>_under_test`` only while it runs, so that its dataclasses resolve)."""

    def load(name: str) -> ModuleType:
        path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"{name}_under_test", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules[spec.name]
        return module

    return load
