"""Multi-process collectors: ``MultiCollector(sync=...)``, ``MultiSyncCollector``,
``MultiAsyncCollector`` and ``AsyncCollector``.

Each worker runs a :class:`~rl_collectors.Collector` in a spawned process (see
``_worker.py``) and writes its batches into shared memory; the pipes carry only small
commands. Sync and async differ only in the schedule object (``_schedules.py``).
"""

from __future__ import annotations

import multiprocessing as mp
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from rl_envs.processes import Portable
from rl_profiling import Timing, profiled
from tensordict import TensorDictBase

from rl_collectors._base import BaseCollector
from rl_collectors._collector import Collector
from rl_collectors._options import CollectorOptions
from rl_collectors._profiling import WorkersProfilingMixin
from rl_collectors._schedules import AsyncSchedule, SyncSchedule
from rl_collectors._worker import InProcessWorker, ProcessWorker, WorkerSpec, call_name
from rl_collectors.exceptions import CollectorClosedError, CollectorError, WorkerError
from rl_collectors.weight_sync import MultiProcessedWeightUpdater, weights_of

__all__ = ["AsyncCollector", "MultiAsyncCollector", "MultiCollector", "MultiSyncCollector"]

_MAIN_SIDE = ("postproc", "replay_buffer", "post_collect_hook", "split_trajs", "weight_updater")


def _check_one_env_per_worker(num_workers_per_collector: Any) -> None:
    """TorchRL's ``num_workers_per_collector``: we run one env constructor per worker."""
    if num_workers_per_collector != 1 or isinstance(num_workers_per_collector, bool):
        raise ValueError(
            f"num_workers_per_collector: expected 1 (one env constructor per worker), got "
            f"{num_workers_per_collector!r}; for more sub-envs per worker make each "
            "constructor return a batched env (GymEnv(..., num_envs=N) or "
            "ParallelEnv(N, make_env)), "
            "or pass more constructors in create_env_fns"
        )


def _shared_updater(given: Any, policy: Any) -> MultiProcessedWeightUpdater | None:
    """The updater whose shared weights the workers read: the user's, bound, or ours."""
    if given is None:
        if isinstance(policy, torch.nn.Module) and weights_of(policy) is not None:
            return MultiProcessedWeightUpdater(policy)
        return None
    if not isinstance(given, MultiProcessedWeightUpdater):
        raise ValueError(
            f"weight_updater: expected a MultiProcessedWeightUpdater (or None) for worker "
            f"processes, got {type(given).__name__}, which only updates a policy in this "
            "process; the default (None) shares the policy's weights with the workers"
        )
    given.bind(None, source=policy)
    return given


def _close_workers(workers: list[Any]) -> None:
    """Finalizer: close every worker (bounded); safe to call twice."""
    while workers:
        workers.pop().close()


def _keep_alive_error(failed: dict[int, WorkerError], worker: Any, fn: Any, *args: Any) -> Any:
    """``fn(*args)``; a command error of a live worker goes into ``failed``, not up."""
    try:
        return fn(*args)
    except WorkerError as err:
        if not err.alive:
            raise
        failed[worker.idx] = err
        return None


