"""Read a Chrome trace and summarise where the time goes (what ``rl-profile summary`` prints).

Input: the Trace Event Format as ``torch.profiler``'s ``export_chrome_trace`` and
rl-profiling's recorder write it: a JSON object with ``traceEvents`` or a bare list;
complete events (``"ph": "X"``) and ``B``/``E`` pairs; ``.gz`` files are decompressed.

Per name: calls, total time, and self time (total minus the time of the ranges nested
directly inside it on the same pid/tid). Per category (environment, policy, storage,
loss/optimiser): the time of the outermost range of that category, so nested ranges of
one category are not counted twice, and a range nested in another category's range
(aten ops under ``Collector.policy``) counts for the outer one.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rl_profiling.exceptions import TraceError

__all__ = [
    "CATEGORIES",
    "RangeStats",
    "TraceSummary",
    "load_trace_events",
    "summarize_events",
    "summarize_trace",
]

_EPS_US = 0.01  # torch rounds timestamps to the nanosecond: tolerate that when nesting
_GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"}
_SKIP_CATS = {"Trace", "python_function"}  # whole-trace span; Python stacks (with_stack)

CATEGORIES: dict[str, tuple[str, str, re.Pattern[str]]] = {
    "env": (
        "environment stepping",
        "docs/envs.md",
        re.compile(r"^\w*Env\w*\.|^\w*Transform\w*\.|(?i:gym)"),
    ),
    "policy": (
        "policy inference",
        "docs/performance/index.md",
        re.compile(r"^\w*Collector\.policy|^\w*(Policy|Actor)\w*\."),
    ),
    "storage": (
        "storage",
        "docs/replay.md",
        re.compile(r"^\w*(ReplayBuffer|Storage|Sampler|Writer)\w*\."),
    ),
    "loss": (
        "loss/optimiser",
        "docs/objectives.md",
        re.compile(
            r"^\w*Loss\w*\.|^Loss|^Optimizer\.|(?i:backward)|^autograd::|^\w*(GAE|Estimator)\w*\."
        ),
    ),
}
"""Category key -> (label, docs page to read next, pattern on range names)."""


@dataclass(frozen=True)
class RangeStats:
    """Time spent in every range of one name (microseconds)."""

    name: str
    calls: int
    total_us: float
    self_us: float


@dataclass
class TraceSummary:
    """Where the time of a trace goes; built by :func:`summarize_trace`.

    Attributes:
        ranges: per-name statistics, by decreasing total time.
        profiled_us: busy CPU-thread time: the sum, over threads, of the time inside
            outermost ranges (threads that overlap in time are added up).
        categories: category key (see ``CATEGORIES``) -> time of its outermost ranges.
        threads: number of (pid, tid) with ranges.
        gpu_us: total duration of GPU kernels, memcpy and memset events.
        gpu_events: their number.
        skipped: events left out, by category (``python_function`` stacks, ...).

    Examples:
        >>> events = [
        ...     {"ph": "X", "name": "Collector.rollout", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        ...     {"ph": "X", "name": "EnvBase.step", "ts": 1, "dur": 6, "pid": 1, "tid": 1},
        ...     {"ph": "X", "name": "Collector.policy", "ts": 7, "dur": 2, "pid": 1, "tid": 1},
        ... ]
        >>> s = summarize_events(events)
        >>> [(r.name, r.total_us, r.self_us) for r in s.ranges]
        [('Collector.rollout', 10.0, 2.0), ('EnvBase.step', 6.0, 6.0), ('Collector.policy', 2.0, 2.0)]
        >>> s.verdict()
        'environment stepping takes 60% of the profiled time (policy inference 20%, other 20%): read docs/envs.md next'
    """

    ranges: list[RangeStats]
    profiled_us: float
    categories: dict[str, float]
    threads: int
    gpu_us: float = 0.0
    gpu_events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def top_by_total(self, n: int) -> list[RangeStats]:
        """The ``n`` ranges with the largest total time."""
        return sorted(self.ranges, key=lambda r: -r.total_us)[:n]

    def top_by_self(self, n: int) -> list[RangeStats]:
        """The ``n`` ranges with the largest self time."""
        return sorted(self.ranges, key=lambda r: -r.self_us)[:n]

    def shares(self) -> dict[str, float]:
        """Fraction of the profiled time per category, plus ``"other"`` for the rest."""
        total = self.profiled_us or 1.0
        out = {key: self.categories.get(key, 0.0) / total for key in CATEGORIES}
        out["other"] = max(0.0, 1.0 - sum(out.values())) if self.profiled_us else 0.0
        return out

    def verdict(self) -> str:
        """One line: the category that takes the most time and the docs page to read next."""
        if not any(self.categories.values()):
            return (
                "no environment, policy, storage or loss range in this trace: was RL_PROFILING=1 "
                "set before the profiled process started? read docs/profiling.md next"
            )
        shares = self.shares()
        ranked = sorted(shares, key=lambda k: -shares[k])
        top, rest = ranked[0], [k for k in ranked[1:] if shares[k] >= 0.005][:2]
        label, page = self._label_and_page(top)
        others = ", ".join(f"{self._label_and_page(k)[0]} {shares[k]:.0%}" for k in rest)
        tail = f" ({others})" if others else ""
        return f"{label} takes {shares[top]:.0%} of the profiled time{tail}: read {page} next"

    def _label_and_page(self, key: str) -> tuple[str, str]:
        if key in CATEGORIES:
            return CATEGORIES[key][0], CATEGORIES[key][1]
        if any(r.name == "Collector.rollout" for r in self.ranges):
            return "other", "docs/collectors.md"
        return "other", "docs/performance/index.md"


def load_trace_events(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read the events of a Chrome trace file (``.json`` or ``.json.gz``).

    Raises:
        FileNotFoundError: the file does not exist.
        TraceError: the file is not JSON, or not a Trace Event Format document.
    """
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            text = f.read()
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


def summarize_trace(path: str | os.PathLike[str]) -> TraceSummary:
    """Summarise a Chrome trace file: see :class:`TraceSummary`."""
    return summarize_events(load_trace_events(path))


def _complete_events(
    events: list[dict[str, Any]], skipped: dict[str, int]
) -> tuple[dict[tuple[Any, Any], list[tuple[float, float, str]]], float, int]:
    """Group CPU ranges by (pid, tid) as (ts, -dur, name); B/E pairs become ranges."""
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
        if cat in _GPU_CATS:
            gpu_us += float(e.get("dur", 0.0)) if cat != "gpu_user_annotation" else 0.0
            gpu_events += cat != "gpu_user_annotation"
            continue
        if cat in _SKIP_CATS:
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


def summarize_events(events: list[dict[str, Any]]) -> TraceSummary:
    """Summarise a list of Trace Event Format events: see :class:`TraceSummary`."""
    skipped: dict[str, int] = {}
    threads, gpu_us, gpu_events = _complete_events(events, skipped)
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    self_time: dict[str, float] = defaultdict(float)
    categories: dict[str, float] = defaultdict(float)
    classify = _Classifier()
    profiled = 0.0
    for evs in threads.values():
        evs.sort()
        stack: list[list[Any]] = []  # [end, dur, name, child_time, category of outermost]
        for ts, neg_dur, name in evs:
            dur, end = -neg_dur, ts - neg_dur
            while stack and stack[-1][0] < end - _EPS_US:
                _, d, n, child, _ = stack.pop()
                self_time[n] += max(d - child, 0.0)
            parent = stack[-1] if stack else None
            calls[name] += 1
            total[name] += dur
            cat = classify(name)
            if parent is None:
                profiled += dur
            else:
                parent[3] += dur
            inherited = parent[4] if parent is not None else None
            if cat is not None and inherited is None:
                categories[cat] += dur
            stack.append([end, dur, name, 0.0, inherited or cat])
        for _, d, n, child, _ in stack:
            self_time[n] += max(d - child, 0.0)
    ranges = [RangeStats(n, calls[n], total[n], self_time[n]) for n in total]
    ranges.sort(key=lambda r: -r.total_us)
    return TraceSummary(
        ranges=ranges,
        profiled_us=profiled,
        categories=dict(categories),
        threads=len(threads),
        gpu_us=gpu_us,
        gpu_events=gpu_events,
        skipped=skipped,
    )


class _Classifier:
    """Name -> category key (or None), cached: traces repeat a few names many times."""

    def __init__(self) -> None:
        self._cache: dict[str, str | None] = {}

    def __call__(self, name: str) -> str | None:
        if name not in self._cache:
            self._cache[name] = next(
                (key for key, (_, _, pattern) in CATEGORIES.items() if pattern.search(name)), None
            )
        return self._cache[name]
