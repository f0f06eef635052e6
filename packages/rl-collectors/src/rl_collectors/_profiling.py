"""Per-collector profiling: ``enable_profile`` / ``disable_profile`` and the ``Timing`` tree.

Each Collector (in a worker or in the main process) keeps a ``rl_profiling.Timing``:
``rollout`` per batch, with ``policy``, ``env_step`` and ``storage`` (copies into the
batch) below it. The per-step parts are summed with ``time.perf_counter`` in the loop and
credited once per batch, so timing costs a few clock reads per step, not a context
manager.
"""

from __future__ import annotations

import contextlib
from typing import Any

from rl_profiling import ProfileConfig, ProfilerHook, Timing

__all__ = ["ProfilingMixin", "make_profile_config"]

_NULL = contextlib.nullcontext()


def make_profile_config(config: ProfileConfig | None, **kwargs: Any) -> ProfileConfig:
    """``config`` as is, or a ``ProfileConfig`` built from the keyword arguments."""
    if config is not None:
        if not isinstance(config, ProfileConfig):
            raise TypeError(f"enable_profile(config=...): expected a ProfileConfig, got {type(config).__name__}")
        if any(v is not None for v in kwargs.values()):
            raise ValueError("enable_profile: pass either config=... or keyword fields, not both")
        return config
    return ProfileConfig(**{k: v for k, v in kwargs.items() if v is not None})


class ProfilingMixin:
    """``enable_profile``, ``disable_profile``, ``timing_report`` for one Collector."""

    worker_idx: int

    def _init_profiling(self, worker_idx: int) -> None:
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
