"""``DistributedDataCollector`` / ``DistributedSyncDataCollector``: torch.distributed collectors.

Wiring (one place):

- The trainer (this process) is rank 0. It hosts a ``TCPStore`` (port ``tcp_port``, or
  a free one), starts ranks ``1..N`` with the launcher (``_launchers.py``), waits until
  each has written its ready key (checking the launcher's liveness meanwhile), then
  joins the process group (``backend``, gloo by default).
- Each rank (``_distributed_worker.py``) receives the spec (env constructor, policy,
  ``collector_class`` and its options) from rank 0, builds its collector and replies with
  its batch layout. A batch travels as one flat byte tensor (``_flat.py``).
- Requests go out from the main thread (``isend``); replies come back through one
  receiver thread per rank (``_distributed_links.py``), so a dead rank is noticed
  whichever rank the trainer waits for.
- Weights: ``update_policy_weights_()`` packs the policy's weights once and bumps the
  version; each rank gets them with its next request, only when its version is older.
- With ``launcher=None`` the process group is yours (torchrun): nothing is started or
  destroyed, and ranks > 0 run ``serve_distributed_collector()``.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
from rl_profiling import Timing, profiling_env
from tensordict import TensorDictBase

from rl_collectors._distributed_base import RemoteCollectorBase
from rl_collectors._distributed_links import RankLinks
from rl_collectors._distributed_worker import (
    KIND_BATCH,
    KIND_READY,
    KIND_REPLY,
    OP_CALL,
    OP_COLLECT,
    OP_SPEC,
    OP_STOP,
    READY_KEY,
    TAG_CMD,
    TAG_CMD_DATA,
    dumps,
    header,
    run_rank,
    send,
)
from rl_collectors._flat import FlatLayout
from rl_collectors._launchers import make_launcher
from rl_collectors._options import RemoteOptions
from rl_collectors.exceptions import WorkerError
from rl_collectors.weight_sync import weights_of

__all__ = ["DistributedDataCollector", "DistributedSyncDataCollector"]

BACKENDS = ("gloo", "nccl", "mpi")


class DistributedDataCollector(RemoteCollectorBase):
    """Collect on ``N`` torch.distributed ranks, one collector each; the trainer is rank 0.

    Each rank hosts ``collector_class(create_env_fn, policy, frames_per_batch=...,
    **collector_kwargs)`` (a :class:`~rl_collectors.Collector` by default; a
    ``MultiCollector`` subclass gets ``num_workers_per_collector`` copies of the env
    constructor) and sends its batches to the trainer with point-to-point calls.

    ``sync=True``: each batch holds ``frames_per_batch`` frames, an equal share from every
    rank, concatenated along the first batch dim (``[N * B0, *B[1:], T]``, rank ``i + 1``'s
    rows at ``i * B0``). ``sync=False`` (default): each batch is one rank's ``[*B, T]``
    batch of ``frames_per_batch`` frames, the first ready; the others keep collecting.
    ``total_frames`` is honoured exactly. Trajectory ids are unique across ranks, and
    batches carry the policy version in ``("collector", "policy_version")``.

    Args:
        create_env_fn: an env constructor (picklable), or one per collector.
        policy: as for ``Collector``, sent to every rank; an ``nn.Module`` with weights
            can be updated with :meth:`update_policy_weights_`.
        frames_per_batch: frames per yielded batch.
        total_frames: frames in total, ``-1`` for an endless iterator.
        sync: synchronous or asynchronous (default) schedule (see above).
        backend: ``"gloo"`` (the one tested) or ``"mpi"`` (needs a torch built with MPI);
            ``"nccl"`` is refused for now: batches travel as CPU tensors.
        options: a :class:`~rl_collectors.RemoteOptions`; every field of it is also
            accepted as a keyword here (``num_collectors=2``, ``launcher="submitit"``,
            ``collector_kwargs=...``, ``timeout=...``, ...), replacing the option's value.

    Raises:
        ValueError: a bad argument (the message names it).
        TypeError: a keyword that is no ``RemoteOptions`` field (the message names it).
        ModuleNotFoundError: ``launcher="submitit"`` without submitit installed.
        WorkerError: a rank failed to start (its rank and error are in the message).

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> collector = DistributedDataCollector(  # doctest: +SKIP
        ...     partial(GymEnv, "CartPole-v1", num_envs=2), None, frames_per_batch=8,
        ...     total_frames=16, num_collectors=2, sync=True)
        >>> [b.batch_size for b in collector]  # doctest: +SKIP
        [torch.Size([4, 2]), torch.Size([4, 2])]
        >>> collector.shutdown()  # doctest: +SKIP
    """

    kind = "rank"

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        sync: bool = False,
        backend: str = "gloo",
        options: RemoteOptions | None = None,
        **keywords: Any,
    ) -> None:
        opts = RemoteOptions.merge(type(self).__name__, options, keywords)
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if backend == "nccl":
            raise ValueError(
                "backend: 'nccl' is not supported yet (batches travel as CPU byte tensors, "
                "which NCCL cannot send); use 'gloo' and move each batch to the GPU on the trainer"
            )
        if opts.launcher == "submitit_delayed" and opts.tcp_port is None:
            raise ValueError(
                "tcp_port: launcher='submitit_delayed' needs the port given to "
                "submitit_delayed_launcher"
            )
        self._setup(create_env_fn, policy, frames_per_batch, total_frames, sync, opts)
        self.backend, self.launcher_name = backend, opts.launcher
        self.timing = Timing("DistributedDataCollector trainer")
        self._store: Any = None
        self._owns_group = False
        self._links: RankLinks | None = None
        self._versions = [0] * self.num_collectors
        self._weights_flat: torch.Tensor | None = None
        try:
            launcher_obj = make_launcher(
                opts.launcher, opts.submitit_executor, opts.submitit_folder, opts.slurm_kwargs
            )
            self._join(launcher_obj, opts.tcp_port, opts.master_addr, opts.start_timeout)
            self._start_ranks(opts.num_threads, opts.start_timeout)
        except BaseException:
            self.shutdown()
            raise

    # -- start-up ----------------------------------------------------------------------------
    def _join(
        self, launcher: Any, tcp_port: int | None, master_addr: str | None, timeout: float
    ) -> None:
        """Host the store, start the ranks, wait for their ready keys, join the group."""
        world = self.num_collectors + 1
        wait = datetime.timedelta(seconds=timeout)
        if self.launcher_name is None:
            if not dist.is_initialized() or dist.get_world_size() != world or dist.get_rank() != 0:
                raise ValueError(
                    f"launcher: None needs an initialised process group of world size {world} "
                    f"(num_collectors + 1) with this process as rank 0"
                )
            return
        if dist.is_initialized():
            raise ValueError(
                "launcher: this process is already in a process group; pass launcher=None to use it"
            )
        addr = master_addr or getattr(launcher, "default_addr", "127.0.0.1")
        self._store = dist.TCPStore(
            "0.0.0.0", tcp_port or 0, world, is_master=True, wait_for_workers=False, timeout=wait
        )
        if launcher is not None:
            args = [
                (addr, self._store.port, r, world, self.backend, self.timeout)
                for r in range(1, world)
            ]
            self.handles = {h.rank: h for h in launcher.launch(run_rank, args)}
        self._wait_ready(timeout)
        dist.init_process_group(self.backend, store=self._store, rank=0, world_size=world,
                                timeout=datetime.timedelta(seconds=self.timeout))
        self._owns_group = True

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        for rank in range(1, self.num_collectors + 1):
            key = READY_KEY.format(rank=rank)
            while not self._store.check([key]):
                handle = getattr(self, "handles", {}).get(rank)
                if handle is not None and not handle.alive():
                    raise WorkerError(
                        rank - 1, f"rank {rank} ended before joining ({handle.describe()})"
                    )
                if time.monotonic() > deadline:
                    raise WorkerError(
                        rank - 1,
                        f"rank {rank} did not join within {timeout} s (processes start "
                        "Python and import torch; raise start_timeout)",
                    )
                time.sleep(0.05)

    def _start_ranks(self, num_threads: int | None, timeout: float) -> None:
        handles = getattr(self, "handles", {})
        alive = (lambda r: handles[r].alive()) if handles else None
        self._links = RankLinks(self.num_collectors, self.timeout, alive, self._describe)
        has_weights = (
            isinstance(self.policy, torch.nn.Module) and weights_of(self.policy) is not None
        )
        self._weights_layout = FlatLayout.of(weights_of(self.policy)) if has_weights else None
        spec = {
            "collector_class": self.collector_class,
            "create_env_fn": None,
            "policy": self.policy,
            "frames_per_batch": self.per_rank,
            "kwargs": self.rank_kwargs,
            "num_threads": num_threads,
            "num_workers_per_collector": self.num_workers_per_collector,
            "num_collectors": self.num_collectors,
            "profiling": bool(profiling_env()),
            "weights_layout": self._weights_layout,
        }
        for rank, fn in enumerate(self.env_fns, start=1):
            data = dumps({**spec, "create_env_fn": fn}, "create_env_fn, policy or collector_kwargs")
            self._request(rank, header(OP_SPEC, data.numel(), 0), data, "start")
        infos = [
            self._links.wait([r], KIND_READY, "start", timeout)[1]
            for r in range(1, self.num_collectors + 1)
        ]
        self._ready(infos)
        self._links.layout = self.layouts[0]

    def _describe(self, rank: int) -> str:
        handle = getattr(self, "handles", {}).get(rank)
        info = self.rank_info[rank - 1] if rank - 1 < len(getattr(self, "rank_info", [])) else {}
        where = f"pid {info['pid']} on {info['host']}" if info else "not started"
        return handle.describe() if handle is not None and not handle.alive() else where

    # -- messages ----------------------------------------------------------------------------
    def _request(self, rank: int, head: torch.Tensor, data: torch.Tensor | None, what: str,
                 weights: torch.Tensor | None = None) -> None:
        """Send one command (and its payload) to ``rank``; its reply is expected."""
        wait = datetime.timedelta(seconds=self.timeout)
        try:
            send(head, rank, TAG_CMD, wait)
            for payload in (weights, data):
                if payload is not None:
                    send(payload, rank, TAG_CMD_DATA, wait)
        except RuntimeError as err:
            raise self._links.lost(rank, what, err) from None
        self._links.expect(rank)

    def _collect_request(self, idx: int, steps: int) -> None:
        version = self.policy_version
        newer = self._weights_flat is not None and self._versions[idx] < version
        self._request(idx + 1, header(OP_COLLECT, steps, version if newer else 0), None, "collect",
                      self._weights_flat if newer else None)
        if newer:
            self._versions[idx] = version

    def _receive_batch(self, indices: Sequence[int]) -> tuple[int, TensorDictBase]:
        rank, batch = self._links.wait([i + 1 for i in indices], KIND_BATCH, "collect")
        return rank - 1, batch

    def _call(self, indices: Sequence[int], name: Any, args: Sequence[tuple]) -> list[Any]:
        for idx, a in zip(indices, args, strict=True):
            data = dumps((name, a))
            self._request(idx + 1, header(OP_CALL, data.numel(), 0), data, str(name))
        return [self._links.wait([i + 1], KIND_REPLY, str(name))[1] for i in indices]

    def _push_weights(self, weights: TensorDictBase) -> None:
        self._weights_flat = self._weights_layout.pack(weights.detach().to("cpu"))

    # -- lifecycle ------------------------------------------------------------------------------
    def _teardown(self) -> None:
        """STOP every rank still there, end the ranks, join the threads, destroy our group."""
        links, self._links = self._links, None
        if links is not None:
            for rank in range(1, self.num_collectors + 1):
                with contextlib.suppress(RuntimeError):  # already gone
                    send(header(OP_STOP, 0, 0), rank, TAG_CMD, datetime.timedelta(seconds=3))
        for handle in getattr(self, "handles", {}).values():
            handle.stop(3.0)
        self.handles = {}
        if links is not None:
            links.close()
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()
        self._owns_group = False
        self._store = None


class DistributedSyncDataCollector(DistributedDataCollector):
    """:class:`DistributedDataCollector` with ``sync=True``: every batch has every rank's share.

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> collector = DistributedSyncDataCollector(  # doctest: +SKIP
        ...     partial(GymEnv, "CartPole-v1", num_envs=2), None, frames_per_batch=8,
        ...     total_frames=8, num_collectors=2)
        >>> next(iter(collector)).batch_size  # doctest: +SKIP
        torch.Size([4, 2])
        >>> collector.shutdown()  # doctest: +SKIP
    """

    def __init__(self, create_env_fn: Any, policy: Any = None, **kwargs: Any) -> None:
        super().__init__(create_env_fn, policy, sync=True, **kwargs)

