"""``CollectorDriver``: the one driver of every collector whose Collectors run elsewhere.

``MultiCollector`` (worker processes), ``RayCollector`` (actors), ``DistributedDataCollector``
(torch.distributed ranks) and ``RPCDataCollector`` (RPC workers) are this driver with a
different :class:`Transport`. The driver owns what they share, written once: the sync and
async schedules, exact ``total_frames``, iteration, the weight version (its
``weight_updater``'s), ``map_fn`` / ``set_seed``, profiling (``WorkersProfilingMixin``) and
the shutdown guard. A transport only moves things: a collect request out, a batch back, a
command and its replies, the newest weights with a request, and its own teardown.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from rl_profiling import Timing, profiled
from tensordict import TensorDictBase

from rl_collectors._base import BaseCollector
from rl_collectors._host import call_name
from rl_collectors._options import CollectorOptions
from rl_collectors._profiling import WorkersProfilingMixin
from rl_collectors.exceptions import CollectorClosedError, CollectorError, WorkerError
from rl_collectors.weight_sync import WeightUpdaterBase

__all__ = ["CollectorDriver", "Transport"]


class Transport(Protocol):
    """How a :class:`CollectorDriver` reaches its hosted collectors (indexed ``0..N-1``).

    Attributes:
        infos: each host's start-up reply (``num_rows``; ``layout`` where batches are
            packed), in host order; read by the driver once the transport has started.
    """

    infos: list[dict[str, Any]]

    def request(self, idx: int, steps: int, weights: tuple[Any, int] | None) -> None:
        """Ask host ``idx`` for a batch of ``steps`` steps; ``weights`` is the driver's
        ``weight_updater.latest()``, sent when the host holds an older version."""

    def receive(self, indices: Sequence[int]) -> tuple[int, TensorDictBase]:
        """The first batch ready among ``indices``: ``(idx, batch)``. The batch may be a
        view the host overwrites after its next request (see :meth:`own`)."""

    def call(self, indices: Sequence[int], name: Any, args: Sequence[tuple]) -> list[Any]:
        """Run command ``name`` with ``args[k]`` on host ``indices[k]``; replies in order.
        A command that raised in a host that keeps serving is a ``WorkerError`` with
        ``alive=True``, raised after every other reply was read."""

    def stack(self, batches: list[TensorDictBase]) -> TensorDictBase:
        """The sync batch made of one batch per host, in host order (a copy)."""

    def own(self, batch: TensorDictBase) -> TensorDictBase:
        """``batch`` as the driver may keep it (a copy of a shared buffer, or itself)."""

    def close(self) -> None:
        """Stop every host and release the transport (bounded); safe to call twice."""


class CollectorDriver(BaseCollector, WorkersProfilingMixin):
    """Schedules, iteration, weights, commands and shutdown over one :class:`Transport`.

    A subclass validates its arguments, calls :meth:`_init_driver`, sets
    ``weight_updater``, builds its transport and hands it to :meth:`_start`.
    """

    kind = "worker"
    timing: Timing
    transport: Transport | None = None
    weight_updater: WeightUpdaterBase | None = None

    def _init_driver(
        self,
        policy: Any,
        frames_per_batch: int,
        total_frames: int,
        *,
        sync: bool,
        num_workers: int,
        options: CollectorOptions,
        update_each_batch: bool,
        timeout: float,
        collector_class: type,
    ) -> None:
        self._closed = True  # until the hosts are up; shutdown() is safe at any point
        self.policy, self.options, self.sync = policy, options, bool(sync)
        self.num_workers, self.collector_class = num_workers, collector_class
        CollectorOptions.check_frames(frames_per_batch, total_frames, num_workers if sync else 1)
        self.frames_per_batch, self.total_frames, self.frames = frames_per_batch, total_frames, 0
        self.update_each_batch, self.timeout = bool(update_each_batch), float(timeout)
        self.timing = Timing(f"{type(self).__name__} main process")
        self._busy: set[int] = set()
        self._profiled: list[int] = []

    def _start(self, transport: Transport, start: Callable[[], None]) -> None:
        """Keep ``transport`` (so that a failing ``start()`` is shut down), start it, then
        check the hosts' replies: one number of rows and one batch layout for all."""
        self.transport = transport
        try:
            start()
            infos = self.rank_info = transport.infos
            layouts = [info.get("layout") for info in infos]
            if any(layout != layouts[0] for layout in layouts):
                raise ValueError(
                    "create_env_fn: every collector must produce the same batch layout (keys, "
                    "shapes, dtypes); got different ones"
                )
            rows = sorted({int(info["num_rows"]) for info in infos})
            if len(rows) != 1:
                raise ValueError(
                    f"create_env_fn: every env must have the same number of sub-envs, got {rows}"
                )
            self.num_rows = rows[0]
            CollectorOptions.check_frames(self.frames_per_batch, self.total_frames,
                                          self.num_rows * (self.num_workers if self.sync else 1))
        except BaseException:
            self.shutdown()
            raise
        self._closed = False

    # -- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorDictBase | None]:
        self._check_open()
        try:
            for batch in self._sync_batches() if self.sync else self._async_batches():
                self.frames += batch.numel()
                yield self.options.deliver(batch)
                if self.update_each_batch and self.weight_updater is not None:
                    self.update_policy_weights_()
        except WorkerError:
            self.shutdown()
            raise

    def _latest(self) -> tuple[Any, int] | None:
        return None if self.weight_updater is None else self.weight_updater.latest()

    def _sync_batches(self) -> Iterator[TensorDictBase]:
        """Every host collects its share; the batch is the transport's stack of them."""
        per_round = self.num_workers * self.num_rows
        while self.total_frames < 0 or self.frames < self.total_frames:
            left = self.remaining_frames()
            steps = self.frames_per_batch // per_round
            steps = steps if left is None else min(steps, left // per_round)
            for idx in range(self.num_workers):
                self.transport.request(idx, steps, self._latest())
            batches: dict[int, TensorDictBase] = {}
            with self.timing.add_time("wait"):
                while len(batches) < self.num_workers:
                    missing = [i for i in range(self.num_workers) if i not in batches]
                    idx, batch = self.transport.receive(missing)
                    batches[idx] = batch
            with self.timing.add_time("copy_out"):
                batch = self.transport.stack([batches[i] for i in range(self.num_workers)])
            yield batch

    def _launch(self, idx: int, steps: int) -> None:
        self.transport.request(idx, steps, self._latest())
        self._busy.add(idx)

    def _async_batches(self) -> Iterator[TensorDictBase]:
        """Hosts collect continuously; each batch is the first one ready, and its host is
        asked for the next at once (unless the batch reaches ``total_frames``)."""
        steps = self.frames_per_batch // self.num_rows
        for idx in range(self.num_workers):
            if idx not in self._busy:
                self._launch(idx, steps)
        while self.total_frames < 0 or self.frames < self.total_frames:
            with self.timing.add_time("wait"):
                idx, batch = self.transport.receive(sorted(self._busy))
            self._busy.discard(idx)
            left = self.remaining_frames()
            last = left is not None and batch.numel() >= left
            with self.timing.add_time("copy_out"):
                batch = self.transport.own(batch[..., : left // self.num_rows] if last else batch)
            if not last:
                self._launch(idx, steps)
            yield batch

    def remaining_frames(self) -> int | None:
        """Frames still to collect, ``None`` for an endless collector."""
        return None if self.total_frames < 0 else self.total_frames - self.frames

    # -- weights and commands ------------------------------------------------------------------
    @property
    def policy_version(self) -> int:
        """The version of the newest weights pushed (``0`` before any push)."""
        return 0 if self.weight_updater is None else self.weight_updater.version

    @profiled("CollectorDriver.update_policy_weights_")
    def update_policy_weights_(self, policy_or_weights: Any = None) -> int:
        """Push new weights; each host loads them before its next batch.

        Args:
            policy_or_weights: an ``nn.Module`` or a TensorDict of weights; ``None`` reads
                the policy given at construction.

        Returns:
            The new policy version (batches collected with it carry it).

        Raises:
            CollectorError: the collectors' policy, or what was given, has no weights.
        """
        self._check_open()
        if self.weight_updater is None:
            raise CollectorError(
                f"update_policy_weights_: the collectors' policy ({type(self.policy).__name__}) "
                "has no weights to update"
            )
        return self.weight_updater.push(policy_or_weights)

    def _call(self, indices: Sequence[int], name: Any, args: Sequence[tuple]) -> list[Any]:
        """A command on the selected hosts; a host that died or hung shuts the collector
        down, one that raised and keeps serving (``err.alive``) leaves it usable."""
        self._check_open()
        try:
            return self.transport.call(list(indices), name, list(args))
        except WorkerError as err:
            if not err.alive:
                self.shutdown()
            raise

    def map_fn(self, name: str | Callable, list_of_args: Sequence[Any]) -> list[Any]:
        """Call a function on every hosted collector; collector ``i`` gets ``list_of_args[i]``.

        Args:
            name: a collector method name (``"set_seed"``), a public function of
                ``rl_profiling`` by its bare name (``"set_profiling_enabled"``), a dotted
                path (``"os.getpid"``) or a picklable callable.
            list_of_args: one entry per collector: a tuple of positional arguments (a
                non-tuple value is passed as the single argument).

        Returns:
            The return values, in collector order.

        Raises:
            ValueError: ``name`` names nothing (checked here: no collector is called).
            WorkerError: the call raised in a collector (with its traceback).
        """
        name = call_name(name, self.collector_class)
        if len(list_of_args) != self.num_workers:
            raise ValueError(
                f"map_fn: list_of_args: expected {self.num_workers} entries (one per "
                f"{self.kind}), got {len(list_of_args)}"
            )
        args = [a if isinstance(a, tuple) else (a,) for a in list_of_args]
        return self._call(range(self.num_workers), name, args)

    def set_seed(self, seed: int, static_seed: bool = False) -> int | None:
        """Seed collector ``i``'s env with the seed returned by collector ``i - 1``; returns
        the last."""
        for i in range(self.num_workers):
            seed = self._call([i], "set_seed", [(seed, static_seed)])[0]
        return seed

    # -- profiling (WorkersProfilingMixin's hooks) -------------------------------------------
    def _worker_count(self) -> int:
        return self.num_workers

    def _worker_call(self, indices: Sequence[int], name: str, args: tuple) -> list[Any]:
        return self._call(indices, name, [args] * len(indices))

    # -- lifecycle ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CollectorClosedError(f"{type(self).__name__}: used after shutdown()")

    def shutdown(self) -> None:
        """Stop every hosted collector and the transport (bounded); idempotent."""
        self._closed = True
        self._busy.clear()
        if self.transport is not None:
            self.transport.close()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.shutdown()
