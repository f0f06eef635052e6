"""``RPCDataCollector``: the distributed collector over ``torch.distributed.rpc`` (TensorPipe).

Wiring (one place):

- The trainer is RPC worker ``"trainer"`` (rank 0) and hosts the rendezvous store; the
  launcher (``_launchers.py``) starts ``"collector{rank}"`` for ranks ``1..N``
  (:func:`run_rpc_rank`). Each writes its ready key in the store, joins RPC, and waits
  for calls until the trainer calls ``_rpc_stop`` or its store goes away.
- Calls: ``_rpc_build(spec_bytes)`` loads the spec (``rl_envs.processes``) and
  builds the rank's collector (a
  :class:`~rl_collectors._distributed_worker.PackedHostRuntime`, the same as the
  torch.distributed collector's); ``_rpc_collect(steps, weights, version)`` loads newer
  weights when given and returns the batch as one flat byte tensor; ``_rpc_call`` serves
  ``map_fn``, profiling and timings.
- Each call is a ``rpc_async`` future with the collector's timeout; a done-callback puts
  the index in a queue, and the trainer waits on that queue in short slices, checking
  the launcher's liveness between them.
"""

from __future__ import annotations

import contextlib
import datetime
import queue
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from rl_envs.processes import dumps as portable_dumps
from rl_envs.processes import loads as portable_loads
from tensordict import TensorDictBase

from rl_collectors._distributed_base import RemoteCollectorBase, concat
from rl_collectors._distributed_worker import READY_KEY, PackedHostRuntime
from rl_collectors._host import HostSpec
from rl_collectors._launchers import launch_ranks, make_launcher
from rl_collectors._options import RemoteOptions
from rl_collectors.exceptions import CollectorError, WorkerError
from rl_collectors.weight_sync import LatestWeightsUpdater

__all__ = ["RPCDataCollector", "RPCTransport", "run_rpc_rank"]

_STATE: dict[str, Any] = {}
_STOP = threading.Event()
_SLICE = 0.1


# -- the collector ranks' side ---------------------------------------------------------------------
def _rpc_build(data: bytes) -> dict[str, Any]:
    """Load the spec (by reference or by value, see ``rl_envs.processes``) and build the
    collector."""
    try:  # a start-up error goes back as this worker's traceback, as from the other components
        spec = portable_loads(data, "the collector spec (create_env_fn, policy, collector_kwargs)")
        _STATE["runtime"] = runtime = PackedHostRuntime(spec)
    except Exception:
        return {"error": traceback.format_exc()}
    return runtime.info()


def _rpc_collect(steps: int, weights: TensorDictBase | None, version: int) -> torch.Tensor:
    runtime = _STATE["runtime"]
    if weights is not None:
        runtime.load_weights(weights, version)
    return runtime.collect(steps)


def _rpc_call(name: Any, args: tuple) -> Any:
    return _STATE["runtime"].call(name, args)


def _rpc_stop() -> None:
    _STOP.set()


ONCE_PER_PROCESS = (
    "RPCDataCollector: torch.distributed.rpc cannot be initialised twice in one process "
    "(pytorch/pytorch#46491: the second group waits forever for workers whose store keys and "
    "all-gather counters start from 0 again); build one RPCDataCollector per process (a new "
    "kernel, a subprocess), or use DistributedDataCollector, which can be rebuilt"
)


def _init_rpc(name: str, rank: int, world_size: int, addr: str, port: int, timeout: float) -> None:
    """``rpc.init_rpc`` over TensorPipe, without torch's own internal deprecation warning."""
    from torch.distributed import rpc

    if _STATE.get("initialised"):
        raise CollectorError(ONCE_PER_PROCESS)
    _STATE["initialised"] = True
    with (
        warnings.catch_warnings()
    ):  # torch's RPC start-up trips its own "Backend as a ProcessGroup" warning
        warnings.filterwarnings("ignore", message=".*as a ProcessGroup.*")
        rpc.init_rpc(
            name,
            rank=rank,
            world_size=world_size,
            rpc_backend_options=_options(addr, port, timeout),
        )


def _options(addr: str, port: int, timeout: float) -> Any:
    from torch.distributed import rpc

    return rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://{addr}:{port}", rpc_timeout=timeout,
                                           num_worker_threads=4)


