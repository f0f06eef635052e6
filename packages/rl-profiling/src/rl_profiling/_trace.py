"""Read a Chrome trace and summarise where the time goes (what ``rl-profile summary`` prints).

Input: the events :mod:`rl_profiling._trace_events` reads from a file (the Trace Event
Format as ``torch.profiler``'s ``export_chrome_trace`` and rl-profiling's recorder write it),
grouped into each thread's ranges.

Per name: calls, total time, and self time (total minus the time of the ranges nested
directly inside it on the same pid/tid). Per category (environment, policy, collector,
weight push, storage, replay, advantage, loss, backward, optimiser, compile): every range's
self time goes to exactly one category (see ``CATEGORIES``), so the shares add up to the
busy time, and aten ops under ``Collector.policy`` count as policy inference. Per
process: busy time and batches, to name a multi-process collector's slow worker.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rl_profiling._trace_events import SKIP_CATS, load_trace_events, thread_ranges

__all__ = [
    "ABSORBING",
    "CATEGORIES",
    "ProcessStats",
    "RangeStats",
    "TraceSummary",
    "summarize_events",
    "summarize_trace",
    "summarize_traces",
]

_EPS_US = 0.01  # torch rounds timestamps to the nanosecond: tolerate that when nesting

CATEGORIES: dict[str, tuple[str, str, re.Pattern[str]]] = {
    "env": (
        "environment stepping",
        "docs/envs.md",
        re.compile(r"^\w*Env\w*\.|^\w*Transform\w*\.|(?i:gym)"),
    ),
    "policy": (
        "policy inference",
        "docs/performance/index.md",
        re.compile(r"^\w*Collector\.policy|^\w*(Policy|Actor)\w*\.|^InferenceServer\."),
    ),
    "collector": (
        "collector overhead / waiting for data",
        "docs/collectors.md",
        re.compile(r"^\w*Collector\.(rollout|_rollout)|^Learner\.(collect|wait_for_data)$"),
    ),
    "weights": (
        "weight push",
        "docs/collectors.md",
        re.compile(r"\.update_policy_weights_$|^Learner\.weight_push$|WeightUpdater\w*\."),
    ),
    "storage": (
        "storage writes",
        "docs/replay.md",
        re.compile(r"^\w*Storage\w*\."),
    ),
    "replay": (
        "replay buffer",
        "docs/replay.md",
        re.compile(r"^\w*(ReplayBuffer|Sampler|Writer)\w*\.|^Learner\.replay$"),
    ),
    "advantage": (
        "advantage",
        "docs/objectives.md",
        re.compile(r"^\w*(GAE|Estimator|VTrace)\w*\.|^Learner\.advantage$"),
    ),
    "loss": (
        "loss",
        "docs/objectives.md",
        re.compile(r"^\w*Loss\w*\.|^Learner\.loss$"),
    ),
    "backward": (
        "backward",
        "docs/performance/recipes.md",
        re.compile(r"^autograd::|(?i:backward)"),
    ),
    "optimiser": (
        "optimiser",
        "docs/performance/recipes.md",
        re.compile(r"^Optimizer\.|^Learner\.optimiser$|^(SoftUpdate|HardUpdate)\."),
    ),
    "compile": (
        "torch.compile",
        "docs/performance/knobs.md",
        re.compile(r"^compile_with_warmup\."),
    ),
}
"""Category key -> (label, docs page to read next, pattern on range names).

