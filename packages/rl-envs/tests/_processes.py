"""Helpers for the tests that start real worker processes: who is alive, and ``sys.path``."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil

HERE = Path(__file__).resolve().parent


def children() -> set[int]:
    """Live child processes, minus multiprocessing's resource tracker (lives until exit)."""
    out = set()
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if (
                "resource_tracker" not in " ".join(child.cmdline())
                and child.status() != psutil.STATUS_ZOMBIE
            ):
                out.add(child.pid)
    return out


def settled(before: set[int], timeout: float = 10.0) -> set[int]:
    """The children started since ``before`` still alive after waiting up to ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    return children() - before


@contextlib.contextmanager
def spawnable() -> Iterator[None]:
    """Put the tests directory on ``sys.path`` while workers start (spawn copies sys.path).

    Workers then re-import a test module by its bare name, which the module registers with
    :func:`importable_by_workers`.
    """
    sys.path.insert(0, str(HERE))
    try:
        yield
    finally:
        sys.path.remove(str(HERE))


def importable_by_workers(module: str, *objs: Any) -> None:
    """Register test module ``module`` (its ``__name__``) under the bare name workers use.

    A spawned worker imports the test file as a top-level module named after the file; its
    ``objs`` (the classes and functions sent to workers) pickle by reference under that
    name, and the name refers to the already imported module here.
    """
    name = module.rpartition(".")[2]
    for obj in objs:
        obj.__module__ = name
    sys.modules.setdefault(name, sys.modules[module])