def run_rpc_rank(addr: str, port: int, rank: int, world_size: int, timeout: float = 300.0) -> None:
    """Launcher target: join the trainer's RPC group as ``collector{rank}`` and serve calls."""
    from torch.distributed import rpc

    store = dist.TCPStore(
        addr, port, world_size, is_master=False, timeout=datetime.timedelta(seconds=timeout)
    )
    store.set(READY_KEY.format(rank=rank), str(rank))
    _init_rpc(f"collector{rank}", rank, world_size, addr, port, timeout)
    try:
        while not _STOP.wait(0.5):
            try:
                store.check([READY_KEY.format(rank=rank)])  # raises once the trainer is gone
            except Exception:
                return
    finally:
        runtime = _STATE.pop("runtime", None)
        if runtime is not None:
            runtime.close()
        rpc.shutdown(graceful=False)


# -- the trainer's side ---------------------------------------------------------------------------
class RPCDataCollector(RemoteCollectorBase):
    """Collect on ``N`` ``torch.distributed.rpc`` workers, one collector each.

    The same contract as :class:`~rl_collectors.DistributedDataCollector` (batch layout,
    sync and async schedules, exact ``total_frames``, unique trajectory ids, weight
    versions, profiling, failures named by rank), over RPC calls instead of
    point-to-point tensors: the trainer calls each worker's collector and gets the batch
    back as the call's result. Newer weights travel with the next call to each worker.

    Args:
        create_env_fn: an env constructor (picklable), or one per collector.
        policy: as for ``Collector``, sent to every worker.
        frames_per_batch: frames per yielded batch.
        total_frames: frames in total, ``-1`` for an endless iterator.
        sync: synchronous or asynchronous (default) schedule.
        options: a :class:`~rl_collectors.RemoteOptions` (``launcher``: ``"mp"`` or
            ``"submitit"``); every field of it is also accepted as a keyword here
            (``num_collectors=2``, ``collector_kwargs=...``, ``timeout=...``, ...),
            replacing the option's value.

    Raises:
        ValueError: a bad argument (the message names it).
        TypeError: a keyword that is no ``RemoteOptions`` field (the message names it).
        WorkerError: a worker failed to start (its rank and error are in the message).
        CollectorError: an ``RPCDataCollector`` was already built in this process: torch's
            RPC cannot be initialised twice in one process (pytorch/pytorch#46491), and
            the second group would wait forever.

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> collector = RPCDataCollector(  # doctest: +SKIP
        ...     partial(GymEnv, "CartPole-v1", num_envs=2), None, frames_per_batch=8,
        ...     total_frames=16, num_collectors=2, sync=True)
        >>> [b.batch_size for b in collector]  # doctest: +SKIP
        [torch.Size([4, 2]), torch.Size([4, 2])]
        >>> collector.shutdown()  # doctest: +SKIP
    """

    kind = "RPC worker"

    def _check_options(self, opts: RemoteOptions) -> None:
        if opts.launcher not in ("mp", "submitit"):
            raise ValueError(
                f"launcher: expected 'mp' or 'submitit' for RPCDataCollector, got {opts.launcher!r}"
            )
        if _STATE.get("initialised"):  # before any worker starts
            raise CollectorError(ONCE_PER_PROCESS)

    def _make_transport(self, opts: RemoteOptions) -> tuple[RPCTransport, Callable[[], None]]:
        if self._has_weights:
            self.weight_updater = LatestWeightsUpdater(self.policy)
        specs = [self.rank_spec(i) for i in range(self.num_workers)]
        transport = RPCTransport(self.num_workers, self.timeout)
        return transport, lambda: transport.start(specs, opts)


