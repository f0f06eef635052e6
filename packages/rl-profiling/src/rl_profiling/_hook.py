"""``ProfilerHook``: one ``torch.profiler`` lifecycle over a worker's rollouts."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from rl_profiling._config import ProfileConfig
from rl_profiling._ranges import ARMED, ENV_VAR
from rl_profiling._recorder import RECORDER
from rl_profiling._torch import import_torch

__all__ = ["ProfilerHook"]

logger = logging.getLogger(__name__)


class _TorchSession:
    """A started ``torch.profiler.profile`` whose steps are rollouts."""

    def __init__(self, torch: Any, config: ProfileConfig, path: str) -> None:
        activity = torch.profiler.ProfilerActivity
        names = list(config.activities)
        if "cuda" in names and not torch.cuda.is_available():
            logger.warning(
                "ProfileConfig.activities asks for 'cuda' but CUDA is unavailable: CPU only"
            )
            names.remove("cuda")
        kwargs: dict[str, Any] = {}
        if config.warmup_rollouts > 0:  # the last skipped rollout warms the profiler up
            kwargs["schedule"] = torch.profiler.schedule(
                wait=config.warmup_rollouts - 1, warmup=1, active=config.active_rollouts, repeat=1
            )
        self._path = path
        self.written = False
        experimental = getattr(torch._C._profiler, "_ExperimentalConfig", None)
        # every thread of the process (a server thread and its env threads, together); a
        # torch without the option records the calling thread only
        with contextlib.suppress(TypeError):
            kwargs["experimental_config"] = experimental(profile_all_threads=True)
        self._prof = torch.profiler.profile(
            activities=[getattr(activity, n.upper()) for n in names or ["cpu"]],
            record_shapes=config.record_shapes,
            profile_memory=config.profile_memory,
            with_stack=config.with_stack,
            with_flops=config.with_flops,
            on_trace_ready=self._export,
            **kwargs,
        )
        self._prof.__enter__()

    def _export(self, prof: Any) -> None:
        Path(self._path).parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(self._path)
        self.written = True

    def step(self) -> None:
        self._prof.step()

    def close(self) -> bool:
        self._prof.__exit__(None, None, None)  # exports if still recording
        return self.written


class _RecorderSession:
    """The same lifecycle on rl-profiling's stdlib recorder, when torch is absent."""

    def __init__(self, config: ProfileConfig, path: str) -> None:
        self._config, self._path = config, path
        self._steps = 0
        self._step_range: Any = None
        if config.warmup_rollouts == 0:
            self._begin_step()

    def _begin_step(self) -> None:
        if self._steps == self._config.warmup_rollouts:
            RECORDER.start()
        self._step_range = RECORDER.range(f"ProfilerStep#{self._steps}")
        self._step_range.__enter__()

    def _end_step(self) -> None:
        if self._step_range is not None:
            self._step_range.__exit__(None, None, None)
            self._step_range = None

    def step(self) -> None:
        self._end_step()
        self._steps += 1
        if self._config.warmup_rollouts <= self._steps < self._config.num_rollouts:
            self._begin_step()

    def close(self) -> bool:
        self._end_step()
        if not RECORDER.recording:
            return False
        RECORDER.stop()
        RECORDER.export_chrome_trace(self._path)
        return True


