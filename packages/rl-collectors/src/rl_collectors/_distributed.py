"""``DistributedDataCollector`` / ``DistributedSyncDataCollector``: torch.distributed collectors.

Wiring (one place):

- The trainer (this process) is rank 0. It hosts a ``TCPStore`` (port ``tcp_port``, or
  a free one), starts ranks ``1..N`` with the launcher (``_launchers.py``), waits until
  each has written its ready key (checking the launcher's liveness meanwhile), then
  joins the process group (``backend``, gloo by default).
- Each rank (``_distributed_worker.py``) receives the spec (env constructor, policy,
  ``collector_class`` and its options) from rank 0, builds its collector and replies with
  its batch layout. A batch travels as one flat byte tensor (``_flat.py``).
- :class:`GlooTransport` is the driver's transport (``_driver.py``): requests go out from
  the main thread (``isend``); replies come back through one receiver thread per rank
  (``_distributed_links.py``), so a dead rank is noticed whichever rank the trainer
  waits for.
- Weights: ``update_policy_weights_()`` packs the policy's weights once
  (:class:`~rl_collectors.weight_sync.LatestWeightsUpdater`, which holds the version);
  each rank gets them with its next request, only when its version is older.
- With ``launcher=None`` the process group is yours (torchrun): nothing is started or
  destroyed, and ranks > 0 run ``serve_distributed_collector()``.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist
from tensordict import TensorDictBase

from rl_collectors._distributed_base import RemoteCollectorBase, concat
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
from rl_collectors._host import HostSpec
from rl_collectors._launchers import launch_ranks, make_launcher
from rl_collectors._options import RemoteOptions
from rl_collectors.weight_sync import LatestWeightsUpdater, weights_of

__all__ = ["DistributedDataCollector", "DistributedSyncDataCollector", "GlooTransport"]

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
        backend: ``"gloo"`` (the one tested) or ``"mpi"`` (needs a torch built with MPI);
            ``"nccl"`` is refused for now: batches travel as CPU tensors.
        **kwargs: ``frames_per_batch``, ``total_frames``, ``sync`` (``False`` by default,
            see above), ``options`` and the ``RemoteOptions`` fields, as for every remote
            collector (:class:`~rl_collectors._distributed_base.RemoteCollectorBase`).

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
        self, create_env_fn: Any, policy: Any = None, *, backend: str = "gloo", **kwargs: Any
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend: expected one of {BACKENDS}, got {backend!r}")
        if backend == "nccl":
            raise ValueError(
                "backend: 'nccl' is not supported yet (batches travel as CPU byte tensors, "
                "which NCCL cannot send); use 'gloo' and move each batch to the GPU on the trainer"
            )
        self.backend = backend
        super().__init__(create_env_fn, policy, **kwargs)

    def _check_options(self, opts: RemoteOptions) -> None:
        if opts.launcher == "submitit_delayed" and opts.tcp_port is None:
            raise ValueError(
                "tcp_port: launcher='submitit_delayed' needs the port given to "
                "submitit_delayed_launcher"
            )
        self.launcher_name = opts.launcher

    def _make_transport(self, opts: RemoteOptions) -> tuple[GlooTransport, Callable[[], None]]:
        layout = FlatLayout.of(weights_of(self.policy)) if self._has_weights else None
        if layout is not None:
            self.weight_updater = LatestWeightsUpdater(self.policy, pack=layout.pack)
        specs = [self.rank_spec(i, weights=layout) for i in range(self.num_workers)]
        transport = GlooTransport(self.num_workers, self.backend, opts)
        return transport, lambda: transport.start(specs, opts)

    @property
    def handles(self) -> dict[int, Any]:
        """The launcher's handles of ranks ``1..N`` (empty after ``shutdown()``)."""
        return self.transport.handles


