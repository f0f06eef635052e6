"""``RayCollector``: one Ray actor per sub-collector, on one machine or a Ray cluster.

Wiring (one place):

- ``CollectorActor`` (in each actor): builds ``collector_class(create_env_fn, policy,
  ...)`` (a :class:`~rl_collectors.Collector` by default), gives it the actor's index for
  trajectory ids (``k * num_actors + idx``, as the multi-process workers do) and
  profiling, and answers ``collect(steps, latest_weights)``: pull newer weights from the
  object store, collect ``steps`` steps, return the batch (Ray serialises it once).
- ``RayCollector`` (driver): starts Ray when it is not running, starts the actors with
  their resources (``remote_config``) and ``RL_PROFILING`` in their ``runtime_env``,
  then schedules ``collect`` calls: sync (one call per actor, results concatenated) or
  async (each actor is re-launched as soon as its batch is taken). The schedules, weight
  versions, ``map_fn`` / ``set_seed``, profiling and the shutdown guard are
  :class:`~rl_collectors._distributed_base.RemoteCollectorBase`'s; this module supplies
  its transport hooks over Ray calls. Every wait is a ``ray.wait`` / ``ray.get`` with a
  timeout; a failed call becomes a ``WorkerError`` naming the actor, and every actor is
  killed.
- Weights: :class:`~rl_collectors._ray_weight_sync.RayWeightUpdater` (one ``ray.put``
  per update, actors pull by version).

Ray is imported lazily (the ``[ray]`` extra); see ``docs/distributed.md``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import weakref
from collections.abc import Sequence
from typing import Any

from rl_profiling import Timing, profiling_env
from tensordict import TensorDictBase

from rl_collectors._distributed_base import RemoteCollectorBase
from rl_collectors._options import RemoteOptions
from rl_collectors._ray_actor import CollectorActor
from rl_collectors._ray_weight_sync import RayWeightUpdater, import_ray
from rl_collectors.exceptions import WorkerError

__all__ = ["CollectorActor", "RayCollector", "RayWeightUpdater"]

logger = logging.getLogger(__name__)

DEFAULT_REMOTE_CONFIG = {"num_cpus": 1}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_START_HINT = (
    " (actors start a Python process and import torch; under `uv run`, Ray may rebuild the "
    "environment for them: set RAY_ENABLE_UV_RUN_RUNTIME_ENV=0, see docs/distributed.md)"
)
# CollectorActor methods; the rest: map_fn
_ACTOR_COMMANDS = ("enable_profile", "disable_profile", "timing")


def _release(ray: Any, actors: list[Any], started_ray: list[bool]) -> None:
    """Finalizer: kill our actors, then stop Ray if we started it; safe to call twice.

    Once Ray is down (``ray.shutdown()`` before the collector's), nothing is called on
    it: ``ray.kill`` would start a new local instance (Ray initialises itself on use),
    and the actors ended with the driver's session anyway.
    """
    if not ray.is_initialized():
        actors.clear()
    while actors:
        with contextlib.suppress(Exception):  # Ray already down, or the actor already dead
            ray.kill(actors.pop(), no_restart=True)
    if started_ray and started_ray.pop() and ray.is_initialized():
        ray.shutdown()


class RayCollector(RemoteCollectorBase):
    """Collect with one :class:`~rl_collectors.Collector` per Ray actor, on a Ray cluster.

    Ray is started with ``ray.init(**ray_init_config)`` only if it is not running (a
    local instance by default; ``{"address": "auto"}`` or ``{"address": "HEAD:6379"}``
    joins a cluster). Each actor hosts ``collector_class(create_env_fn, policy,
    frames_per_batch=..., **collector_kwargs)`` and gets the resources of
    ``remote_config``.

    ``sync=True``: each batch holds ``frames_per_batch`` frames, an equal share from
    every actor, concatenated along the first batch dim: ``[W * B0, *B[1:], T]`` for
    ``W`` actors whose env has batch size ``B`` (rows ``i * B0 .. (i + 1) * B0 - 1``
    come from actor ``i``); an unbatched env gives ``[W, T]``. ``sync=False``: each
    batch is one actor's ``[*B, T]`` batch of ``frames_per_batch`` frames, the first
    ready; actors keep collecting meanwhile. ``total_frames`` is honoured exactly (the
    last batch is shorter). Trajectory ids are unique across actors.

    Args:
        create_env_fn: an env constructor (a picklable callable), or one per actor.
        policy: as for ``Collector`` (pickled to each actor); an ``nn.Module`` with
            weights gets a :class:`RayWeightUpdater`.
        frames_per_batch: frames per yielded batch.
        total_frames: frames in total, ``-1`` for an endless iterator.
        sync: synchronous (``True``, default) or asynchronous schedule.
        ray_init_config: keyword arguments of ``ray.init`` when Ray is not running.
        remote_config: actor options (``num_cpus``, ``num_gpus``, ``memory``,
            ``resources``, ``runtime_env``, ...), one dict for all actors or one per
            actor; default ``{"num_cpus": 1}``.
        weight_updater: a :class:`RayWeightUpdater` (built with or without its source,
            TorchRL's ``RayWeightUpdater()``; this collector binds its policy); default:
            one made here when the policy has weights.
        options: a :class:`~rl_collectors.RemoteOptions`; every field of it is also
            accepted as a keyword here (``num_collectors=2``, ``collector_kwargs=...``,
            ``timeout=...``, ...), replacing the option's value. The launch fields
            (``launcher``, ``tcp_port``, ``num_threads``, ...) must keep their defaults:
            Ray starts the actors.

    Raises:
        ModuleNotFoundError: Ray is not installed (``pip install rl-collectors[ray]``).
        ValueError: a bad argument (the message names it).
        TypeError: a keyword that is no ``RemoteOptions`` field (the message names it).
        WorkerError: an actor failed to start (its index and error are in the message).

    Examples:
        >>> from functools import partial
        >>> from rl_envs import GymEnv
        >>> make_env = partial(GymEnv, "CartPole-v1", num_envs=2)
        >>> collector = RayCollector(make_env, None, frames_per_batch=8,  # doctest: +SKIP
        ...                          total_frames=16, num_collectors=2)
        >>> [batch.batch_size for batch in collector]  # doctest: +SKIP
        [torch.Size([4, 2]), torch.Size([4, 2])]
        >>> collector.shutdown()  # doctest: +SKIP
    """


    kind = "actor"

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        sync: bool = True,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        weight_updater: RayWeightUpdater | None = None,
        options: RemoteOptions | None = None,
        **keywords: Any,
    ) -> None:
        opts = RemoteOptions.merge(type(self).__name__, options, keywords)
        opts.refuse_launch_fields(type(self).__name__)
        if weight_updater is not None and not isinstance(weight_updater, RayWeightUpdater):
            raise ValueError(
                f"weight_updater: expected a RayWeightUpdater (or None) for Ray actors, got "
                f"{type(weight_updater).__name__}, which cannot reach another process"
            )
        self._pending: dict[Any, int] = {}  # in-flight collect calls: ObjectRef -> actor index
        self._setup(create_env_fn, policy, frames_per_batch, total_frames, sync, opts)
        self.timing = Timing("RayCollector driver")
        try:
            configs = self._remote_configs(remote_config)
            self._ray = ray = import_ray()
            self._actors: list[Any] = []
            self._started: list[bool] = []
            self._finalizer = weakref.finalize(self, _release, ray, self._actors, self._started)
            self.weight_updater = weight_updater
            if weight_updater is None and self._has_weights:
                self.weight_updater = RayWeightUpdater(policy)
            elif weight_updater is not None:
                weight_updater.bind(None, source=policy if self._has_weights else None)
            self._start_ray(ray_init_config)
            self._start_actors(configs, opts.start_timeout)
        except BaseException:
            self.shutdown()
            raise

    # -- construction ------------------------------------------------------------------------
    def _remote_configs(self, remote_config: Any) -> list[dict[str, Any]]:
        """One options dict per actor, with ``RL_PROFILING`` in its ``runtime_env`` when armed."""
        if remote_config is None:
            remote_config = DEFAULT_REMOTE_CONFIG
        configs = (
            [remote_config] * self.num_collectors
            if isinstance(remote_config, dict)
            else list(remote_config)
        )
        if len(configs) != self.num_collectors or not all(isinstance(c, dict) for c in configs):
            raise ValueError(
                f"remote_config: expected a dict or a list of {self.num_collectors} dicts, "
                f"got {remote_config!r}"
            )
        out = []
        for config in configs:
            config = dict(config)
            runtime_env = dict(config.get("runtime_env") or {})
            env_vars = {**profiling_env(), **runtime_env.get("env_vars", {})}
            if env_vars:
                runtime_env["env_vars"] = env_vars
                config["runtime_env"] = runtime_env
            out.append(config)
        return out

    def _start_ray(self, ray_init_config: dict[str, Any] | None) -> None:
        ray = self._ray
        if ray.is_initialized():
            if ray_init_config:
                logger.warning(
                    "RayCollector: Ray is already initialised; ray_init_config %r is ignored",
                    ray_init_config,
                )
            return
        ray.init(**(ray_init_config or {}))
        self._started.append(True)

    def _start_actors(self, configs: list[dict[str, Any]], timeout: float) -> None:
        remote = self._ray.remote(CollectorActor)
        for idx, (fn, config) in enumerate(zip(self.env_fns, configs, strict=True)):
            actor = remote.options(**config).remote(
                self.collector_class,
                fn,
                self.policy,
                self.per_rank,
                self.rank_kwargs,
                idx,
                self.num_collectors,
            )
            self._actors.append(actor)
        self._ready(
            self._gather(
                {actor.ready.remote(): i for i, actor in enumerate(self._actors)}, "ready", timeout
            )
        )

    @property
    def actor_info(self) -> list[dict[str, Any]]:
        """Each actor's start-up reply (``idx``, ``pid``, ``node_id``, ``num_rows``), in
        actor order."""
        return getattr(self, "rank_info", [])

    # -- calls and errors ------------------------------------------------------------------------
    def _name(self, idx: int) -> str:
        info = self.actor_info[idx] if idx < len(self.actor_info) else {}
        where = f" (pid {info['pid']} on node {info['node_id'][:12]})" if "pid" in info else ""
        return f"Ray actor {idx}{where}"

    def _get(self, ref: Any, idx: int, what: str, timeout: float | None = None) -> Any:
        """``ray.get`` with a timeout; any failure becomes a ``WorkerError`` naming the actor."""
        exc = self._ray.exceptions
        timeout = self.timeout if timeout is None else timeout
        try:
            return self._ray.get(ref, timeout=timeout)
        except exc.GetTimeoutError:
            raise WorkerError(
                idx, f"{self._name(idx)}: no reply to {what!r} within {timeout} s"
            ) from None
        except exc.RayTaskError as err:
            cause = err.cause if isinstance(err.cause, BaseException) else err
            raise WorkerError(
                idx,
                f"{self._name(idx)} raised {type(cause).__name__}: {cause} (in {what!r})",
                str(err),
            ) from None
        except exc.RayActorError as err:
            text = _ANSI.sub("", str(err)).strip()
            if getattr(err, "actor_init_failed", False):  # the constructor raised
                last = text.splitlines()[-1] if text else "unknown error"
                raise WorkerError(idx, f"{self._name(idx)} failed to start: {last}", text) from None
            raise WorkerError(idx, f"{self._name(idx)} died during {what!r}: {text}") from None
        except exc.RayError as err:
            raise WorkerError(
                idx, f"{self._name(idx)} failed during {what!r}: {type(err).__name__}: {err}"
            ) from None

    def _wait_any(
        self, refs: dict[Any, int], timeout: float | None = None, what: str = "collect"
    ) -> Any:
        """The first ready ref among ``refs`` (``ray.wait`` with a timeout)."""
        timeout = self.timeout if timeout is None else timeout
        ready, _ = self._ray.wait(list(refs), num_returns=1, timeout=timeout)
        if not ready:
            names = ", ".join(self._name(i) for i in sorted(set(refs.values())))
            hint = _START_HINT if what == "ready" else ""
            raise WorkerError(
                min(refs.values()), f"no reply to {what!r} within {timeout} s from {names}{hint}"
            )
        return ready[0]

    def _gather(self, refs: dict[Any, int], what: str, timeout: float | None = None) -> list[Any]:
        """Results of one call per actor, in actor order; fails on the first failed actor."""
        refs, results = dict(refs), {}
        while refs:
            ref = self._wait_any(refs, timeout, what)
            idx = refs.pop(ref)
            results[idx] = self._get(ref, idx, what, timeout)
        return [results[i] for i in sorted(results)]

    # -- transport hooks (RemoteCollectorBase) ---------------------------------------------------
    def _latest(self) -> tuple[Any, int] | None:
        return None if self.weight_updater is None else self.weight_updater.latest()

    def _collect_request(self, idx: int, steps: int) -> None:
        self._pending[self._actors[idx].collect.remote(steps, self._latest())] = idx

    def _receive_batch(self, indices: Sequence[int]) -> tuple[int, TensorDictBase]:
        wanted = set(indices)
        ref = self._wait_any({ref: i for ref, i in self._pending.items() if i in wanted})
        idx = self._pending.pop(ref)
        return idx, self._get(ref, idx, "collect")

    def _call(self, indices: list[int], name: Any, args: list[tuple]) -> list[Any]:
        actors, what = self._actors, name if isinstance(name, str) else "map_fn"
        if isinstance(name, str) and name in _ACTOR_COMMANDS:
            refs = {
                getattr(actors[i], name).remote(*a): i for i, a in zip(indices, args, strict=True)
            }
        else:
            refs = {actors[i].map_fn.remote(name, a): i for i, a in zip(indices, args, strict=True)}
        return self._gather(refs, what)

    def _push_weights(self, weights: TensorDictBase) -> None:
        self.weight_updater.push(weights)  # one ray.put; actors pull it with their next collect

    def _teardown(self) -> None:
        """Kill our actors; shut Ray down only if this collector started it."""
        self._pending.clear()
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in actor order (empty after ``shutdown()``)."""
        return list(getattr(self, "_actors", []))
