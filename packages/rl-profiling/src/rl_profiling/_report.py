"""``RunReport``: where a whole training loop's time goes, learner side included.

In the Sample Factory sense: one :class:`~rl_profiling.Timing` tree over the loop's
phases (collect or wait for data, advantage, replay, loss, backward, optimiser, weight
push), with the run's total time, its frames and frames/s, and the time spent outside
every phase. Each phase is also a named range ``Learner.<phase>`` (free when
``RL_PROFILING`` is unset), so a profiler trace of the loop has the report's structure
and ``rl-profile summary`` files every microsecond under the same phases.
"""

from __future__ import annotations

import time
from contextlib import AbstractContextManager
from typing import Any

from rl_profiling._config import ProfileConfig
from rl_profiling._hook import ProfilerHook
from rl_profiling._ranges import record
from rl_profiling._timing import Timing, _fmt

__all__ = ["PHASES", "RunReport"]

PHASES = (
    "collect",
    "wait_for_data",
    "advantage",
    "replay",
    "loss",
    "backward",
    "optimiser",
    "weight_push",
)
"""The phases ``rl-profile summary`` files under its learner and collection categories."""


class _Phase:
    """One ``with report.add_time(key)`` block: the ``Learner.<key>`` range around the timer."""

    __slots__ = ("_range", "_scope", "_traced")

    def __init__(self, name: str, scope: Any, traced: Any) -> None:
        self._range, self._scope, self._traced = record(name), scope, traced

    def __enter__(self) -> None:
        self._range.__enter__()
        if self._traced is not None:
            self._traced.__enter__()
        self._scope.__enter__()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            self._scope.__exit__(exc_type, exc, tb)
            if self._traced is not None:
                self._traced.__exit__(exc_type, exc, tb)
        finally:
            self._range.__exit__(exc_type, exc, tb)