class RPCTransport:
    """The :class:`~rl_collectors._driver.Transport` over ``torch.distributed.rpc`` calls:
    the trainer is RPC worker ``"trainer"``, host ``i`` is ``"collector{i + 1}"``."""

    def __init__(self, num_workers: int, timeout: float) -> None:
        self.num_workers, self.timeout = num_workers, timeout
        self.infos: list[dict[str, Any]] = []
        self._store: Any = None
        self._rpc_up = False
        self.handles: dict[int, Any] = {}
        self._futures: dict[int, tuple[Any, int]] = {}
        self._done: queue.Queue = queue.Queue()
        self._versions = [0] * num_workers

    def start(self, specs: list[HostSpec], opts: RemoteOptions) -> None:
        launcher = make_launcher(
            opts.launcher, opts.submitit_executor, opts.submitit_folder, opts.slurm_kwargs
        )
        # multi_tenant: init_rpc's own store on this port reuses this server
        self._store, addr = launch_ranks(
            launcher, run_rpc_rank, (self.timeout,), self.num_workers, self.handles, opts,
            opts.start_timeout, READY_KEY, name="RPC worker", multi_tenant=True,
        )
        _init_rpc("trainer", 0, self.num_workers + 1, addr, self._store.port, self.timeout)
        self._rpc_up = True
        for idx, spec in enumerate(specs):
            data = portable_dumps(spec, "create_env_fn, policy or collector_kwargs")
            self._submit(idx, _rpc_build, (data,), 0, opts.start_timeout)
        infos = [self._wait([i], "start", opts.start_timeout)[1] for i in range(self.num_workers)]
        for i, info in enumerate(infos):
            if "error" in info:
                raise WorkerError(
                    i, f"RPC worker {i + 1} (rank {i + 1}) failed to start", info["error"]
                )
        self.infos = infos

    # -- futures -------------------------------------------------------------------------------
    def _submit(
        self, idx: int, fn: Any, args: tuple, tag: int, timeout: float | None = None
    ) -> None:
        from torch.distributed import rpc

        fut = rpc.rpc_async(f"collector{idx + 1}", fn, args=args, timeout=timeout or self.timeout)
        self._futures[idx] = (fut, tag)
        fut.add_done_callback(lambda _, i=idx: self._done.put(i))

    def _check_alive(self, indices: Sequence[int], what: str) -> None:
        for idx in indices:
            handle = self.handles.get(idx + 1)
            if handle is not None and not handle.alive():
                raise WorkerError(
                    idx,
                    f"RPC worker {idx + 1} (rank {idx + 1}) died ({handle.describe()}) "
                    f"during {what!r}",
                )

    def _wait(
        self, indices: Sequence[int], what: str, timeout: float | None = None
    ) -> tuple[int, Any, int]:
        """The first finished call among ``indices``: ``(idx, result, tag)``; failures are
        ``WorkerError``."""
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            for idx in indices:
                fut, tag = self._futures.get(idx, (None, 0))
                if fut is not None and fut.done():
                    del self._futures[idx]
                    try:
                        return idx, fut.wait(), tag
                    except Exception as err:
                        self._check_alive([idx], what)
                        raise WorkerError(
                            idx,
                            f"RPC worker {idx + 1} (rank {idx + 1}) failed during {what!r}",
                            str(err),
                        ) from None
            try:
                self._done.get(timeout=_SLICE)
            except queue.Empty:
                self._check_alive(indices, what)
                if time.monotonic() > deadline:
                    raise WorkerError(
                        indices[0],
                        f"no reply to {what!r} within {timeout} s from RPC worker(s) "
                        f"{[i + 1 for i in indices]}",
                    ) from None

    # -- the Transport interface ----------------------------------------------------------
    def request(self, idx: int, steps: int, weights: tuple[Any, int] | None) -> None:
        newer = weights is not None and self._versions[idx] < weights[1]
        sent = (weights[0], weights[1]) if newer else (None, 0)
        self._submit(idx, _rpc_collect, (steps, *sent), steps)
        if newer:
            self._versions[idx] = weights[1]

    def receive(self, indices: Sequence[int]) -> tuple[int, TensorDictBase]:
        idx, flat, steps = self._wait(indices, "collect")
        layout = self.infos[0]["layout"]
        layout = layout if steps == layout.steps else layout.with_steps(steps)
        return idx, layout.unpack(flat)

    def call(self, indices: Sequence[int], name: Any, args: Sequence[tuple]) -> list[Any]:
        for idx, a in zip(indices, args, strict=True):
            self._submit(idx, _rpc_call, (name, a), 0)
        return [self._wait([i], str(name))[1] for i in indices]

    stack = staticmethod(concat)

    def own(self, batch: TensorDictBase) -> TensorDictBase:
        return batch  # unpacked from the call's own result

    def close(self) -> None:
        from torch.distributed import rpc

        if self._rpc_up:
            stops = []
            for idx in range(self.num_workers):
                handle = self.handles.get(idx + 1)
                if handle is None or handle.alive():
                    stops.append(rpc.rpc_async(f"collector{idx + 1}", _rpc_stop, timeout=3.0))
            for fut in stops:  # a dead or busy worker: the launcher ends it below
                with contextlib.suppress(Exception):
                    fut.wait()
            self._rpc_up = False
            rpc.shutdown(graceful=False)
        for handle in self.handles.values():
            handle.stop(3.0)
        self.handles = {}
        self._futures.clear()
        self._store = None
