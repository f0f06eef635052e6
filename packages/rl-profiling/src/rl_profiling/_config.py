"""``ProfileConfig``: which workers to profile, for how many rollouts, and where to write."""

from __future__ import annotations

import os
import string
from dataclasses import dataclass, field

__all__ = ["ProfileConfig"]

ACTIVITIES = ("cpu", "cuda")
_PLACEHOLDER = "worker_idx"


def _check_int(name: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"ProfileConfig.{name}: expected an int, got {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"ProfileConfig.{name}: expected an int >= {minimum}, got {value}")


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"ProfileConfig.{name}: expected a bool, got {value!r}")


@dataclass
class ProfileConfig:
    """What to profile in (collector) worker processes, and where the traces go.

    Each selected worker runs a :class:`ProfilerHook`: it lets ``warmup_rollouts``
    rollouts go by unrecorded (compilation, caches, allocator), records the next
    ``num_rollouts - warmup_rollouts`` with ``torch.profiler`` and writes one Chrome trace
    per worker, to open in Perfetto or summarise with ``rl-profile summary``.

    Attributes:
        workers: indices of the workers to profile; ``None`` profiles every worker.
            Default ``[0]``: one trace is usually enough.
        num_rollouts: rollouts seen in total, warm-up included (> ``warmup_rollouts``).
        warmup_rollouts: rollouts skipped before recording starts (>= 0). With one or
            more, the last warm-up rollout also warms the profiler up (torch's schedule
            ``warmup`` step) so its start-up cost stays out of the trace.
        save_path: where each trace is written, with a ``{worker_idx}`` placeholder
            (required when several workers may be profiled). Relative paths are resolved
            against the working directory of the process that creates the hook. A path
            ending in ``.gz`` is gzip-compressed.
        activities: what ``torch.profiler`` records: ``"cpu"`` and/or ``"cuda"``
            (``"cuda"`` is dropped, with a logged warning, where CUDA is unavailable).
        record_shapes: record the input shapes of each op.
        profile_memory: record tensor allocations and frees.
        with_stack: record Python stacks (larger traces, more overhead).
        with_flops: estimate the FLOPs of matrix multiplications and convolutions.

    Raises:
        TypeError: a field has the wrong type.
        ValueError: a field has a wrong value (the message states the rule).

    Examples:
        >>> cfg = ProfileConfig(workers=[0, 2], num_rollouts=5, warmup_rollouts=2)
        >>> cfg.active_rollouts, cfg.profiles(2), cfg.profiles(1)
        (3, True, False)
        >>> cfg.trace_path(2)
        'traces/worker_2.json'
        >>> ProfileConfig(num_rollouts=2, warmup_rollouts=2)  # doctest: +NORMALIZE_WHITESPACE
        Traceback (most recent call last):
        ...
        ValueError: ProfileConfig: num_rollouts must exceed warmup_rollouts
        (num_rollouts=2, warmup_rollouts=2)
    """

    workers: list[int] | None = field(default_factory=lambda: [0])
    num_rollouts: int = 5
    warmup_rollouts: int = 2
    save_path: str = "traces/worker_{worker_idx}.json"
    activities: list[str] = field(default_factory=lambda: ["cpu"])
    record_shapes: bool = False
    profile_memory: bool = False
    with_stack: bool = False
    with_flops: bool = False

    def __post_init__(self) -> None:
        self._check_workers()
        _check_int("warmup_rollouts", self.warmup_rollouts, 0)
        _check_int("num_rollouts", self.num_rollouts, 1)
        if self.num_rollouts <= self.warmup_rollouts:
            raise ValueError(
                "ProfileConfig: num_rollouts must exceed warmup_rollouts "
                f"(num_rollouts={self.num_rollouts}, warmup_rollouts={self.warmup_rollouts})"
            )
        self._check_save_path()
        self._check_activities()
        for name in ("record_shapes", "profile_memory", "with_stack", "with_flops"):
            _check_bool(name, getattr(self, name))

    def _check_workers(self) -> None:
        if self.workers is None:
            return
        if isinstance(self.workers, (str, bytes)) or not hasattr(self.workers, "__iter__"):
            raise TypeError(
                "ProfileConfig.workers: expected a list of worker indices or None, "
                f"got {type(self.workers).__name__}"
            )
        self.workers = list(self.workers)
        if not self.workers:
            raise ValueError("ProfileConfig.workers: expected at least one index (None = all)")
        for idx in self.workers:
            _check_int("workers[...]", idx, 0)
        if len(set(self.workers)) != len(self.workers):
            raise ValueError(f"ProfileConfig.workers: duplicate indices in {self.workers}")

    def _check_save_path(self) -> None:
        if not isinstance(self.save_path, (str, os.PathLike)):
            raise TypeError(
                f"ProfileConfig.save_path: expected a str path, got {type(self.save_path).__name__}"
            )
        self.save_path = os.fspath(self.save_path)
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(self.save_path) if f is not None}
        except ValueError as err:
            raise ValueError(f"ProfileConfig.save_path {self.save_path!r}: {err}") from None
        if fields - {_PLACEHOLDER}:
            raise ValueError(
                f"ProfileConfig.save_path {self.save_path!r}: the only placeholder allowed is "
                f"{{{_PLACEHOLDER}}}, got {sorted(fields - {_PLACEHOLDER})}"
            )
        several = self.workers is None or len(self.workers) > 1
        if several and _PLACEHOLDER not in fields:
            raise ValueError(
                f"ProfileConfig.save_path {self.save_path!r} must contain {{{_PLACEHOLDER}}} "
                f"when several workers are profiled (workers={self.workers}): "
                "each writes its own trace"
            )

    def _check_activities(self) -> None:
        if isinstance(self.activities, str) or not hasattr(self.activities, "__iter__"):
            raise TypeError(
                "ProfileConfig.activities: expected a list such as ['cpu', 'cuda'], got "
                f"{self.activities!r}"
            )
        self.activities = [str(a).lower() for a in self.activities]
        bad = [a for a in self.activities if a not in ACTIVITIES]
        if not self.activities or bad or len(set(self.activities)) != len(self.activities):
            raise ValueError(
                f"ProfileConfig.activities: expected distinct values among {list(ACTIVITIES)}, "
                f"got {self.activities}"
            )

    @property
    def active_rollouts(self) -> int:
        """How many rollouts are recorded: ``num_rollouts - warmup_rollouts``."""
        return self.num_rollouts - self.warmup_rollouts

    def profiles(self, worker_idx: int) -> bool:
        """Whether the worker ``worker_idx`` is profiled."""
        return self.workers is None or worker_idx in self.workers

    def trace_path(self, worker_idx: int) -> str:
        """``save_path`` with ``{worker_idx}`` filled in."""
        return self.save_path.format(worker_idx=worker_idx)
