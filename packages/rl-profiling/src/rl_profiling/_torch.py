"""The one place rl-profiling imports torch: lazily, and only if it imports cleanly."""

from __future__ import annotations

from types import ModuleType
from typing import Any

_cache: dict[str, Any] = {}


def import_torch() -> ModuleType | None:
    """Return the ``torch`` module, or ``None`` when it is absent or fails to import.

    The answer is cached for the life of the process: rl-profiling never imports torch at
    its own import, only when a range, a CUDA-synchronised clock or a profiler is used.
    """
    if "torch" not in _cache:
        try:
            import torch
        except (ImportError, OSError):  # absent, blocked (sys.modules["torch"] = None) or broken
            torch = None
        _cache["torch"] = torch
    return _cache["torch"]
