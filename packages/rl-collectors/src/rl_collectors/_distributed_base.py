"""``RemoteCollectorBase``: what the Ray, torch.distributed and RPC collectors share.

Argument checks, the sync and async schedules, exact ``total_frames``, weight versions,
``map_fn`` / ``set_seed`` / profiling (``WorkersProfilingMixin``) and the shutdown guard. A
subclass supplies the transport in five hooks: ``_collect_request(idx, steps)``,
``_receive_batch(indices) -> (idx, batch)``, ``_call(indices, name, args) -> replies``,
``_push_weights(weights)`` and ``_teardown()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from rl_envs.processes import dumps as portable_dumps
from rl_profiling import Timing
from tensordict import TensorDictBase

from rl_collectors._base import BaseCollector
from rl_collectors._collector import Collector
from rl_collectors._options import CollectorOptions, RemoteOptions
from rl_collectors._profiling import WorkersProfilingMixin
from rl_collectors._worker import call_name
from rl_collectors.exceptions import CollectorClosedError, CollectorError, WorkerError
from rl_collectors.weight_sync import weights_of

__all__ = ["RemoteCollectorBase"]

_TRAINER_SIDE = ("postproc", "replay_buffer", "post_collect_hook", "split_trajs")


def _concat(batches: list[TensorDictBase]) -> TensorDictBase:
    """Remote collectors' batches ``[B0, ..., T]`` -> ``[N * B0, ..., T]``; unbatched
    ``[T]`` -> ``[N, T]``."""
    if batches[0].batch_dims > 1:
        return torch.cat(batches, 0)
    return torch.stack(batches, 0)


class RemoteCollectorBase(BaseCollector, WorkersProfilingMixin):
    """Shared schedule and commands of the collectors whose sub-collectors live elsewhere."""

    kind = "worker"
    timing: Timing

    def _setup(
        self,
        create_env_fn: Any,
        policy: Any,
        frames_per_batch: int,
        total_frames: int,
        sync: bool,
        opts: RemoteOptions,
    ) -> None:
        self._closed = True  # until the ranks are up; shutdown() is safe at any point
        self.remote_options = opts
        self.env_fns = self._env_fns(create_env_fn, opts.num_collectors)
        self.num_collectors, self.sync = len(self.env_fns), bool(sync)
        kwargs = dict(opts.collector_kwargs or {})
        if kwargs.get("weight_updater") is not None:
            raise ValueError(
                "collector_kwargs: weight_updater: the remote collectors push the trainer's "
                "weights themselves (update_policy_weights_() sends them once per version; each "
                "remote collector loads them with its next request); RayCollector takes a "
                "RayWeightUpdater as its own weight_updater= argument"
            )
        self.options = CollectorOptions(**{k: kwargs[k] for k in _TRAINER_SIDE if k in kwargs})
        collector_class = opts.collector_class or Collector
        if issubclass(collector_class, Collector):
            CollectorOptions(**kwargs)  # validate the ranks' options here, before starting anything
        CollectorOptions.check_frames(
            frames_per_batch, total_frames, self.num_collectors if self.sync else 1
        )
        self.frames_per_batch, self.total_frames = frames_per_batch, total_frames
        self.per_rank = frames_per_batch // self.num_collectors if self.sync else frames_per_batch
        self.collector_class, self.num_workers_per_collector = (
            collector_class,
            opts.num_workers_per_collector,
        )
        self.rank_kwargs = {k: v for k, v in kwargs.items() if k not in _TRAINER_SIDE}
        # what cannot reach a rank at all (a lock, an open file) is named before any rank starts
        portable_dumps(
            (self.env_fns, policy, self.rank_kwargs), "create_env_fn, policy or collector_kwargs"
        )
        self.update_after_each_batch, self.timeout = (
            bool(opts.update_after_each_batch),
            float(opts.timeout),
        )
        self.policy, self.frames, self.policy_version = policy, 0, 0
        self._has_weights = isinstance(policy, torch.nn.Module) and weights_of(policy) is not None
        self._busy: set[int] = set()
        self._profiled: list[int] = []
        self._closed = False

    @staticmethod
    def _env_fns(create_env_fn: Any, num_collectors: int | None) -> list[Any]:
        if not isinstance(create_env_fn, Sequence):
            if not callable(create_env_fn):
                raise TypeError(
                    "create_env_fn: expected a callable or a list of callables, "
                    f"got {create_env_fn!r}"
                )
            return [create_env_fn] * (num_collectors or 1)
        fns = list(create_env_fn)
        if not fns or (num_collectors is not None and len(fns) != num_collectors):
            raise ValueError(
                "create_env_fn: expected a non-empty list of length "
                f"num_collectors={num_collectors}, "
                f"got {len(fns)} constructors"
            )
        return fns

    def _ready(self, infos: list[dict[str, Any]]) -> None:
        """Record the collectors' start-up replies (``num_rows``, and ``layout`` where the
        transport needs one); check they all produce the same layout and number of rows."""
        self.rank_info = infos
        self.layouts = [info.get("layout") for info in infos]
        if any(layout != self.layouts[0] for layout in self.layouts):
            raise ValueError(
                "create_env_fn: every collector must produce the same batch layout (keys, shapes, "
                "dtypes); got different ones"
            )
        rows = sorted({int(info["num_rows"]) for info in infos})
        if len(rows) != 1:
            raise ValueError(
                f"create_env_fn: every env must have the same number of sub-envs, got {rows}"
            )
        self.num_rows = rows[0]
        CollectorOptions.check_frames(self.frames_per_batch, self.total_frames,
                                      self.num_rows * (self.num_collectors if self.sync else 1))

    # -- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorDictBase | None]:
        self._check_open()
        try:
            for batch in self._sync_batches() if self.sync else self._async_batches():
                self.frames += batch.numel()
                yield self.options.deliver(batch)
                if self.update_after_each_batch and self._has_weights:
                    self.update_policy_weights_()
        except WorkerError:
            self.shutdown()
            raise

    def _sync_batches(self) -> Iterator[TensorDictBase]:
        per_round = self.num_collectors * self.num_rows
        while self.total_frames < 0 or self.frames < self.total_frames:
            left = self.remaining_frames()
            steps = self.frames_per_batch // per_round
            steps = steps if left is None else min(steps, left // per_round)
            for idx in range(self.num_collectors):
                self._collect_request(idx, steps)
            batches: dict[int, TensorDictBase] = {}
            with self.timing.add_time("wait"):
                while len(batches) < self.num_collectors:
                    idx, batch = self._receive_batch(
                        [i for i in range(self.num_collectors) if i not in batches]
                    )
                    batches[idx] = batch
            with self.timing.add_time("concat"):
                batch = _concat([batches[i] for i in range(self.num_collectors)])
            yield batch

    def _launch(self, idx: int, steps: int) -> None:
        self._collect_request(idx, steps)
        self._busy.add(idx)

    def _async_batches(self) -> Iterator[TensorDictBase]:
        steps = self.frames_per_batch // self.num_rows
        for idx in range(self.num_collectors):
            if idx not in self._busy:
                self._launch(idx, steps)
        while self.total_frames < 0 or self.frames < self.total_frames:
            with self.timing.add_time("wait"):
                idx, batch = self._receive_batch(sorted(self._busy))
            self._busy.discard(idx)
            left = self.remaining_frames()
            if left is not None and batch.numel() >= left:
                batch = batch[..., : left // self.num_rows]
            else:
                self._launch(idx, steps)
            yield batch

    def remaining_frames(self) -> int | None:
        """Frames still to collect, ``None`` for an endless collector."""
        return None if self.total_frames < 0 else self.total_frames - self.frames

    # -- weights and commands -------------------------------------------------------------------
    def update_policy_weights_(self, policy_or_weights: Any = None) -> int:
        """Pack new weights once; each collector loads them with its next batch request.

        Args:
            policy_or_weights: an ``nn.Module`` or a TensorDict of weights; ``None`` reads
                the policy given at construction.

        Returns:
            The new policy version (batches collected with it carry it).

        Raises:
            CollectorError: the collectors' policy, or what was given, has no weights.
        """
        self._check_open()
        if not self._has_weights:
            raise CollectorError(
                f"update_policy_weights_: the collectors' policy ({type(self.policy).__name__}) "
                "has no weights to update"
            )
        source = policy_or_weights if policy_or_weights is not None else self.policy
        weights = (
            weights_of(source) if isinstance(source, (torch.nn.Module, TensorDictBase)) else None
        )
        if weights is None:
            raise CollectorError(
                f"update_policy_weights_: {type(source).__name__} has no weights to send"
            )
        self._push_weights(weights)
        self.policy_version += 1
        return self.policy_version

    def _guarded_call(self, indices: Sequence[int], name: Any, args: Sequence[tuple]) -> list[Any]:
        self._check_open()
        try:
            return self._call(list(indices), name, list(args))
        except WorkerError:
            self.shutdown()
            raise

    def map_fn(self, name: str | Callable, list_of_args: Sequence[Any]) -> list[Any]:
        """Call a function on every collector; collector ``i`` gets ``list_of_args[i]``.

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
        """
        name = call_name(name, self.collector_class)
        if len(list_of_args) != self.num_collectors:
            raise ValueError(
                f"map_fn: list_of_args: expected {self.num_collectors} entries "
                "(one per collector), "
                f"got {len(list_of_args)}"
            )
        args = [a if isinstance(a, tuple) else (a,) for a in list_of_args]
        return self._guarded_call(range(self.num_collectors), name, args)

    def set_seed(self, seed: int, static_seed: bool = False) -> int | None:
        """Seed collector ``i``'s env with the seed returned by collector ``i - 1``; returns
        the last."""
        for i in range(self.num_collectors):
            seed = self._guarded_call([i], "set_seed", [(seed, static_seed)])[0]
        return seed

    # -- profiling (WorkersProfilingMixin's hooks) -------------------------------------------
    def _worker_count(self) -> int:
        return self.num_collectors

    def _worker_call(self, indices: Sequence[int], name: str, args: tuple) -> list[Any]:
        return self._guarded_call(indices, name, [args] * len(indices))

    # -- lifecycle ------------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CollectorClosedError(f"{type(self).__name__}: used after shutdown()")

    def shutdown(self) -> None:
        """Stop every collector and tear the transport down (bounded); idempotent."""
        self._closed = True
        self._busy.clear()
        self._teardown()

    def __del__(self) -> None:
        if not getattr(self, "_closed", True):
            self.shutdown()


    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_collectors={self.num_collectors}, sync={self.sync}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"frames={self.frames})"
        )

    # -- transport hooks ----------------------------------------------------------------------
    def _collect_request(self, idx: int, steps: int) -> None:
        raise NotImplementedError

    def _receive_batch(self, indices: Sequence[int]) -> tuple[int, TensorDictBase]:
        raise NotImplementedError

    def _call(self, indices: list[int], name: Any, args: list[tuple]) -> list[Any]:
        raise NotImplementedError

    def _push_weights(self, weights: TensorDictBase) -> None:
        raise NotImplementedError

    def _teardown(self) -> None:
        raise NotImplementedError
