"""``RemoteCollectorBase``: the arguments the Ray, torch.distributed and RPC collectors share.

Each of them is the :class:`~rl_collectors._driver.CollectorDriver` (schedules, weight
version, ``map_fn`` / ``set_seed``, profiling, shutdown) over its own transport; this base
only reads their common arguments (:class:`~rl_collectors.RemoteOptions`), checks what can
be checked before anything starts, and writes the spec each remote collector is built
from (:meth:`RemoteCollectorBase.rank_spec`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from rl_envs.processes import dumps as portable_dumps
from rl_envs.processes import env_constructors
from rl_profiling import profiling_env
from tensordict import TensorDictBase

from rl_collectors._collector import Collector
from rl_collectors._driver import CollectorDriver, Transport
from rl_collectors._host import HostSpec
from rl_collectors._options import CollectorOptions, RemoteOptions
from rl_collectors.weight_sync import weights_of

__all__ = ["RemoteCollectorBase"]

_TRAINER_SIDE = ("postproc", "replay_buffer", "post_collect_hook", "split_trajs")


def concat(batches: list[TensorDictBase]) -> TensorDictBase:
    """Remote collectors' batches ``[B0, ..., T]`` -> ``[N * B0, ..., T]``; unbatched
    ``[T]`` -> ``[N, T]``."""
    if batches[0].batch_dims > 1:
        return torch.cat(batches, 0)
    return torch.stack(batches, 0)


class RemoteCollectorBase(CollectorDriver):
    """The driver of the collectors whose sub-collectors live on other ranks or actors.

    A subclass adds its own keyword arguments, checks the options
    (``_check_options``) and makes its transport (``_make_transport``).

    Args:
        create_env_fn: an env constructor (picklable), or one per remote collector.
        policy: as for ``Collector``, sent to every remote collector; an ``nn.Module``
            with weights can be updated with :meth:`update_policy_weights_`.
        frames_per_batch: frames per yielded batch.
        total_frames: frames in total, ``-1`` for an endless iterator.
        sync: synchronous or asynchronous schedule (``None``: the class's default).
        options: a :class:`~rl_collectors.RemoteOptions`; every field of it is also
            accepted as a keyword here (``num_collectors=2``, ``collector_kwargs=...``,
            ``timeout=...``, ...), replacing the option's value.
    """

    default_sync = False

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        sync: bool | None = None,
        options: RemoteOptions | None = None,
        **keywords: Any,
    ) -> None:
        opts = RemoteOptions.merge(type(self).__name__, options, keywords)
        sync = self.default_sync if sync is None else sync
        self._setup(create_env_fn, policy, frames_per_batch, total_frames, sync, opts)
        self._check_options(opts)  # after the arguments' own checks: a bad one is named first
        self._start(*self._make_transport(opts))

    def _check_options(self, opts: RemoteOptions) -> None:
        """Refuse what this collector cannot do, before anything starts."""

    def _make_transport(self, opts: RemoteOptions) -> tuple[Transport, Callable[[], None]]:
        """Set ``weight_updater``; return the transport and what starts it."""
        raise NotImplementedError

    def _setup(
        self, create_env_fn: Any, policy: Any, frames_per_batch: int, total_frames: int,
        sync: bool, opts: RemoteOptions,
    ) -> None:
        self.remote_options = opts
        self.env_fns = self._env_fns(create_env_fn, opts.num_collectors)
        kwargs = dict(opts.collector_kwargs or {})
        if kwargs.get("weight_updater") is not None:
            raise ValueError(
                "collector_kwargs: weight_updater: the remote collectors push the trainer's "
                "weights themselves (update_policy_weights_() sends them once per version; each "
                "remote collector loads them with its next request); RayCollector takes a "
                "RayWeightUpdater as its own weight_updater= argument"
            )
        collector_class = opts.collector_class or Collector
        if issubclass(collector_class, Collector):
            CollectorOptions(**kwargs)  # validate the ranks' options here, before starting anything
        self._init_driver(
            policy, frames_per_batch, total_frames, sync=sync, num_workers=len(self.env_fns),
            options=CollectorOptions(**{k: kwargs[k] for k in _TRAINER_SIDE if k in kwargs}),
            update_each_batch=opts.update_after_each_batch, timeout=opts.timeout,
            collector_class=collector_class,
        )
        self.per_rank = frames_per_batch // self.num_workers if self.sync else frames_per_batch
        self.rank_kwargs = {k: v for k, v in kwargs.items() if k not in _TRAINER_SIDE}
        # what cannot reach a rank at all (a lock, an open file) is named before any rank starts
        portable_dumps(
            (self.env_fns, policy, self.rank_kwargs), "create_env_fn, policy or collector_kwargs"
        )
        self._has_weights = isinstance(policy, torch.nn.Module) and weights_of(policy) is not None

    @property
    def num_collectors(self) -> int:
        """The number of remote collectors (ranks, RPC workers or actors)."""
        return self.num_workers

    def rank_spec(self, idx: int, **fields: Any) -> HostSpec:
        """What remote collector ``idx`` is built from; ``fields`` replace the defaults."""
        opts = self.remote_options
        spec = HostSpec(
            self.env_fns[idx], self.policy, self.per_rank, self.rank_kwargs, idx,
            self.num_workers, collector_class=self.collector_class,
            num_workers_per_collector=opts.num_workers_per_collector,
            num_threads=opts.num_threads, profiling=bool(profiling_env()),
        )
        return dataclasses.replace(spec, **fields)

    @staticmethod
    def _env_fns(create_env_fn: Any, num_collectors: int | None) -> list[Any]:
        """One env constructor per remote collector; ``num_collectors`` defaults to the
        length of the list given, else 1."""
        if num_collectors is None:
            listed = isinstance(create_env_fn, (list, tuple))
            num_collectors = (len(create_env_fn) or 1) if listed else 1
        return env_constructors(create_env_fn, num_collectors, "num_collectors")

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(num_collectors={self.num_collectors}, sync={self.sync}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"frames={self.frames})"
        )