class RunReport(Timing):
    """A ``Timing`` of a whole training loop: phases, total time, frames/s, a trace.

    Every ``add_time(key)`` block is also the named range ``Learner.<key>`` (free when
    ``RL_PROFILING`` is unset), so a profiler trace of the loop has the report's
    structure; use the keys of :data:`PHASES` for ``rl-profile summary`` to file the time
    under the matching category (other keys are timed the same and count as *other*).
    The clock starts when the report is built; :meth:`step` ends one training iteration
    (it counts the batch's frames and, with ``profile``, steps the profiler);
    :meth:`report` shows each phase's seconds and share of the run, and
    ``outside phases``: the rest of the loop (logging, Python between the blocks).
    ``timeit`` / ``time_avg`` keys work as in ``Timing`` (no range). With ``profile``,
    :attr:`traced` is a second ``Timing`` of the traced iterations only, the window the
    trace covers, and the report shows it too: compare it with ``rl-profile summary``.

    Args:
        name: the report's title.
        cuda_sync: see :class:`~rl_profiling.Timing` (synchronise before each clock read).
        profile: a trace path (``"traces/ppo.json"``) or a :class:`ProfileConfig` to
            record a ``torch.profiler`` trace of a few iterations (the defaults skip 2
            and record 3); ``None`` records nothing.

    Examples:
        >>> report = RunReport("PPO")
        >>> for batch in [[0] * 8, [0] * 8]:  # a collector's batches in real loops
        ...     with report.add_time("loss"):
        ...         pass
        ...     with report.add_time("optimiser"):
        ...         pass
        ...     report.step(frames=len(batch))
        >>> report.frames, report.count("loss")
        (16, 2)
        >>> print(report.report())  # doctest: +ELLIPSIS
        PPO: 16 frames in ... s, ... frames/s
          loss ...
          optimiser ...
          outside phases ...
    """

    def __init__(
        self,
        name: str = "Run report",
        *,
        cuda_sync: bool = False,
        profile: str | ProfileConfig | None = None,
    ) -> None:
        super().__init__(name, cuda_sync=cuda_sync)
        self.frames = 0
        self.iterations = 0
        self.trace: str | None = None
        self._names: dict[str, str] = {}
        self.traced = Timing(f"{name}, traced iterations")
        self._traced_s = 0.0  # wall time of the traced iterations
        self._hook = _hook(profile)
        if self._hook is not None:
            self._hook.on_rollout_start()
        self._tracing = self._hook is not None and self._hook.active
        self._start = self._iteration_start = time.perf_counter()
        self._stop: float | None = None

    def add_time(self, key: str) -> AbstractContextManager[None]:
        """Time a block under ``key`` (nested under open blocks), as the range ``Learner.<key>``."""
        name = self._names.get(key)
        if name is None:
            name = self._names[key] = f"Learner.{key}"
        traced = self.traced.add_time(key) if self._tracing else None
        return _Phase(name, super().add_time(key), traced)

    def step(self, frames: int = 0) -> None:
        """End one training iteration: count its ``frames``; step the profiler, if any."""
        self.frames += int(frames)
        self.iterations += 1
        hook = self._hook
        now = time.perf_counter()
        if self._tracing:
            self._traced_s += now - self._iteration_start
        self._iteration_start = now
        if hook is not None and not hook.done:
            hook.on_rollout_end()
            if not hook.done:
                hook.on_rollout_start()
            else:
                self.trace = hook.written
        self._tracing = hook is not None and hook.active

    def stop(self) -> str | None:
        """Freeze the total time and write the trace if one is recording; returns its path."""
        if self._stop is None:
            self._stop = time.perf_counter()
        if self._hook is not None:
            self.trace = self._hook.stop()
        self._tracing = False
        return self.trace

    def reset(self) -> None:
        """Forget every key, frame and iteration; the clock starts again now."""
        super().reset()
        self.traced.reset()
        self.frames, self.iterations, self._traced_s = 0, 0, 0.0
        self._start, self._stop = time.perf_counter(), None

    @property
    def seconds(self) -> float:
        """Seconds since the start (until :meth:`stop`, when it was called)."""
        end = self._stop if self._stop is not None else time.perf_counter()
        return end - self._start

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat figures for a logger: every key's seconds, ``total_s`` and ``fps``."""
        seconds = self.seconds
        out = super().to_dict(prefix)
        out[prefix + "total_s"] = seconds
        out[prefix + "fps"] = self.frames / seconds if seconds > 0 else 0.0
        return out

    def report(self) -> str:
        """The run's total time and frames/s, then each key: seconds, share, blocks."""
        seconds = max(self.seconds, 1e-12)
        lines = [
            f"{self.name}: {self.frames:,} frames in {seconds:.2f} s, "
            f"{self.frames / seconds:,.0f} frames/s"
        ]
        self._lines(self._root, seconds, 0, lines)
        self._outside(self._root, seconds, lines)
        if self.traced._root.children and self._traced_s > 0:
            lines.append(f"traced iterations: {self._traced_s:.2f} s")
            self._lines(self.traced._root, self._traced_s, 0, lines)
            self._outside(self.traced._root, self._traced_s, lines)
        return "\n".join(lines)

    @staticmethod
    def _outside(root: Any, seconds: float, lines: list[str]) -> None:
        outside = max(seconds - sum(c.value for c in root.children.values()), 0.0)
        label = "outside phases"
        lines.append(f"  {label:<{_WIDTH}} {_fmt(outside):>9} s {outside / seconds:6.1%}")

    def _lines(self, node: Any, seconds: float, depth: int, lines: list[str]) -> None:
        for key, child in node.children.items():
            label = "  " * depth + key
            lines.append(
                f"  {label:<{_WIDTH}} {_fmt(child.value):>9} s {child.value / seconds:6.1%}"
                f"  x{child.count}"
            )
            self._lines(child, seconds, depth + 1, lines)

    def __repr__(self) -> str:
        return f"RunReport(name={self.name!r}, frames={self.frames}, keys={len(self.to_dict())})"


def _hook(profile: str | ProfileConfig | None) -> ProfilerHook | None:
    if profile is None:
        return None
    if isinstance(profile, str):
        profile = ProfileConfig(save_path=profile)
    if not isinstance(profile, ProfileConfig):
        raise TypeError(
            "RunReport(profile=...): expected a trace path, a ProfileConfig or None, got "
            f"{type(profile).__name__}"
        )
    return ProfilerHook(profile, worker_idx=0)


_WIDTH = 18