A slice of time belongs to the innermost categorised range around it (a storage write
inside ``ReplayBuffer.extend`` is storage; a ``Collector.rollout``'s own time is collector
overhead, its env steps environment), except inside a learner range: everything under an
``ABSORBING`` category's range is that category's (an actor's forward inside a loss is
loss time, not policy inference)."""

ABSORBING = frozenset({"advantage", "loss", "backward", "optimiser", "compile"})


@dataclass(frozen=True)
class RangeStats:
    """Time spent in every range of one name (microseconds)."""

    name: str
    calls: int
    total_us: float
    self_us: float


@dataclass
class ProcessStats:
    """One process of a trace (a collector worker, the learner): its busy time and batches.

    Attributes:
        label: the process id, or ``FILE:pid`` when several trace files are read together.
        busy_us: time inside its threads' outermost ranges.
        categories: category key -> time (as :attr:`TraceSummary.categories`).
        rollouts: its ``Collector.rollout`` ranges (batches collected).
        rollout_us: their total time.
    """

    label: str
    busy_us: float = 0.0
    categories: dict[str, float] = field(default_factory=dict)
    rollouts: int = 0
    rollout_us: float = 0.0

    @property
    def us_per_rollout(self) -> float:
        """Mean time of one batch, or 0 when the process collected none."""
        return self.rollout_us / self.rollouts if self.rollouts else 0.0


@dataclass
class TraceSummary:
    """Where the time of a trace goes; built by :func:`summarize_trace`.

    Attributes:
        ranges: per-name statistics, by decreasing total time.
        profiled_us: busy CPU-thread time: the sum, over threads, of the time inside
            outermost ranges (threads that overlap in time are added up).
        categories: category key (see ``CATEGORIES``) -> the self time of the ranges it
            owns (the innermost categorised range, or the outermost learner one).
        threads: number of (pid, tid) with ranges.
        gpu_us: total duration of GPU kernels, memcpy and memset events.
        gpu_events: their number.
        skipped: events left out, by category (``python_function`` stacks, ...).
        processes: per process (see :class:`ProcessStats`), by label.

    Examples:
        >>> events = [
        ...     {"ph": "X", "name": "Collector.rollout", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        ...     {"ph": "X", "name": "EnvBase.step", "ts": 1, "dur": 6, "pid": 1, "tid": 1},
        ...     {"ph": "X", "name": "Collector.policy", "ts": 7, "dur": 2, "pid": 1, "tid": 1},
        ... ]
        >>> s = summarize_events(events)
        >>> [(r.name, r.total_us, r.self_us) for r in s.ranges]  # doctest: +NORMALIZE_WHITESPACE
        [('Collector.rollout', 10.0, 2.0), ('EnvBase.step', 6.0, 6.0),
         ('Collector.policy', 2.0, 2.0)]
        >>> s.verdict()  # doctest: +NORMALIZE_WHITESPACE
        'environment stepping takes 60% of the profiled time (policy inference 20%,
        collector overhead / waiting for data 20%): read docs/envs.md next'
    """

    ranges: list[RangeStats]
    profiled_us: float
    categories: dict[str, float]
    threads: int
    gpu_us: float = 0.0
    gpu_events: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    processes: dict[str, ProcessStats] = field(default_factory=dict)

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
        label, page = _label_and_page(top)
        others = ", ".join(f"{_label_and_page(k)[0]} {shares[k]:.0%}" for k in rest)
        tail = f" ({others})" if others else ""
        return f"{label} takes {shares[top]:.0%} of the profiled time{tail}: read {page} next"

    def slow_worker(self, ratio: float = 1.5) -> str | None:
        """Name the process whose batches take ``ratio`` times the others' median, if any.

        Compares the mean ``Collector.rollout`` time of the processes that collected
        (the workers of a multi-process collector); ``None`` with fewer than two of them
        or when none stands out. The line says where the slow worker's time goes.
        """
        workers = [p for p in self.processes.values() if p.rollouts]
        if len(workers) < 2:
            return None
        slowest = max(workers, key=lambda p: p.us_per_rollout)
        others = sorted(p.us_per_rollout for p in workers if p is not slowest)
        median = others[len(others) // 2] if len(others) % 2 else (
            others[len(others) // 2 - 1] + others[len(others) // 2]
        ) / 2
        if median <= 0 or slowest.us_per_rollout < ratio * median:
            return None
        busy = slowest.busy_us or 1.0
        top = max(slowest.categories, key=slowest.categories.get, default=None)
        where = (
            f"; {_label_and_page(top)[0]} takes {slowest.categories[top] / busy:.0%} of its "
            f"time: read {_label_and_page(top)[1]} next"
            if top is not None
            else ""
        )
        return (
            f"process {slowest.label} is the slow worker: "
            f"{slowest.us_per_rollout / 1e3:.3f} ms per batch, "
            f"{slowest.us_per_rollout / median:.1f}x the median of the other "
            f"{len(others)} ({median / 1e3:.3f} ms){where}"
        )


def _label_and_page(key: str) -> tuple[str, str]:
    if key in CATEGORIES:
        return CATEGORIES[key][0], CATEGORIES[key][1]
    return "other", "docs/profiling.md#learner-report"


def summarize_trace(path: str | os.PathLike[str]) -> TraceSummary:
    """Summarise a Chrome trace file: see :class:`TraceSummary`."""
    return summarize_events(load_trace_events(path))


def summarize_traces(paths: list[str | os.PathLike[str]]) -> TraceSummary:
    """Summarise several trace files as one (the workers of a multi-process collector).

    Each file's processes are labelled ``FILE:pid`` (the file name alone when it holds
    one process), so :meth:`TraceSummary.slow_worker` can name the worker's own trace.
    """
    if len(paths) == 1:
        return summarize_trace(paths[0])
    events: list[dict[str, Any]] = []
    for path in paths:
        name = os.path.basename(os.fspath(path))
        mine = load_trace_events(path)
        pids = {
            e.get("pid")
            for e in mine
            if isinstance(e, dict) and e.get("ph") in ("X", "B") and e.get("cat") not in SKIP_CATS
        }
        for e in mine:
            if isinstance(e, dict):
                label = name if len(pids) == 1 else f"{name}:{e.get('pid')}"
                events.append({**e, "pid": label})
    return summarize_events(events)


@dataclass
class _Totals:
    """Accumulators of :func:`summarize_events`, per name and per category."""

    calls: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    total: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    self_time: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    categories: dict[str, float] = field(default_factory=lambda: defaultdict(float))


def _walk_thread(
    evs: list[tuple[float, float, str]], totals: _Totals, classify: _Classifier
) -> tuple[float, dict[str, float]]:
    """Nest one thread's ranges; return its busy time and its time per category.

    Each range's self time goes to its owner: the innermost categorised range around it,
    or the outermost ``ABSORBING`` one (see ``CATEGORIES``).
    """
    evs.sort()
    busy, mine = 0.0, defaultdict(float)
    stack: list[list[Any]] = []  # [end, dur, name, child_time, owner category]

    def close(frame: list[Any]) -> None:
        _, d, n, child, owner = frame
        own = max(d - child, 0.0)
        totals.self_time[n] += own
        if owner is not None:
            mine[owner] += own

    for ts, neg_dur, name in evs:
        dur, end = -neg_dur, ts - neg_dur
        while stack and stack[-1][0] < end - _EPS_US:
            close(stack.pop())
        parent = stack[-1] if stack else None
        totals.calls[name] += 1
        totals.total[name] += dur
        if parent is None:
            busy += dur
        else:
            parent[3] += dur
        inherited = parent[4] if parent is not None else None
        owner = inherited if inherited in ABSORBING else (classify(name) or inherited)
        stack.append([end, dur, name, 0.0, owner])
    while stack:
        close(stack.pop())
    return busy, mine


def summarize_events(events: list[dict[str, Any]]) -> TraceSummary:
    """Summarise a list of Trace Event Format events: see :class:`TraceSummary`."""
    skipped: dict[str, int] = {}
    threads, gpu_us, gpu_events = thread_ranges(events, skipped)
    totals, classify = _Totals(), _Classifier()
    profiled = 0.0
    processes: dict[str, ProcessStats] = {}
    rollouts = _rollout_times(threads)
    for (pid, _), evs in threads.items():
        busy, mine = _walk_thread(evs, totals, classify)
        profiled += busy
        for key, value in mine.items():
            totals.categories[key] += value
        stats = processes.setdefault(str(pid), ProcessStats(str(pid)))
        stats.busy_us += busy
        for key, value in mine.items():
            stats.categories[key] = stats.categories.get(key, 0.0) + value
    for pid, durations in rollouts.items():
        processes[pid].rollouts = len(durations)
        processes[pid].rollout_us = sum(durations)
    ranges = [
        RangeStats(n, totals.calls[n], totals.total[n], totals.self_time[n]) for n in totals.total
    ]
    ranges.sort(key=lambda r: -r.total_us)
    return TraceSummary(
        ranges=ranges,
        profiled_us=profiled,
        categories=dict(totals.categories),
        threads=len(threads),
        gpu_us=gpu_us,
        gpu_events=gpu_events,
        skipped=skipped,
        processes=processes,
    )


_ROLLOUT = re.compile(r"^\w*Collector\.rollout$|^\w*Collector\._rollout_frames$")


def _rollout_times(
    threads: dict[tuple[Any, Any], list[tuple[float, float, str]]],
) -> dict[str, list[float]]:
    """Per process: the durations of its batches (``Collector.rollout`` ranges)."""
    out: dict[str, list[float]] = defaultdict(list)
    for (pid, _), evs in threads.items():
        out[str(pid)].extend(-neg for _, neg, name in evs if _ROLLOUT.match(name))
    return {pid: durations for pid, durations in out.items() if durations}


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
