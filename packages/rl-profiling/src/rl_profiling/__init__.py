"""rl-profiling: zero-cost named ranges, Timing trees and torch.profiler hooks.

Stdlib only. ``RL_PROFILING=1`` arms the ranges at import; see ``docs/profiling.md``.
"""

from __future__ import annotations

from rl_profiling._ranges import (
    ARMED,
    ENV_VAR,
    profiled,
    profiling_enabled,
    profiling_env,
    record,
    set_profiling_enabled,
)
from rl_profiling._recorder import RECORDER, Recorder

__version__ = "0.1.0"

__all__ = [
    "ARMED",
    "ENV_VAR",
    "RECORDER",
    "Recorder",
    "__version__",
    "profiled",
    "profiling_enabled",
    "profiling_env",
    "record",
    "set_profiling_enabled",
]