class ProfilerHook:
    """Profile the rollouts of one worker: skip the warm-up, record, write a Chrome trace.

    The hook owns one ``torch.profiler.profile`` in the process that calls it (or, without
    torch, a recording of rl-profiling's stdlib recorder). It is built in the main
    process and pickled to the worker; nothing starts before the first rollout. Wrap each
    rollout in ``with hook():`` (or call :meth:`on_rollout_start` / :meth:`on_rollout_end`
    around it) and call :meth:`stop` when the worker shuts down::

        hook = ProfilerHook(config, worker_idx)     # main process; pickles
        ...                                         # in the worker:
        while running:
            with hook():                            # one rollout
                batch = collector.rollout()
        hook.stop()                                 # idempotent; exports if still recording

    Rollouts ``0 .. warmup_rollouts - 1`` are not recorded; rollouts ``warmup_rollouts ..
    num_rollouts - 1`` are (each appears as a ``ProfilerStep#i`` range); after the last
    one the trace is written to ``config.trace_path(worker_idx)`` and the hook is
    :attr:`done` (further rollouts cost one attribute check). A rollout that raises
    stops the hook: what was recorded so far is written. A worker not in
    ``config.workers`` gets a hook that is done from the start.

    Named ranges (``EnvBase.step``, ``Collector.policy``, ...) appear in the trace only if
    the worker was started with ``RL_PROFILING=1`` (see :func:`profiling_env`); without
    it the trace holds torch's own ops, and the hook logs a warning.

    Args:
        config: what to profile.
        worker_idx: this worker's index (>= 0).

    Raises:
        TypeError: ``config`` is not a ``ProfileConfig`` or ``worker_idx`` not an int.

    Examples:
        >>> hook = ProfilerHook(ProfileConfig(workers=[0]), worker_idx=1)  # not profiled
        >>> hook.enabled, hook.done, hook.active
        (False, True, False)
        >>> with hook():
        ...     pass
        >>> hook.stop() is None
        True
    """

    def __init__(self, config: ProfileConfig, worker_idx: int) -> None:
        if not isinstance(config, ProfileConfig):
            raise TypeError(
                f"ProfilerHook(config=...): expected a ProfileConfig, got {type(config).__name__}"
            )
        if isinstance(worker_idx, bool) or not isinstance(worker_idx, int) or worker_idx < 0:
            raise TypeError(
                f"ProfilerHook(worker_idx=...): expected an int >= 0, got {worker_idx!r}"
            )
        self.config = config
        self.worker_idx = worker_idx
        self.enabled = config.profiles(worker_idx)
        self.trace_path = os.path.abspath(config.trace_path(worker_idx))
        self.rollouts_seen = 0
        self.written: str | None = None
        self._done = not self.enabled
        self._in_rollout = False
        self._session: _TorchSession | _RecorderSession | None = None

    @property
    def active(self) -> bool:
        """Whether the profiler is recording now (from the first recorded rollout on)."""
        return (
            self._session is not None
            and not self._done
            and self.rollouts_seen >= self.config.warmup_rollouts
        )

    @property
    def done(self) -> bool:
        """Whether the hook will record nothing more (trace written, stopped, or not selected)."""
        return self._done

    def __call__(self) -> ProfilerHook:
        """Return the hook itself, a context manager around one rollout."""
        return self

    def __enter__(self) -> ProfilerHook:
        self.on_rollout_start()
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is not None:
            self._in_rollout = False
            self.stop()
        else:
            self.on_rollout_end()

    def on_rollout_start(self) -> None:
        """Call before each rollout; starts the profiler before the first one."""
        if self._done:
            return
        if self._in_rollout:
            raise RuntimeError("ProfilerHook.on_rollout_start() twice without on_rollout_end()")
        self._in_rollout = True
        if self._session is None:
            self._session = self._open_session()

    def on_rollout_end(self) -> None:
        """Call after each rollout; writes the trace after the last recorded one."""
        if self._done:
            return
        if not self._in_rollout:
            raise RuntimeError("ProfilerHook.on_rollout_end() without on_rollout_start()")
        self._in_rollout = False
        self.rollouts_seen += 1
        self._session.step()  # type: ignore[union-attr]
        if self.rollouts_seen >= self.config.num_rollouts:
            self.stop()

    def stop(self) -> str | None:
        """Stop profiling now and write what was recorded; idempotent.

        Returns:
            The path of the trace written, or ``None`` if none was (worker not profiled,
            or stopped before the first recorded rollout).
        """
        if self._done:
            return self.written
        self._done = True
        session, self._session = self._session, None
        if session is not None and session.close():
            self.written = self.trace_path
            logger.info("worker %d: profiler trace written to %s", self.worker_idx, self.written)
        else:
            logger.warning(
                "worker %d: profiling stopped before any recorded rollout (%d seen, %d warm-up); "
                "no trace written",
                self.worker_idx,
                self.rollouts_seen,
                self.config.warmup_rollouts,
            )
        return self.written

    def _open_session(self) -> _TorchSession | _RecorderSession:
        if not ARMED:
            logger.warning(
                "worker %d: %s=1 was not set when rl_profiling was imported in this process: "
                "the trace will hold no named ranges (EnvBase.step, Collector.policy, ...)",
                self.worker_idx,
                ENV_VAR,
            )
        torch = import_torch()
        if torch is None:
            return _RecorderSession(self.config, self.trace_path)
        return _TorchSession(torch, self.config, self.trace_path)

    def __getstate__(self) -> dict[str, Any]:
        if self._session is not None:
            raise TypeError(
                "cannot pickle a ProfilerHook while it is profiling; pickle it before use"
            )
        return self.__dict__.copy()

    def __repr__(self) -> str:
        state = "done" if self._done else "active" if self.active else "waiting"
        return (
            f"ProfilerHook(worker_idx={self.worker_idx}, {state}, "
            f"rollouts_seen={self.rollouts_seen}/{self.config.num_rollouts})"
        )
