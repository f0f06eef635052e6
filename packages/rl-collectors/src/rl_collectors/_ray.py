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
  async (each actor is re-launched as soon as its batch is taken). Every wait is a
  ``ray.wait`` / ``ray.get`` with a timeout; a failed call becomes a ``WorkerError``
  naming the actor, and every actor is killed.
- Weights: :class:`~rl_collectors._ray_weight_sync.RayWeightUpdater` (one ``ray.put``
  per update, actors pull by version).

Ray is imported lazily (the ``[ray]`` extra); see ``docs/distributed.md``.
"""

from __future__ import annotations

import contextlib
import logging
import re
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from rl_profiling import ProfileConfig, Timing, profiling_env
from tensordict import TensorDictBase

from rl_collectors._collector import Collector
from rl_collectors._distributed_base import RemoteCollectorBase, _concat
from rl_collectors._options import CollectorOptions
from rl_collectors._profiling import make_profile_config
from rl_collectors._ray_actor import CollectorActor
from rl_collectors._ray_weight_sync import RayWeightUpdater, import_ray
from rl_collectors.exceptions import CollectorClosedError, CollectorError, WorkerError
from rl_collectors.weight_sync import weights_of

__all__ = ["CollectorActor", "RayCollector", "RayWeightUpdater"]

logger = logging.getLogger(__name__)

_DRIVER_SIDE = ("postproc", "replay_buffer", "post_collect_hook", "split_trajs")
DEFAULT_REMOTE_CONFIG = {"num_cpus": 1}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_START_HINT = (" (actors start a Python process and import torch; under `uv run`, Ray may rebuild the "
               "environment for them: set RAY_ENABLE_UV_RUN_RUNTIME_ENV=0, see docs/distributed.md)")


def _release(ray: Any, actors: list[Any], started_ray: list[bool]) -> None:
    """Finalizer: kill our actors, then stop Ray if we started it; safe to call twice."""
    while actors:
        with contextlib.suppress(Exception):  # Ray already down, or the actor already dead
            ray.kill(actors.pop(), no_restart=True)
    if started_ray and started_ray.pop() and ray.is_initialized():
        ray.shutdown()


class RayCollector:
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
        num_collectors: number of actors (default: the length of ``create_env_fn`` when
            it is a list, else 1).
        sync: synchronous (``True``) or asynchronous schedule.
        ray_init_config: keyword arguments of ``ray.init`` when Ray is not running.
        remote_config: actor options (``num_cpus``, ``num_gpus``, ``memory``,
            ``resources``, ``runtime_env``, ...), one dict for all actors or one per
            actor; default ``{"num_cpus": 1}``.
        collector_class: the collector each actor hosts (default ``Collector``).
        collector_kwargs: its keyword options; ``postproc``, ``replay_buffer``,
            ``post_collect_hook`` and ``split_trajs`` run on the driver.
        update_after_each_batch: push the policy's weights after each yielded batch.
        timeout: seconds a batch or reply may take before the actor is declared hung.
        start_timeout: seconds the actors may take to start (process, imports, env).

    Raises:
        ModuleNotFoundError: Ray is not installed (``pip install rl-collectors[ray]``).
        ValueError: a bad argument (the message names it).
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

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        num_collectors: int | None = None,
        sync: bool = True,
        ray_init_config: dict[str, Any] | None = None,
        remote_config: dict[str, Any] | Sequence[dict[str, Any]] | None = None,
        collector_class: type = Collector,
        collector_kwargs: dict[str, Any] | None = None,
        update_after_each_batch: bool = False,
        timeout: float = 300.0,
        start_timeout: float = 300.0,
    ) -> None:
        fns = RemoteCollectorBase._env_fns(create_env_fn, num_collectors)
        self.num_collectors, self.sync = len(fns), bool(sync)
        kwargs = dict(collector_kwargs or {})
        self.options = CollectorOptions(**{k: kwargs[k] for k in _DRIVER_SIDE if k in kwargs})
        if not isinstance(collector_class, type):
            raise TypeError(f"collector_class: expected a collector class, got {collector_class!r}")
        if issubclass(collector_class, Collector):
            CollectorOptions(**kwargs)  # validate the actors' options here, before starting anything
        CollectorOptions.check_frames(frames_per_batch, total_frames, self.num_collectors if self.sync else 1)
        configs = self._remote_configs(remote_config)
        self.frames_per_batch, self.total_frames = frames_per_batch, total_frames
        self.update_after_each_batch, self.timeout = bool(update_after_each_batch), float(timeout)
        self.policy, self.frames, self._closed = policy, 0, False
        self.timing = Timing("RayCollector driver")
        self._pending: dict[Any, int] = {}
        self._ray = ray = import_ray()
        self._actors: list[Any] = []
        self._started: list[bool] = []
        self._finalizer = weakref.finalize(self, _release, ray, self._actors, self._started)
        has_weights = isinstance(policy, torch.nn.Module) and weights_of(policy) is not None
        self.weight_updater = RayWeightUpdater(policy) if has_weights else None
        actor_kwargs = {k: v for k, v in kwargs.items() if k not in _DRIVER_SIDE}
        per_actor = frames_per_batch // self.num_collectors if self.sync else frames_per_batch
        try:
            self._start_ray(ray_init_config)
            self._start_actors(fns, configs, collector_class, policy, per_actor, actor_kwargs, start_timeout)
        except BaseException:
            self.shutdown()
            raise

    # -- construction ------------------------------------------------------------------------
    def _remote_configs(self, remote_config: Any) -> list[dict[str, Any]]:
        """One options dict per actor, with ``RL_PROFILING`` in its ``runtime_env`` when armed."""
        if remote_config is None:
            remote_config = DEFAULT_REMOTE_CONFIG
        configs = [remote_config] * self.num_collectors if isinstance(remote_config, dict) else list(remote_config)
        if len(configs) != self.num_collectors or not all(isinstance(c, dict) for c in configs):
            raise ValueError(f"remote_config: expected a dict or a list of {self.num_collectors} dicts, "
                             f"got {remote_config!r}")
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
                logger.warning("RayCollector: Ray is already initialised; ray_init_config %r is ignored", ray_init_config)
            return
        ray.init(**(ray_init_config or {}))
        self._started.append(True)

    def _start_actors(self, fns: list, configs: list, collector_class: type, policy: Any, frames: int,
                      kwargs: dict, timeout: float) -> None:
        remote = self._ray.remote(CollectorActor)
        for idx, (fn, config) in enumerate(zip(fns, configs, strict=True)):
            actor = remote.options(**config).remote(collector_class, fn, policy, frames, kwargs, idx,
                                                    self.num_collectors)
            self._actors.append(actor)
        self.actor_info: list[dict[str, Any]] = []
        self.actor_info = self._call_all("ready", timeout=timeout)
        rows = {info["num_rows"] for info in self.actor_info}
        if len(rows) != 1:
            raise ValueError(f"create_env_fn: every env must have the same number of sub-envs, got {sorted(rows)}")
        self.num_rows = rows.pop()
        CollectorOptions.check_frames(self.frames_per_batch, self.total_frames,
                                      self.num_rows * (self.num_collectors if self.sync else 1))

    # -- calls and errors ------------------------------------------------------------------------
    def _name(self, idx: int) -> str:
        info = self.actor_info[idx] if idx < len(getattr(self, "actor_info", [])) else {}
        where = f" (pid {info['pid']} on node {info['node_id'][:12]})" if "pid" in info else ""
        return f"Ray actor {idx}{where}"

    def _get(self, ref: Any, idx: int, what: str, timeout: float | None = None) -> Any:
        """``ray.get`` with a timeout; any failure becomes a ``WorkerError`` naming the actor."""
        exc = self._ray.exceptions
        timeout = self.timeout if timeout is None else timeout
        try:
            return self._ray.get(ref, timeout=timeout)
        except exc.GetTimeoutError:
            raise WorkerError(idx, f"{self._name(idx)}: no reply to {what!r} within {timeout} s") from None
        except exc.RayTaskError as err:
            cause = err.cause if isinstance(err.cause, BaseException) else err
            raise WorkerError(idx, f"{self._name(idx)} raised {type(cause).__name__}: {cause} (in {what!r})",
                              str(err)) from None
        except exc.RayActorError as err:
            text = _ANSI.sub("", str(err)).strip()
            if getattr(err, "actor_init_failed", False):  # the constructor raised
                last = text.splitlines()[-1] if text else "unknown error"
                raise WorkerError(idx, f"{self._name(idx)} failed to start: {last}", text) from None
            raise WorkerError(idx, f"{self._name(idx)} died during {what!r}: {text}") from None
        except exc.RayError as err:
            raise WorkerError(idx, f"{self._name(idx)} failed during {what!r}: {type(err).__name__}: {err}") from None

    def _wait_any(self, refs: dict[Any, int], timeout: float | None = None, what: str = "collect") -> Any:
        """The first ready ref among ``refs`` (``ray.wait`` with a timeout)."""
        timeout = self.timeout if timeout is None else timeout
        ready, _ = self._ray.wait(list(refs), num_returns=1, timeout=timeout)
        if not ready:
            names = ", ".join(self._name(i) for i in sorted(set(refs.values())))
            hint = _START_HINT if what == "ready" else ""
            raise WorkerError(min(refs.values()), f"no reply to {what!r} within {timeout} s from {names}{hint}")
        return ready[0]

    def _gather(self, refs: dict[Any, int], what: str, timeout: float | None = None) -> list[Any]:
        """Results of one call per actor, in actor order; fails on the first failed actor."""
        refs, results = dict(refs), {}
        while refs:
            ref = self._wait_any(refs, timeout, what)
            idx = refs.pop(ref)
            results[idx] = self._get(ref, idx, what, timeout)
        return [results[i] for i in sorted(results)]

    def _call_all(self, method: str, args: Sequence[tuple] | None = None, actors: Sequence[int] | None = None,
                  timeout: float | None = None) -> list[Any]:
        """Call ``method`` on the selected actors; on failure every actor is killed."""
        self._check_open()
        selected = list(range(self.num_collectors)) if actors is None else list(actors)
        args = [()] * len(selected) if args is None else list(args)
        refs = {getattr(self._actors[i], method).remote(*a): i for i, a in zip(selected, args, strict=True)}
        try:
            return self._gather(refs, method, timeout)
        except WorkerError:
            self.shutdown()
            raise

    # -- iteration ----------------------------------------------------------------------------
    def __iter__(self) -> Iterator[TensorDictBase | None]:
        self._check_open()
        try:
            for batch in self._sync_batches() if self.sync else self._async_batches():
                self.frames += batch.numel()
                yield self.options.deliver(batch)
                if self.update_after_each_batch and self.weight_updater is not None:
                    self.update_policy_weights_()
        except WorkerError:
            self.shutdown()
            raise

    def _latest(self) -> tuple[Any, int] | None:
        return None if self.weight_updater is None else self.weight_updater.latest()

    def _sync_batches(self) -> Iterator[TensorDictBase]:
        per_round = self.num_collectors * self.num_rows
        while self.total_frames < 0 or self.frames < self.total_frames:
            left = self.remaining_frames()
            steps = self.frames_per_batch // per_round
            steps = steps if left is None else min(steps, left // per_round)
            latest = self._latest()
            refs = {actor.collect.remote(steps, latest): i for i, actor in enumerate(self._actors)}
            with self.timing.add_time("wait"):
                batches = self._gather(refs, "collect")
            with self.timing.add_time("concat"):
                batch = _concat(batches)
            yield batch

    def _launch(self, idx: int, steps: int) -> None:
        self._pending[self._actors[idx].collect.remote(steps, self._latest())] = idx

    def _async_batches(self) -> Iterator[TensorDictBase]:
        steps = self.frames_per_batch // self.num_rows
        busy = set(self._pending.values())
        for idx in range(self.num_collectors):
            if idx not in busy:
                self._launch(idx, steps)
        while self.total_frames < 0 or self.frames < self.total_frames:
            with self.timing.add_time("wait"):
                ref = self._wait_any(self._pending)
                idx = self._pending.pop(ref)
                batch = self._get(ref, idx, "collect")
            left = self.remaining_frames()
            if left is not None and batch.numel() >= left:
                batch = batch[..., : left // self.num_rows]
            else:
                self._launch(idx, steps)
            yield batch


    def remaining_frames(self) -> int | None:
        """Frames still to collect, ``None`` for an endless collector."""
        return None if self.total_frames < 0 else self.total_frames - self.frames

    # -- weights and commands --------------------------------------------------------------------
    def update_policy_weights_(self, policy_or_weights: Any = None) -> int:
        """Put new weights in the object store; each actor loads them before its next batch.

        Args:
            policy_or_weights: an ``nn.Module`` or a TensorDict of weights; ``None`` reads
                the policy given at construction.

        Returns:
            The new policy version (batches collected with it carry it).

        Raises:
            CollectorError: the policy has no weights to send.
        """
        self._check_open()
        if self.weight_updater is None:
            raise CollectorError("update_policy_weights_: the RayCollector's policy has no weights to send")
        return self.weight_updater.push(policy_or_weights)

    def map_fn(self, name: str | Callable, list_of_args: Sequence[Any]) -> list[Any]:
        """Call a function in every actor; actor ``i`` gets ``list_of_args[i]``.

        Args:
            name: a collector method name (``"set_seed"``), a dotted path
                (``"os.getpid"``) or a picklable callable.
            list_of_args: one entry per actor: a tuple of positional arguments (a
                non-tuple value is passed as the single argument).

        Returns:
            The actors' return values, in actor order.
        """
        if len(list_of_args) != self.num_collectors:
            raise ValueError(f"map_fn: list_of_args: expected {self.num_collectors} entries (one per actor), "
                             f"got {len(list_of_args)}")
        return self._call_all("map_fn", [(name, a if isinstance(a, tuple) else (a,)) for a in list_of_args])

    def set_seed(self, seed: int, static_seed: bool = False) -> int | None:
        """Seed actor ``i``'s env with the seed returned by actor ``i - 1``; returns the last."""
        for i in range(self.num_collectors):
            seed = self._call_all("map_fn", [("set_seed", (seed, static_seed))], [i])[0]
        return seed

    # -- profiling ----------------------------------------------------------------------------
    def enable_profile(self, workers: list[int] | None = [0], *, config: ProfileConfig | None = None,  # noqa: B006
                       **fields: Any) -> None:
        """Install an ``rl_profiling.ProfilerHook`` in the selected actors.

        Takes the ``ProfileConfig`` fields as keywords (``num_rollouts``,
        ``warmup_rollouts``, ``save_path``: an absolute path on the actors' nodes, with
        ``{worker_idx}``) or a ``config``. Named ranges appear only when the driver ran
        with ``RL_PROFILING=1`` (it is passed to the actors).
        """
        cfg = make_profile_config(config, workers=None if config is not None else workers, **fields)
        self._profiled = [i for i in range(self.num_collectors) if cfg.profiles(i)]
        self._call_all("enable_profile", [(cfg,)] * len(self._profiled), self._profiled)

    def disable_profile(self) -> list[str | None]:
        """Stop profiling in the profiled actors; returns the trace paths they wrote."""
        selected, self._profiled = getattr(self, "_profiled", []), []
        return self._call_all("disable_profile", None, selected)

    def worker_timings(self) -> list[Timing]:
        """Each actor's ``Timing`` (rollout, policy, env_step, storage)."""
        return self._call_all("timing")

    def timing_report(self) -> str:
        """Two trees: the actors' Timing merged (summed over actors) and the driver's."""
        merged = Timing.merge(*self.worker_timings())
        merged.name = f"Collector actors (sum over {self.num_collectors})"
        return merged.report() + "\n" + self.timing.report()

    # -- lifecycle ----------------------------------------------------------------------------
    @property
    def actors(self) -> list[Any]:
        """The Ray actor handles, in actor order (empty after ``shutdown()``)."""
        return list(self._actors)

    def _check_open(self) -> None:
        if self._closed:
            raise CollectorClosedError("RayCollector: used after shutdown()")

    def shutdown(self) -> None:
        """Kill our actors; shut Ray down only if this collector started it. Idempotent."""
        self._closed = True
        self._pending.clear()
        self._finalizer()

    def __enter__(self) -> RayCollector:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return (f"RayCollector(num_collectors={self.num_collectors}, sync={self.sync}, "
                f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, frames={self.frames})")
