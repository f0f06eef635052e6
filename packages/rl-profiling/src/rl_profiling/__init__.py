"""rl-profiling: zero-cost named ranges, Timing trees and torch.profiler hooks.

Stdlib only: torch is imported lazily, when a range is emitted, a CUDA-synchronised
``Timing`` is built or a ``ProfilerHook`` starts. ``RL_PROFILING=1`` arms the ranges at
import; see ``docs/profiling.md``.
"""

from __future__ import annotations

from rl_profiling._config import ProfileConfig
from rl_profiling._hook import ProfilerHook
from rl_profiling._ranges import (
    ARMED,
    ENV_VAR,
    NVTX_ENV_VAR,
    nvtx_enabled,
    profiled,
    profiled_methods,
    profiling_enabled,
    profiling_env,
    record,
    set_nvtx_enabled,
    set_profiling_enabled,
)
from rl_profiling._recorder import RECORDER, Recorder
from rl_profiling._report import PHASES, RunReport
from rl_profiling._timeit import get_available_device, logger, timeit
from rl_profiling._timing import Timing
from rl_profiling._trace import (
    ABSORBING,
    CATEGORIES,
    ProcessStats,
    RangeStats,
    TraceSummary,
    summarize_events,
    summarize_trace,
    summarize_traces,
)
from rl_profiling._trace_events import load_trace_events
from rl_profiling.exceptions import TraceError

__version__ = "0.1.0"

__all__ = [
    "ABSORBING",
    "ARMED",
    "CATEGORIES",
    "ENV_VAR",
    "NVTX_ENV_VAR",
    "PHASES",
    "ProcessStats",
    "ProfileConfig",
    "ProfilerHook",
    "RECORDER",
    "RangeStats",
    "Recorder",
    "RunReport",
    "Timing",
    "TraceError",
    "TraceSummary",
    "__version__",
    "get_available_device",
    "load_trace_events",
    "logger",
    "nvtx_enabled",
    "profiled",
    "profiled_methods",
    "profiling_enabled",
    "profiling_env",
    "record",
    "set_nvtx_enabled",
    "set_profiling_enabled",
    "summarize_events",
    "summarize_trace",
    "summarize_traces",
    "timeit",
]
