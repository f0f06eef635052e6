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
  versions, ``map_fn`` / ``set_seed``, profiling and the shutdown guard are the
  :class:`~rl_collectors._driver.CollectorDriver`'s; this module supplies its transport,
  :class:`RayTransport`, over Ray calls. Every wait is a ``ray.wait`` / ``ray.get`` with
  a timeout; a failed call becomes a ``WorkerError`` naming the actor, and every actor
  is killed.
- Weights: :class:`~rl_collectors._ray_weight_sync.RayWeightUpdater` (one ``ray.put``
  per update, actors pull by version).

Ray is imported lazily (the ``[ray]`` extra); see ``docs/distributed.md``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from rl_profiling import profiling_env
from tensordict import TensorDictBase

from rl_collectors._distributed_base import RemoteCollectorBase, concat
from rl_collectors._host import HostSpec
from rl_collectors._options import RemoteOptions
from rl_collectors._ray_actor import CollectorActor
from rl_collectors._ray_weight_sync import RayWeightUpdater, import_ray
from rl_collectors.exceptions import WorkerError

__all__ = ["CollectorActor", "RayCollector", "RayTransport", "RayWeightUpdater"]

logger = logging.getLogger(__name__)

DEFAULT_REMOTE_CONFIG = {"num_cpus": 1}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_START_HINT = (
    " (actors start a Python process and import torch; under `uv run`, Ray may rebuild the "
    "environment for them: set RAY_ENABLE_UV_RUN_RUNTIME_ENV=0, see docs/distributed.md)"
)


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
        ray_init_config: keyword arguments of ``ray.init`` when Ray is not running.
        remote_config: actor options (``num_cpus``, ``num_gpus``, ``memory``,
            ``resources``, ``runtime_env``, ...), one dict for all actors or one per
            actor; default ``{"num_cpus": 1}``.
        weight_updater: a :class:`RayWeightUpdater` (built with or without its source,
            TorchRL's ``RayWeightUpdater()``; this collector binds its policy); default:
            one made here when the policy has weights.
        **kwargs: ``frames_per_batch``, ``total_frames``, ``sync`` (``True`` by default,
            see above), ``options`` and the ``RemoteOptions`` fields, as for every remote
            collector (:class:`~rl_collectors._distributed_base.RemoteCollectorBase`). The
            launch fields (``launcher``, ``tcp_port``, ``num_threads``, ...) must keep
            their defaults: Ray starts the actors.

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

    default_sync = True

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        weight_updater: RayWeightUpdater | None = None,
        **kwargs: Any,
    ) -> None:
        if weight_updater is not None and not isinstance(weight_updater, RayWeightUpdater):
            raise ValueError(
                f"weight_updater: expected a RayWeightUpdater (or None) for Ray actors, got "
                f"{type(weight_updater).__name__}, which cannot reach another process"
            )
        self._ray_args = (ray_init_config, remote_config, weight_updater)
        super().__init__(create_env_fn, policy, **kwargs)

    def _check_options(self, opts: RemoteOptions) -> None:
        opts.refuse_launch_fields(type(self).__name__)

    def _make_transport(self, opts: RemoteOptions) -> tuple[RayTransport, Callable[[], None]]:
        ray_init_config, remote_config, weight_updater = self._ray_args
        configs = _remote_configs(remote_config, self.num_workers)
        if self._has_weights:  # one ray.put per push; actors pull it with their next collect
            self.weight_updater = weight_updater or RayWeightUpdater(self.policy)
            self.weight_updater.bind(None, source=self.policy)
        # Ray gives actors their CPUs and RL_PROFILING (remote_config's runtime_env)
        specs = [self.rank_spec(i, num_threads=None, profiling=None)
                 for i in range(self.num_workers)]
        transport = RayTransport(self.timeout)
        return transport, lambda: transport.start(ray_init_config, configs, specs,
                                                  opts.start_timeout)

    @property
    def actor_info(self) -> list[dict[str, Any]]:
        """Each actor's start-up reply (``idx``, ``pid``, ``node_id``, ``num_rows``), in
        actor order."""
        return getattr(self, "rank_info", [])

    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in actor order (empty after ``shutdown()``)."""
        return list(self.transport.actors) if self.transport is not None else []


def _remote_configs(remote_config: Any, num_actors: int) -> list[dict[str, Any]]:
    """One options dict per actor, with ``RL_PROFILING`` in its ``runtime_env`` when armed."""
    if remote_config is None:
        remote_config = DEFAULT_REMOTE_CONFIG
    configs = [remote_config] * num_actors if isinstance(remote_config, dict) else list(
        remote_config
    )
    if len(configs) != num_actors or not all(isinstance(c, dict) for c in configs):
        raise ValueError(
            f"remote_config: expected a dict or a list of {num_actors} dicts, "
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


class RayTransport:
    """The :class:`~rl_collectors._driver.Transport` over Ray actor calls: host ``i`` is
    actor ``i``; the weights' ``(ObjectRef, version)`` goes with each collect call."""

    def __init__(self, timeout: float) -> None:
        self.timeout, self.infos = timeout, []
        self.actors: list[Any] = []
        self._pending: dict[Any, int] = {}  # in-flight collect calls: ObjectRef -> actor index
        self._started: list[bool] = []
        self._ray: Any = None
        self._finalizer: Any = None

    def start(self, ray_init_config: dict[str, Any] | None, configs: list[dict[str, Any]],
              specs: list[HostSpec], timeout: float) -> None:
        self._ray = ray = import_ray()
        self._finalizer = weakref.finalize(self, _release, ray, self.actors, self._started)
        self._start_ray(ray_init_config)
        remote = ray.remote(CollectorActor)
        for config, spec in zip(configs, specs, strict=True):
            self.actors.append(remote.options(**config).remote(spec))
        refs = {actor.ready.remote(): i for i, actor in enumerate(self.actors)}
        self.infos = self._gather(refs, "ready", timeout)

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

    # -- calls and errors ------------------------------------------------------------------------
    def _name(self, idx: int) -> str:
        info = self.infos[idx] if idx < len(self.infos) else {}
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

    # -- the Transport interface ----------------------------------------------------------
    def request(self, idx: int, steps: int, weights: tuple[Any, int] | None) -> None:
        self._pending[self.actors[idx].collect.remote(steps, weights)] = idx

    def receive(self, indices: Sequence[int]) -> tuple[int, TensorDictBase]:
        wanted = set(indices)
        ref = self._wait_any({ref: i for ref, i in self._pending.items() if i in wanted})
        idx = self._pending.pop(ref)
        return idx, self._get(ref, idx, "collect")

    def call(self, indices: Sequence[int], name: Any, args: Sequence[tuple]) -> list[Any]:
        what = name if isinstance(name, str) else "map_fn"
        refs = {self.actors[i].call.remote(name, a): i for i, a in zip(indices, args, strict=True)}
        return self._gather(refs, what)

    stack = staticmethod(concat)

    def own(self, batch: TensorDictBase) -> TensorDictBase:
        return batch  # deserialised from the object store

    def close(self) -> None:
        """Kill our actors; shut Ray down only if this transport started it."""
        self._pending.clear()
        if self._finalizer is not None:
            self._finalizer()
