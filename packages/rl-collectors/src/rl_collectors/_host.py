"""The one host runtime: a hosted collector and the commands every host answers.

A :class:`HostRuntime` runs wherever a :class:`~rl_collectors._driver.CollectorDriver`
keeps a collector: a worker process (``_worker.py``: shared memory + pipes), a
torch.distributed rank or an RPC worker (``_distributed_worker.py``, ``_rpc.py``: flat
byte tensors) or a Ray actor (``_ray_actor.py``). It is built from a :class:`HostSpec`
and answers the driver's commands, whatever carries them:

- :meth:`HostRuntime.batch`: collect ``steps`` steps (a view of the collector's batch);
- :meth:`HostRuntime.load_weights`: newer weights and their version;
- :meth:`HostRuntime.call`: ``map_fn``'s target, ``enable_profile``, ``timing``, ...

Each transport only adds its I/O around it: where the batch goes and how weights arrive.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import socket
from dataclasses import dataclass
from typing import Any

import torch
from rl_envs.processes import Portable
from rl_profiling import ARMED, set_profiling_enabled
from tensordict import TensorDictBase

from rl_collectors._keys import TRAJ_IDS

__all__ = ["HostRuntime", "HostSpec", "bind_hosted", "call_name", "resolve_call"]


@dataclass
class HostSpec:
    """Everything a host needs to build its collector (pickled to it).

    Attributes:
        create_env_fn: the env constructor.
        policy: the policy (its weights are replaced by the driver's pushes).
        frames_per_batch: frames per batch of this collector.
        options: the collector's keyword options (``collector_kwargs``).
        worker_idx: this host's index among the driver's ``num_workers``.
        num_workers: the driver's number of hosts (trajectory ids ``k * N + idx``).
        collector_class: the hosted class (``None``: ``Collector``).
        num_workers_per_collector: env copies given to a ``MultiCollector`` class.
        num_threads: ``torch.set_num_threads`` on the host (``None``: leave it).
        profiling: arm ``rl_profiling`` to match the trainer (``None``: inherit it).
        weights: transport data for the weights: the shared copy and its sequence
            counter (worker processes) or the weights' ``FlatLayout`` (ranks).
        shared: put the collector's batch in shared memory (worker processes).
        filter_warnings: ignore warnings in a worker process.
    """

    create_env_fn: Any
    policy: Any
    frames_per_batch: int
    options: dict[str, Any]
    worker_idx: int
    num_workers: int
    collector_class: type | None = None
    num_workers_per_collector: int = 1
    num_threads: int | None = 1
    profiling: bool | None = None
    weights: Any = None
    shared: bool = False
    filter_warnings: bool = True

    _PORTABLE = {"create_env_fn": "create_env_fn", "policy": "policy",
                 "options": "collector options"}

    def portable(self) -> HostSpec:
        """This spec with the user's objects wrapped for a spawned process."""
        return dataclasses.replace(
            self, **{f: Portable(getattr(self, f), what) for f, what in self._PORTABLE.items()}
        )

    def loaded(self) -> HostSpec:
        """In the worker: the spec with the user's objects loaded (may raise their errors)."""
        return dataclasses.replace(self, **{f: getattr(self, f).load() for f in self._PORTABLE})


class HostRuntime:
    """One hosted collector (``collector_class``, a ``Collector`` by default) and the
    commands it answers; trajectory ids ``k * num_workers + worker_idx``."""

    def __init__(self, spec: HostSpec) -> None:
        from rl_collectors._collector import Collector
        from rl_collectors._multi import MultiCollector

        if spec.profiling is not None and (spec.profiling or ARMED):
            set_profiling_enabled(spec.profiling)  # match the trainer (warns if only one is armed)
        if spec.num_threads is not None:
            torch.set_num_threads(spec.num_threads)
        cls, fn = spec.collector_class or Collector, spec.create_env_fn
        if issubclass(cls, MultiCollector):
            fn = [fn] * spec.num_workers_per_collector
        self.idx, self.num_workers = spec.worker_idx, spec.num_workers
        self.collector = c = cls(
            fn, spec.policy, frames_per_batch=spec.frames_per_batch, total_frames=-1,
            **spec.options,
        )
        # a class without bind_worker keeps its own ids: batch() remaps them
        self.remap = not bind_hosted(c, spec.worker_idx, spec.num_workers)
        if spec.shared:
            c.share_buffer()
        self._iter: Any = None
        self._pending: TensorDictBase | None = None
        if hasattr(c, "collect_view"):
            self.template = c.buffer
        else:  # a class that only iterates: its first batch shows the layout
            self._iter = iter(c)
            self.template = self._pending = next(self._iter)

    @property
    def num_rows(self) -> int:
        """The number of sub-envs (rows of the batch)."""
        env = getattr(self.collector, "env", None)
        return env.batch_size.numel() if env is not None else self.template.batch_size[0]

    def info(self) -> dict[str, Any]:
        """Where this host runs and its number of rows (sent once to the driver)."""
        return {"idx": self.idx, "pid": os.getpid(), "host": socket.gethostname(),
                "num_rows": self.num_rows}

    def batch(self, steps: int) -> TensorDictBase:
        """Collect ``steps`` steps; a view of the collector's batch (overwritten by the
        next call), with trajectory ids unique across hosts."""
        if self._iter is None:
            return self.collector.collect_view(steps)
        view = self._pending if self._pending is not None else next(self._iter)
        self._pending = None
        view = view[..., :steps].clone()
        if self.remap:
            view.get(TRAJ_IDS).mul_(self.num_workers).add_(self.idx)
        return view

    def load_weights(self, weights: TensorDictBase, version: int) -> None:
        """Load the driver's weights of ``version``; batches are tagged with it."""
        self.collector.update_policy_weights_(weights)
        self.collector.policy_version = version

    def call(self, name: Any, args: tuple) -> Any:
        """A driver command: ``enable_profile`` (its config), ``timing``, or ``map_fn``'s
        target (a method name, a ``module.function`` path or a callable) with ``args``."""
        if name == "enable_profile":
            return self.collector.enable_profile(config=args[0])
        if name == "timing":
            return self.collector.timing
        return resolve_call(self.collector, name)(*args)

    def close(self) -> None:
        self.collector.shutdown()


def bind_hosted(collector: Any, worker_idx: int, num_workers: int) -> bool:
    """Give a collector hosted in a worker, rank or actor its worker index.

    Returns whether its trajectory ids now are ``k * num_workers + worker_idx`` (unique
    across workers). A ``Collector`` gets both (``bind_worker``); another class with
    per-collector profiling (``AsyncBatchedCollector``) only its profiling index; any
    other class (``MultiCollector``) nothing, and its host remaps each batch's ids itself.
    """
    if hasattr(collector, "bind_worker"):
        collector.bind_worker(worker_idx, num_workers)
        return True
    if hasattr(collector, "init_worker_profiling"):
        collector.init_worker_profiling(worker_idx)
    return False


def call_name(name: Any, collector_class: Any = None) -> Any:
    """Check ``map_fn``'s ``name`` in the main process; return what to send the workers.

    A callable is sent as is; a method of ``collector_class`` by name; a bare public
    function of ``rl_profiling`` (``"set_profiling_enabled"``, as the docs write it) as
    its dotted path; a dotted ``"module.function"`` path after checking it imports here.

    Raises:
        ValueError: ``name`` is none of these (nothing was sent: the workers keep running).
    """
    if callable(name):
        return name
    if not isinstance(name, str) or not name:
        raise ValueError(f"map_fn: name: expected a method name, a 'module.function' path or a "
                         f"callable, got {name!r}")
    if collector_class is not None and hasattr(collector_class, name):
        return name
    if "." not in name:
        import rl_profiling

        if name in rl_profiling.__all__ and callable(getattr(rl_profiling, name)):
            return f"rl_profiling.{name}"
        owner = "collector" if collector_class is None else collector_class.__name__
        raise ValueError(f"map_fn: name: {name!r} is neither a {owner} method, an rl_profiling "
                         "function nor a 'module.function' path (no worker was called)")
    module, _, attr = name.rpartition(".")
    try:
        found = callable(getattr(importlib.import_module(module), attr, None))
    except ImportError as err:
        raise ValueError(f"map_fn: name: cannot import {module!r} for {name!r}: {err}") from None
    if not found:
        raise ValueError(f"map_fn: name: {module!r} has no function {attr!r}")
    return name


def resolve_call(collector: Any, name: Any) -> Any:
    """``map_fn``'s target in a worker: a collector method, a function or a callable."""
    if isinstance(name, Portable):
        return name.load()
    if callable(name):
        return name
    if hasattr(collector, name):
        return getattr(collector, name)
    module, _, attr = call_name(name).rpartition(".")
    return getattr(importlib.import_module(module), attr)