class MultiCollector(BaseCollector, WorkersProfilingMixin):
    """Run one :class:`~rl_collectors.Collector` per env constructor in worker processes.

    ``sync=True``: each batch holds ``frames_per_batch`` frames split evenly over the
    workers, stacked ``[num_workers, *env.batch_size, T]``. ``sync=False``: each batch
    is one worker's ``[*env.batch_size, T]`` batch of ``frames_per_batch`` frames, the
    first ready, tagged with the policy version that produced it
    (``("collector", "policy_version")``); workers keep collecting meanwhile.

    Args:
        create_env_fns: one env constructor (a picklable callable) per worker.
        policy: as for ``Collector``; pickled to each worker. Weights go through shared
            memory (:class:`~rl_collectors.weight_sync.MultiProcessedWeightUpdater`).
        frames_per_batch: frames per yielded batch.
        total_frames: frames in total (exact), ``-1`` for no limit.
        sync: synchronous (``True``) or asynchronous schedule.
        update_at_each_batch: push the policy's weights after each yielded batch (when the
            loop asks for the next one); a worker loads them when it starts its next
            batch (with ``sync=False`` the batch it is already collecting keeps the old ones).
        in_process: run the workers in this process, one after the other (debugging:
            pdb, cProfile); same code path, no processes.
        timeout: seconds a batch or reply may take before the worker is declared hung.
        start_timeout: seconds a worker may take to start (spawn, imports, env).
        num_threads: ``torch.set_num_threads`` in each worker (``None``: leave it).
        filter_warnings_subprocess: ignore warnings in the worker processes (the
            default: optional dependencies warn once per process); ``False`` shows them.
        num_workers_per_collector: TorchRL's number of env copies each worker's
            collector runs; only ``1`` (one env constructor per worker: make that env
            batched, e.g. ``GymEnv(..., num_envs=N)``, for more sub-envs per worker).
        **options: the :class:`~rl_collectors.CollectorOptions`; ``postproc``,
            ``replay_buffer``, ``post_collect_hook`` and ``split_trajs`` run here, the
            rest in the workers. ``init_random_frames`` counts the frames of all workers
            (each worker collects its share, rounded up): with ``sync``, a batch is
            random exactly when the frames collected before it are below it.
            ``weight_updater`` may be a
            :class:`~rl_collectors.weight_sync.MultiProcessedWeightUpdater` (built with
            or without a source): it then carries the weights to the workers; an
            updater that cannot reach other processes is refused.

    Raises:
        ValueError: a bad argument (e.g. frames not divisible by workers x sub-envs,
            ``num_workers_per_collector`` other than 1, a ``weight_updater`` that cannot
            reach worker processes).
        WorkerError: a worker failed to start (its index and traceback are in the message).

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> make_env = partial(GymEnv, "CartPole-v1", num_envs=2)
        >>> with MultiCollector([make_env] * 2, frames_per_batch=8, total_frames=16,
        ...                     sync=True, in_process=True) as collector:
        ...     shapes = [batch.batch_size for batch in collector]
        >>> shapes
        [torch.Size([2, 2, 2]), torch.Size([2, 2, 2])]
    """

    def __init__(
        self,
        create_env_fns: Sequence[Any],
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        sync: bool = True,
        update_at_each_batch: bool = False,
        in_process: bool = False,
        timeout: float = 300.0,
        start_timeout: float = 120.0,
        num_threads: int | None = 1,
        filter_warnings_subprocess: bool = True,
        num_workers_per_collector: int = 1,
        **options: Any,
    ) -> None:
        _check_one_env_per_worker(num_workers_per_collector)
        fns = list(create_env_fns) if isinstance(create_env_fns, Sequence) else None
        if not fns:
            raise ValueError(
                "create_env_fns: expected a non-empty list of env constructors, "
                f"got {create_env_fns!r}"
            )
        self.options = CollectorOptions(**options)
        CollectorOptions.check_frames(frames_per_batch, total_frames, len(fns) if sync else 1)
        self.num_workers, self.sync = len(fns), bool(sync)
        self.frames_per_batch, self.total_frames = frames_per_batch, total_frames
        self.update_at_each_batch, self.timeout = update_at_each_batch, timeout
        self.policy = policy
        self.filter_warnings = bool(filter_warnings_subprocess)
        self.frames = 0
        self.timing = Timing("Collector main process")
        self._closed = False
        self._workers: list[Any] = []
        self._finalizer = weakref.finalize(self, _close_workers, self._workers)
        self.weight_updater = _shared_updater(self.options.weight_updater, policy)
        worker_opts = {k: v for k, v in options.items() if k not in _MAIN_SIDE}
        if worker_opts.get("init_random_frames"):  # a total, like total_frames: a share each
            worker_opts["init_random_frames"] = -(
                -worker_opts["init_random_frames"] // self.num_workers
            )
        per_worker = frames_per_batch // self.num_workers if self.sync else frames_per_batch
        try:
            self._start(
                fns, policy, per_worker, worker_opts, in_process, num_threads, start_timeout
            )
            self._schedule = (SyncSchedule if self.sync else AsyncSchedule)(self, self._workers)
        except BaseException:
            self.shutdown()
            raise

    def _start(
        self,
        fns: list,
        policy: Any,
        per_worker: int,
        opts: dict,
        in_process: bool,
        threads: Any,
        timeout: float,
    ) -> None:
        weights = None
        if self.weight_updater is not None:
            weights = (self.weight_updater.shared, self.weight_updater.sequence)
        ctx = mp.get_context("spawn")
        for idx, fn in enumerate(fns):
            spec = WorkerSpec(fn, policy, per_worker, opts, idx, self.num_workers, weights, threads,
                              filter_warnings=self.filter_warnings)
            self._workers.append(InProcessWorker(spec) if in_process else ProcessWorker(spec, ctx))
        for worker in self._workers:
            worker.wait_ready(timeout)
        rows = {w.num_rows for w in self._workers}
        if len(rows) != 1:
            raise ValueError(
                "create_env_fns: every env must have the same number of sub-envs, "
                f"got {sorted(rows)}"
            )
        self.num_rows = rows.pop()
        per_batch = self.num_rows * (self.num_workers if self.sync else 1)
        CollectorOptions.check_frames(self.frames_per_batch, self.total_frames, per_batch)

    # -- iteration ---------------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorDictBase | None]:
        self._check_open()
        try:
            for batch in self._schedule.batches():
                self.frames += batch.numel()
                yield self.options.deliver(batch)
                if self.update_at_each_batch:
                    self.update_policy_weights_()
        except WorkerError:
            self.shutdown()
            raise


    def remaining_frames(self) -> int | None:
        """Frames still to collect, ``None`` for an endless collector."""
        return None if self.total_frames < 0 else self.total_frames - self.frames

    # -- commands to every worker ----------------------------------------------------------
    def _broadcast(
        self, cmd: str, payloads: Sequence[Any], workers: Sequence[int] | None = None
    ) -> list[Any]:
        """Send one command to the selected workers and gather their replies, in order.

        A worker that died or hung shuts the collector down. A command that raised in a
        worker that keeps serving (``err.alive``) is re-raised after every other reply
        was read, so the collector stays usable.
        """
        self._check_open()
        selected = [
            self._workers[i] for i in (range(self.num_workers) if workers is None else workers)
        ]
        failed: dict[int, WorkerError] = {}
        try:
            for worker, payload in zip(selected, payloads, strict=True):
                _keep_alive_error(failed, worker, worker.send, cmd, payload)
            replies = [_keep_alive_error(failed, w, w.recv_reply, self.timeout)
                       for w in selected if w.idx not in failed]
        except WorkerError:
            self.shutdown()
            raise
        if failed:
            raise failed[min(failed)]
        return replies

    def map_fn(self, name: Any, list_of_args: Sequence[Any]) -> list[Any]:
        """Call a function in every worker; worker ``i`` gets ``list_of_args[i]``.

        Args:
            name: a Collector method name (``"set_seed"``), a public function of
                ``rl_profiling`` by its bare name (``"set_profiling_enabled"``), a
                dotted path (``"rl_profiling.set_profiling_enabled"``) or a picklable
                callable.
            list_of_args: one entry per worker: a tuple of positional arguments (a
                non-tuple value is passed as the single argument).

        Returns:
            The workers' return values, in worker order.

        Raises:
            ValueError: ``name`` names nothing (checked here: no worker is called).
            WorkerError: the call raised in a worker (with its traceback); the workers
                keep running and the collector stays usable.
        """
        name = call_name(name, Collector)
        if callable(name):  # a notebook's function reaches the workers by value
            name = Portable(name, "map_fn's function")
        if len(list_of_args) != self.num_workers:
            raise ValueError(
                f"map_fn: expected {self.num_workers} argument entries (one per worker), "
                f"got {len(list_of_args)}"
            )
        args = [a if isinstance(a, tuple) else (a,) for a in list_of_args]
        return self._broadcast("map_fn", [(name, a) for a in args])

    @profiled("MultiCollector.update_policy_weights_")
    def update_policy_weights_(self, policy_or_weights: Any = None) -> int:
        """Write new weights into the shared copy each worker reads when it starts a batch.

        Returns:
            The new policy version (batches collected with it carry it).
        """
        self._check_open()
        if self.weight_updater is None:
            raise CollectorError("update_policy_weights_: the policy has no weights to share")
        return self.weight_updater.push(policy_or_weights)

    def set_seed(self, seed: int, static_seed: bool = False) -> int | None:
        """Seed worker ``i``'s env with the seed returned by worker ``i - 1``."""
        for i in range(self.num_workers):
            seed = self._broadcast("set_seed", [(seed, static_seed)], [i])[0]
        return seed

    def state_dict(self) -> dict[str, Any]:
        """Frames collected and every worker's Collector state (``worker{i}``)."""
        states = self._broadcast("state_dict", [None] * self.num_workers)
        version = None if self.weight_updater is None else self.weight_updater.version
        return {"frames": self.frames, "num_workers": self.num_workers, "policy_version": version,
                **{f"worker{i}": s for i, s in enumerate(states)}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`: frames, versions and each worker's Collector state
        (its counters and random-frame progress; its env reseeded and reset).

        Raises:
            ValueError: the state was saved by a collector with another number of workers.
        """
        saved = sum(1 for key in state if key.startswith("worker"))
        if saved != self.num_workers:
            raise ValueError(
                f"state: expected the state of {self.num_workers} workers, got {saved}"
            )
        self.frames = int(state["frames"])
        if self.weight_updater is not None and state.get("policy_version") is not None:
            self.weight_updater.restore_version(state["policy_version"])
        self._broadcast("load_state_dict", [state[f"worker{i}"] for i in range(self.num_workers)])

    # -- profiling (WorkersProfilingMixin's hooks) -------------------------------------------
    def _worker_count(self) -> int:
        return self.num_workers

    def _worker_call(self, indices: Sequence[int], name: str, args: tuple) -> list[Any]:
        payload = args[0] if args else None  # a worker command takes one payload
        return self._broadcast(name, [payload] * len(indices), indices)

    # -- lifecycle --------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CollectorClosedError(f"{type(self).__name__}: used after shutdown()")

    def shutdown(self) -> None:
        """Stop every worker (close, then terminate, then kill; bounded); idempotent."""
        self._closed = True
        self._finalizer()


    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_workers={self.num_workers}, sync={self.sync}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames})"
        )


class MultiSyncCollector(MultiCollector):
    """:class:`MultiCollector` with ``sync=True``: batches ``[num_workers, *B, T]``.

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> make_env = partial(GymEnv, "CartPole-v1", num_envs=2)
        >>> collector = MultiSyncCollector([make_env] * 2, frames_per_batch=8,
        ...                                total_frames=8, in_process=True)
        >>> next(iter(collector)).batch_size
        torch.Size([2, 2, 2])
        >>> collector.shutdown()
    """

    def __init__(self, create_env_fns: Sequence[Any], policy: Any = None, **kwargs: Any) -> None:
        super().__init__(create_env_fns, policy, sync=True, **kwargs)


class MultiAsyncCollector(MultiCollector):
    """:class:`MultiCollector` with ``sync=False``: the first ready worker batch.

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> make_env = partial(GymEnv, "CartPole-v1", num_envs=2)
        >>> collector = MultiAsyncCollector([make_env] * 2, frames_per_batch=8,
        ...                                 total_frames=8, in_process=True)
        >>> next(iter(collector)).batch_size
        torch.Size([2, 4])
        >>> collector.shutdown()
    """

    def __init__(self, create_env_fns: Sequence[Any], policy: Any = None, **kwargs: Any) -> None:
        super().__init__(create_env_fns, policy, sync=False, **kwargs)


class AsyncCollector(MultiAsyncCollector):
    """One Collector in a background process; batches tagged with the policy version.

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> collector = AsyncCollector(partial(GymEnv, "CartPole-v1", num_envs=2),
        ...                            frames_per_batch=8, total_frames=8, in_process=True)
        >>> next(iter(collector))["collector", "policy_version"].shape
        torch.Size([2, 4])
        >>> collector.shutdown()
    """

    def __init__(self, create_env_fn: Any, policy: Any = None, **kwargs: Any) -> None:
        super().__init__([create_env_fn], policy, **kwargs)
