"""Read a Chrome trace: the file, and its events grouped into each thread's CPU ranges.

Input: the Trace Event Format as ``torch.profiler``'s ``export_chrome_trace`` and
rl-profiling's recorder write it: a JSON object with ``traceEvents`` or a bare list;
complete events (``"ph": "X"``) and ``B``/``E`` pairs; ``.gz`` files are decompressed.
:mod:`rl_profiling._trace` summarises what this reads.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections import defaultdict
from typing import Any

from rl_profiling.exceptions import TraceError

__all__ = ["GPU_CATS", "SKIP_CATS", "load_trace_events", "thread_ranges"]

GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
SKIP_CATS = {"Trace", "python_function"}  # whole-trace span; Python stacks (with_stack)


def load_trace_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read the events of a Chrome trace file (``.json`` or ``.json.gz``).

    Raises:
        FileNotFoundError: the file does not exist.
        TraceError: the file is not JSON, not a Trace Event Format document, or a
            ``.gz`` cut short; the message names the file.
    """
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
    except (EOFError, zlib.error) as err:  # a .gz cut short (a copy or a run interrupted)
        raise TraceError(
            f"{path}: the gzip stream is truncated or corrupt ({err}); the trace was cut "
            "short: export it again"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        if isinstance(err, FileNotFoundError):
            raise
        raise TraceError(f"{path}: cannot read it as text: {err}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        stripped = text.rstrip().rstrip(",")  # the format allows an unterminated array
        if not stripped.startswith("["):
            raise TraceError(f"{path}: not valid JSON ({err})") from None
        try:
            data = json.loads(stripped + "]")
        except json.JSONDecodeError:
            raise TraceError(f"{path}: not valid JSON ({err})") from None
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(
            f"{path}: not a Chrome trace: expected a list of events or an object with a "
            f"'traceEvents' list, got {type(data).__name__}"
            + (f" with keys {sorted(data)[:5]}" if isinstance(data, dict) else "")
        )
    return events


def thread_ranges(
    events: list[dict[str, Any]], skipped: dict[str, int]
) -> tuple[dict[tuple[Any, Any], list[tuple[float, float, str]]], float, int]:
    """Group CPU ranges by (pid, tid) as (ts, -dur, name); B/E pairs become ranges.

    Returns:
        The ranges per thread, the GPU events' total duration (microseconds) and their
        number; ``skipped`` counts the ``python_function`` events left out.
    """
    threads: dict[tuple[Any, Any], list[tuple[float, float, str]]] = defaultdict(list)
    open_b: dict[tuple[Any, Any], list[tuple[float, str]]] = defaultdict(list)
    gpu_us, gpu_events = 0.0, 0
    for e in events:
        if not isinstance(e, dict):
            continue
        ph = e.get("ph")
        if ph not in ("X", "B", "E"):
            continue
        cat = e.get("cat")
        if cat in GPU_CATS:
            gpu_us += float(e.get("dur", 0.0)) if cat != "gpu_user_annotation" else 0.0
            gpu_events += cat != "gpu_user_annotation"
            continue
        if cat in SKIP_CATS:
            if cat == "python_function":
                skipped[cat] = skipped.get(cat, 0) + 1
            continue
        key = (e.get("pid"), e.get("tid"))
        ts = float(e.get("ts", 0.0))
        if ph == "X":
            threads[key].append((ts, -float(e.get("dur", 0.0)), _normalise(str(e.get("name", "")))))
        elif ph == "B":
            open_b[key].append((ts, _normalise(str(e.get("name", "")))))
        elif open_b[key]:
            start, name = open_b[key].pop()
            threads[key].append((start, start - ts, name))
    return threads, gpu_us, gpu_events


def _normalise(name: str) -> str:
    return "ProfilerStep#*" if name.startswith("ProfilerStep#") else name