class GlooTransport:
    """The :class:`~rl_collectors._driver.Transport` over torch.distributed point-to-point
    messages (gloo): the trainer is rank 0, host ``i`` is rank ``i + 1``."""

    def __init__(self, num_ranks: int, backend: str, opts: RemoteOptions) -> None:
        self.num_ranks, self.backend, self.timeout = num_ranks, backend, float(opts.timeout)
        self.launcher_name = opts.launcher
        self.infos: list[dict[str, Any]] = []
        self.handles: dict[int, Any] = {}
        self._store: Any = None
        self._owns_group = False
        self._links: RankLinks | None = None
        self._versions = [0] * num_ranks

    def start(self, specs: list[HostSpec], opts: RemoteOptions) -> None:
        """Start the ranks (or check the group you made), join the group, send the specs."""
        world = self.num_ranks + 1
        if self.launcher_name is None:
            if not dist.is_initialized() or dist.get_world_size() != world or dist.get_rank() != 0:
                raise ValueError(
                    f"launcher: None needs an initialised process group of world size {world} "
                    f"(num_collectors + 1) with this process as rank 0"
                )
        else:
            if dist.is_initialized():
                raise ValueError("launcher: this process is already in a process group; pass "
                                 "launcher=None to use it")
            launcher = make_launcher(
                opts.launcher, opts.submitit_executor, opts.submitit_folder, opts.slurm_kwargs
            )
            self._store, _ = launch_ranks(
                launcher, run_rank, (self.backend, self.timeout), self.num_ranks, self.handles,
                opts, opts.start_timeout, READY_KEY,
            )
            dist.init_process_group(self.backend, store=self._store, rank=0, world_size=world,
                                    timeout=datetime.timedelta(seconds=self.timeout))
            self._owns_group = True
        self._start_ranks(specs, opts.start_timeout)

    def _start_ranks(self, specs: list[HostSpec], timeout: float) -> None:
        handles = self.handles
        alive = (lambda r: handles[r].alive()) if handles else None
        self._links = RankLinks(self.num_ranks, self.timeout, alive, self._describe)
        for rank, spec in enumerate(specs, start=1):
            data = dumps(spec, "create_env_fn, policy or collector_kwargs")
            self._request(rank, header(OP_SPEC, data.numel(), 0), data, "start")
        self.infos = [
            self._links.wait([r], KIND_READY, "start", timeout)[1]
            for r in range(1, self.num_ranks + 1)
        ]
        self._links.layout = self.infos[0]["layout"]

    def _describe(self, rank: int) -> str:
        handle = self.handles.get(rank)
        info = self.infos[rank - 1] if rank - 1 < len(self.infos) else {}
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

    def request(self, idx: int, steps: int, weights: tuple[Any, int] | None) -> None:
        newer = weights is not None and self._versions[idx] < weights[1]
        self._request(idx + 1, header(OP_COLLECT, steps, weights[1] if newer else 0), None,
                      "collect", weights[0] if newer else None)
        if newer:
            self._versions[idx] = weights[1]

    def receive(self, indices: Sequence[int]) -> tuple[int, TensorDictBase]:
        rank, batch = self._links.wait([i + 1 for i in indices], KIND_BATCH, "collect")
        return rank - 1, batch

    def call(self, indices: Sequence[int], name: Any, args: Sequence[tuple]) -> list[Any]:
        for idx, a in zip(indices, args, strict=True):
            data = dumps((name, a))
            self._request(idx + 1, header(OP_CALL, data.numel(), 0), data, str(name))
        return [self._links.wait([i + 1], KIND_REPLY, str(name))[1] for i in indices]

    stack = staticmethod(concat)

    def own(self, batch: TensorDictBase) -> TensorDictBase:
        return batch  # unpacked into its own tensors by the receiver thread

    def close(self) -> None:
        """STOP every rank still there, end the ranks, join the threads, destroy our group."""
        links, self._links = self._links, None
        if links is not None:
            for rank in range(1, self.num_ranks + 1):
                with contextlib.suppress(RuntimeError):  # already gone
                    send(header(OP_STOP, 0, 0), rank, TAG_CMD, datetime.timedelta(seconds=3))
        for handle in self.handles.values():
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

