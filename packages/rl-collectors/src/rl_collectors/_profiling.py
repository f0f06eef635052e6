"""Collector profiling: ``enable_profile`` / ``disable_profile`` and the ``Timing`` trees.

- :class:`ProfilingMixin` (one Collector, in a worker or in the main process): a
  ``rl_profiling.Timing`` with ``rollout`` per batch and ``policy``, ``env_step`` and
  ``storage`` (copies into the batch) below it. The per-step parts are summed with
  ``time.perf_counter`` in the loop and credited once per batch, so timing costs a few
  clock reads per step, not a context manager.
- :class:`WorkersProfilingMixin` (a collector whose Collectors run elsewhere:
  ``MultiCollector``'s worker processes, ``RemoteCollectorBase``'s Ray actors,
  torch.distributed ranks and RPC workers): forwards the same commands to the selected
  workers and merges their ``Timing`` trees.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from rl_profiling import ProfileConfig, ProfilerHook, Timing

__all__ = ["ProfilingMixin", "WorkersProfilingMixin", "make_profile_config"]

_NULL = contextlib.nullcontext()


def make_profile_config(config: ProfileConfig | None, **kwargs: Any) -> ProfileConfig:
    """``config`` as is, or a ``ProfileConfig`` built from the keyword arguments."""
    if config is not None:
        if not isinstance(config, ProfileConfig):
            raise TypeError(
                f"enable_profile(config=...): expected a ProfileConfig, got {type(config).__name__}"
            )
        if any(v is not None for v in kwargs.values()):
            raise ValueError("enable_profile: pass either config=... or keyword fields, not both")
        return config
    return ProfileConfig(**{k: v for k, v in kwargs.items() if v is not None})


class ProfilingMixin:
    """``enable_profile``, ``disable_profile``, ``timing_report`` for one Collector."""

    worker_idx: int

    def init_worker_profiling(self, worker_idx: int) -> None:
        """Start a fresh ``Timing`` and profiler state as worker ``worker_idx``.

        Internal interface, not public API: the collector's own constructor calls it with
        ``0``, and the runtime that hosts a collector in a worker process, rank or Ray
        actor calls it again with that worker's index (through ``Collector.bind_worker``
        for a ``Collector``), so that ``enable_profile(workers=[...])`` selects it and
        its ``Timing`` is titled by it. Users never call it; TorchRL has no such method.

        Args:
            worker_idx: the worker's index among the collector's workers.
        """
        self.worker_idx = worker_idx
        self.timing = Timing(f"Collector worker {worker_idx}")
        self._profiler: ProfilerHook | None = None
        self._previous_profilers: list[ProfilerHook | None] = []

    def _hook(self) -> Any:
        """The context manager around one rollout: the profiler hook, or a no-op."""
        hook = self._profiler
        return _NULL if hook is None or hook.done else hook()

    def _credit_steps(self, t_policy: float, t_env: float, t_store: float, steps: int) -> None:
        self.timing.add("policy", t_policy, steps)
        self.timing.add("env_step", t_env, steps)
        self.timing.add("storage", t_store, steps)

    def enable_profile(
        self,
        workers: list[int] | None = None,
        num_rollouts: int | None = None,
        warmup_rollouts: int | None = None,
        save_path: str | None = None,
        activities: list[str] | None = None,
        record_shapes: bool | None = None,
        profile_memory: bool | None = None,
        with_stack: bool | None = None,
        with_flops: bool | None = None,
        *,
        config: ProfileConfig | None = None,
    ) -> None:
        """Profile the next rollouts with ``torch.profiler`` and write a Chrome trace.

        Installs an ``rl_profiling.ProfilerHook`` (see ``ProfileConfig`` for the fields;
        unset ones keep its defaults) if this collector's worker index is selected.
        Named ranges appear only in processes started with ``RL_PROFILING=1``.
        """
        cfg = make_profile_config(
            config, workers=workers, num_rollouts=num_rollouts, warmup_rollouts=warmup_rollouts,
            save_path=save_path, activities=activities, record_shapes=record_shapes,
            profile_memory=profile_memory, with_stack=with_stack, with_flops=with_flops,
        )
        self._previous_profilers.append(self._profiler)
        self._profiler = ProfilerHook(cfg, self.worker_idx)

    def disable_profile(self) -> str | None:
        """Stop profiling, write the trace, restore the previous hook; returns the path."""
        if self._profiler is None:
            return None
        written = self._profiler.stop()
        self._profiler = self._previous_profilers.pop() if self._previous_profilers else None
        return written

    def _stop_profiling(self) -> None:
        while self._profiler is not None:
            self.disable_profile()

    def timing_report(self) -> str:
        """The ``Timing`` tree of this collector as text."""
        return self.timing.report()


class WorkersProfilingMixin:
    """Profiling of a collector whose Collectors run in workers (processes, ranks, actors).

    ``enable_profile`` / ``disable_profile`` forward to the selected workers;
    ``worker_timings`` / ``timing_report`` gather and merge their ``Timing`` trees.
    The host class supplies ``timing`` (its own ``Timing``), ``kind`` (the workers' name
    in the report's title) and two hooks: ``_worker_count()`` and
    ``_worker_call(indices, name, args)``, which runs the worker command ``name`` with the
    positional ``args`` on each selected worker and returns their replies in order.
    """

    kind = "worker"
    timing: Timing
    _profiled: list[int]

    def _worker_count(self) -> int:
        raise NotImplementedError

    def _worker_call(self, indices: Sequence[int], name: str, args: tuple) -> list[Any]:
        raise NotImplementedError

    def enable_profile(
        self,
        workers: list[int] | None = [0],  # noqa: B006  (TorchRL's default, never mutated)
        *,
        config: ProfileConfig | None = None,
        **fields: Any,
    ) -> None:
        """Install an ``rl_profiling.ProfilerHook`` in the selected workers (by index).

        Takes the ``ProfileConfig`` fields as keywords (``num_rollouts``,
        ``warmup_rollouts``, ``save_path``: a path on the worker's machine, with
        ``{worker_idx}``, e.g. ``"traces/worker_{worker_idx}.json"``) or a ``config``.
        Named ranges appear only in workers that run with ``RL_PROFILING=1``: worker
        processes inherit it from this process's environment, and remote collectors are
        armed to match the trainer.
        """
        cfg = make_profile_config(config, workers=None if config is not None else workers, **fields)
        self._profiled = [i for i in range(self._worker_count()) if cfg.profiles(i)]
        self._worker_call(self._profiled, "enable_profile", (cfg,))

    def disable_profile(self) -> list[str | None]:
        """Stop profiling in the profiled workers; returns the trace paths they wrote."""
        selected = getattr(self, "_profiled", [])
        self._profiled = []
        return self._worker_call(selected, "disable_profile", ())

    def worker_timings(self) -> list[Timing]:
        """Each worker's ``Timing`` (rollout, policy, env_step, storage)."""
        return self._worker_call(range(self._worker_count()), "timing", ())

    def timing_report(self) -> str:
        """Two trees: the workers' Timing merged (summed over workers) and this process's."""
        n = self._worker_count()
        merged = Timing.merge(*self.worker_timings())
        merged.name = f"Collector {self.kind}s (sum over {n})"
        return merged.report() + "\n" + self.timing.report()
