"""Multi-process collectors: ``MultiCollector(sync=...)``, ``MultiSyncCollector``,
``MultiAsyncCollector`` and ``AsyncCollector``.

Each worker runs a :class:`~rl_collectors.Collector` in a spawned process (see
``_worker.py``) and writes its batches into shared memory; the pipes carry only small
commands. ``MultiCollector`` is the :class:`~rl_collectors._driver.CollectorDriver` (the sync
and async schedules, commands, weights, shutdown) over :class:`PipeTransport`.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mpc
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from rl_envs.processes import Portable
from tensordict import TensorDictBase

from rl_collectors._collector import Collector
from rl_collectors._driver import CollectorDriver
from rl_collectors._host import HostSpec
from rl_collectors._options import CollectorOptions
from rl_collectors._worker import InProcessWorker, ProcessWorker
from rl_collectors.exceptions import WorkerError
from rl_collectors.weight_sync import MultiProcessedWeightUpdater, weights_of

__all__ = [
    "AsyncCollector", "MultiAsyncCollector", "MultiCollector", "MultiSyncCollector",
    "PipeTransport",
]

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


class PipeTransport:
    """The :class:`~rl_collectors._driver.Transport` of worker processes: batches in shared
    memory, commands and replies on one pipe per worker (or runtimes in this process).

    Weights travel through the :class:`~rl_collectors.weight_sync.MultiProcessedWeightUpdater`'s
    shared copy, which each worker reads when it starts a batch: ``request`` sends none.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout, self.infos = timeout, []
        self.workers: list[Any] = []
        self._finalizer = weakref.finalize(self, _close_workers, self.workers)

    def start(self, specs: list[HostSpec], in_process: bool, timeout: float) -> None:
        ctx = mp.get_context("spawn")
        for spec in specs:
            self.workers.append(InProcessWorker(spec) if in_process else ProcessWorker(spec, ctx))
        for worker in self.workers:
            worker.wait_ready(timeout)
        self.infos = [{"num_rows": w.num_rows} for w in self.workers]

    def request(self, idx: int, steps: int, weights: Any) -> None:
        self.workers[idx].send("collect", steps)

    def receive(self, indices: Sequence[int]) -> tuple[int, TensorDictBase]:
        workers = [self.workers[i] for i in indices]
        while True:
            for worker in workers:
                if worker.batches:
                    steps, _version = worker.batches.popleft()
                    return worker.idx, worker.buffer[..., :steps]
            ready = mpc.wait([obj for w in workers for obj in w.waitables], timeout=self.timeout)
            if not ready:
                raise WorkerError(-1, f"no worker produced a batch within {self.timeout} s")
            for worker in workers:
                if any(obj in ready for obj in worker.waitables):
                    worker.batches.append(worker.recv_batch(self.timeout))

    def call(self, indices: Sequence[int], name: Any, args: Sequence[tuple]) -> list[Any]:
        if callable(name):  # a notebook's function reaches the workers by value
            name = Portable(name, "map_fn's function")
        selected = [self.workers[i] for i in indices]
        failed: dict[int, WorkerError] = {}
        for worker, a in zip(selected, args, strict=True):
            _keep_alive_error(failed, worker, worker.send, "call", (name, a))
        replies = [_keep_alive_error(failed, w, w.recv_reply, self.timeout)
                   for w in selected if w.idx not in failed]
        if failed:
            raise failed[min(failed)]
        return replies

    def stack(self, batches: list[TensorDictBase]) -> TensorDictBase:
        return torch.stack(batches, 0)  # copies out of the workers' shared buffers

    def own(self, batch: TensorDictBase) -> TensorDictBase:
        return batch.clone()  # before the worker writes its next batch there

    def close(self) -> None:
        self._finalizer()


class MultiCollector(CollectorDriver):
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
        sync: synchronous (``True``) or asynchronous schedule; ``None``: the class's
            (``True`` for ``MultiCollector`` and ``MultiSyncCollector``).
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

    default_sync = True

    def __init__(
        self,
        create_env_fns: Sequence[Any],
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        sync: bool | None = None,
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
        self._init_driver(
            policy, frames_per_batch, total_frames, num_workers=len(fns),
            sync=self.default_sync if sync is None else sync,
            options=CollectorOptions(**options), update_each_batch=update_at_each_batch,
            timeout=timeout, collector_class=Collector,
        )
        self.update_at_each_batch = update_at_each_batch
        self.filter_warnings = bool(filter_warnings_subprocess)
        self.weight_updater = _shared_updater(self.options.weight_updater, policy)
        worker_opts = {k: v for k, v in options.items() if k not in _MAIN_SIDE}
        if worker_opts.get("init_random_frames"):  # a total, like total_frames: a share each
            worker_opts["init_random_frames"] = -(
                -worker_opts["init_random_frames"] // self.num_workers
            )
        per_worker = frames_per_batch // self.num_workers if self.sync else frames_per_batch
        weights = None
        if self.weight_updater is not None:
            weights = (self.weight_updater.shared, self.weight_updater.sequence)
        specs = [
            HostSpec(fn, policy, per_worker, worker_opts, idx, self.num_workers, weights=weights,
                     num_threads=num_threads, shared=True, filter_warnings=self.filter_warnings)
            for idx, fn in enumerate(fns)
        ]
        transport = PipeTransport(timeout)
        self._start(transport, lambda: transport.start(specs, in_process, start_timeout))

    def state_dict(self) -> dict[str, Any]:
        """Frames collected and every worker's Collector state (``worker{i}``)."""
        states = self._call(range(self.num_workers), "state_dict", [()] * self.num_workers)
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
        workers = range(self.num_workers)
        self._call(workers, "load_state_dict", [(state[f"worker{i}"],) for i in workers])

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

    default_sync = True


class MultiAsyncCollector(MultiCollector):
    """:class:`MultiCollector` with ``sync=False``: the first ready worker batch.

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> with MultiAsyncCollector([partial(GymEnv, "CartPole-v1", num_envs=2)] * 2,
        ...                          frames_per_batch=8, total_frames=8, in_process=True) as c:
        ...     [batch.batch_size for batch in c]
        [torch.Size([2, 4])]
    """

    default_sync = False


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
