"""Workers: a Collector behind a small command protocol, in a process or in this process.

Wiring (one place):

- ``WorkerSpec`` (pickled to the worker at spawn): env constructor, policy, Collector
  options, shared weights, worker index. The user's objects (env constructor, policy,
  options with ``postproc``) cross as :class:`rl_envs.processes.Portable`: by reference
  when importable, by value (cloudpickle) when defined in ``__main__``, lambdas or
  closures; the worker loads them inside its error handling, so a failure to load or to
  build reaches the trainer as ``WorkerError("failed to start: <the worker's exception>")``.
- ``WorkerRuntime`` (in the worker): builds the Collector with its batch in shared
  memory and answers commands (``collect``, ``map_fn``, ``enable_profile``, ...).
- ``worker_main`` (the process target): sends ``("ready", buffer)`` once (the shared
  batch crosses the pipe as file descriptors), then loops on the pipe; every reply is
  ``("batch" | "reply" | "error", payload)``. It polls with a timeout and exits when the
  parent process is gone.
- ``ProcessWorker`` / ``InProcessWorker`` (main side): the same interface over a spawned
  process or a runtime living here (``in_process=True``: pdb and cProfile work).
"""

from __future__ import annotations

import dataclasses
import importlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import time
import traceback
import warnings
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401  (registers the shared-memory pickling of tensors)
from rl_envs.processes import Portable, start_process, stop_processes

from rl_collectors.exceptions import WorkerError
from rl_collectors.weight_sync import SharedWeightsReader

__all__ = [
    "InProcessWorker", "ProcessWorker", "WorkerRuntime", "WorkerSpec", "bind_hosted", "call_name",
    "resolve_call", "worker_main",
]

_POLL = 0.2  # seconds between liveness checks while waiting


@dataclass
class WorkerSpec:
    """Everything a worker needs to build its Collector (pickled at spawn)."""

    create_env_fn: Any
    policy: Any
    frames_per_batch: int
    options: dict[str, Any]
    worker_idx: int
    num_workers: int
    weights: tuple[Any, Any] | None = None  # (shared TensorDict, sequence counter)
    num_threads: int | None = 1
    shared: bool = True
    env: dict[str, Any] = field(default_factory=dict)
    filter_warnings: bool = True

    _PORTABLE = {
        "create_env_fn": "create_env_fn",
        "policy": "policy",
        "options": "collector options",
    }

    def portable(self) -> WorkerSpec:
        """This spec with the user's objects wrapped for a spawned process."""
        return dataclasses.replace(
            self, **{f: Portable(getattr(self, f), what) for f, what in self._PORTABLE.items()}
        )

    def loaded(self) -> WorkerSpec:
        """In the worker: the spec with the user's objects loaded (may raise their errors)."""
        return dataclasses.replace(self, **{f: getattr(self, f).load() for f in self._PORTABLE})


class WorkerRuntime:
    """One Collector answering commands; the same code in a process and in-process."""

    def __init__(self, spec: WorkerSpec) -> None:
        from rl_collectors._collector import Collector

        if spec.num_threads is not None:
            torch.set_num_threads(spec.num_threads)
        self.collector = Collector(
            spec.create_env_fn, spec.policy, frames_per_batch=spec.frames_per_batch, **spec.options
        )
        self.collector.bind_worker(spec.worker_idx, spec.num_workers)
        if spec.shared:
            self.collector.share_buffer()
        self.reader = SharedWeightsReader(*spec.weights) if spec.weights is not None else None

    @property
    def buffer(self) -> Any:
        return self.collector.buffer

    @property
    def num_rows(self) -> int:
        """The number of sub-envs (rows of the batch)."""
        return self.collector.env.batch_size.numel()

    def handle(self, cmd: str, payload: Any) -> tuple[str, Any]:
        """Run one command; returns ``(kind, payload)``."""
        c = self.collector
        if cmd == "collect":
            if self.reader is not None:
                c.policy_version = self.reader.pull(c.policy)
            c.collect_view(payload)
            return "batch", (payload, c.policy_version)
        if cmd == "map_fn":
            name, args = payload
            return "reply", resolve_call(c, name)(*args)
        if cmd == "enable_profile":
            c.enable_profile(config=payload)
            return "reply", None
        if cmd == "disable_profile":
            return "reply", c.disable_profile()
        if cmd == "timing":
            return "reply", c.timing
        if cmd == "set_seed":
            return "reply", c.set_seed(*payload)
        if cmd == "state_dict":
            return "reply", c.state_dict()
        if cmd == "load_state_dict":
            return "reply", c.load_state_dict(payload)
        raise ValueError(f"unknown worker command {cmd!r}")

    def close(self) -> None:
        self.collector.shutdown()


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


def worker_main(spec: WorkerSpec, conn: Any) -> None:
    """Process target: build the runtime, then serve commands until ``close`` or orphaned.

    With ``spec.filter_warnings`` (``filter_warnings_subprocess``, the default) every
    warning is ignored in the worker: optional dependencies warn once per process, and
    N workers would repeat each one N times.
    """
    if spec.filter_warnings:
        warnings.filterwarnings("ignore")
    try:
        runtime = WorkerRuntime(spec.loaded())
        conn.send(("ready", (runtime.buffer, runtime.num_rows)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
        return
    parent = mp.parent_process()
    try:
        while True:
            if not conn.poll(_POLL):
                if parent is not None and not parent.is_alive():
                    return  # orphaned: the main process is gone
                continue
            try:
                cmd, payload = conn.recv()
            except (EOFError, OSError):
                raise
            except Exception:  # a command this process cannot unpickle: say so, keep serving
                conn.send(("error", traceback.format_exc()))
                continue
            if cmd == "close":
                return
            try:
                conn.send(runtime.handle(cmd, payload))
            except Exception:
                conn.send(("error", traceback.format_exc()))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return
    finally:
        runtime.close()


class ProcessWorker:
    """Main-side handle of one spawned worker process."""

    def __init__(self, spec: WorkerSpec, ctx: Any) -> None:
        self.idx = spec.worker_idx
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=worker_main,
            args=(spec.portable(), child),
            name=f"rl-collector-worker-{self.idx}",
            daemon=False,
        )
        try:
            start_process(self.process)  # pickles the spec: an object that cannot cross raises here
        except BaseException:
            self.conn.close()
            raise
        finally:
            child.close()
        self.batches: deque[Any] = deque()
        self.buffer: Any = None
        self.num_rows = 0

    def wait_ready(self, timeout: float) -> None:
        self.buffer, self.num_rows = self._recv(timeout, "ready")

    def send(self, cmd: str, payload: Any = None) -> None:
        try:
            self.conn.send((cmd, payload))
        except (BrokenPipeError, OSError) as err:
            raise WorkerError(self.idx, f"cannot send {cmd!r}: {err} ({self._status()})") from None

    def _status(self) -> str:
        code = self.process.exitcode
        return "alive" if code is None else f"exit code {code}"

    def _recv(self, timeout: float, expect: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            ready = mpc.wait(
                [self.conn, self.process.sentinel],
                timeout=min(_POLL, max(0.0, deadline - time.monotonic())),
            )
            if self.conn in ready:
                try:
                    kind, payload = self.conn.recv()
                except (EOFError, OSError):
                    raise WorkerError(self.idx, f"died ({self._status()})") from None
                if kind == "error":  # the worker caught it and keeps serving (unless starting)
                    starting = expect == "ready"
                    raise WorkerError(
                        self.idx,
                        "failed to start" if starting else "raised",
                        payload,
                        alive=not starting,
                    )
                if kind == "batch" and expect != "batch":
                    self.batches.append(payload)  # an async batch that arrived first
                    continue
                return payload
            if self.process.sentinel in ready or not self.process.is_alive():
                raise WorkerError(
                    self.idx, f"died without a reply ({self._status()}; its stderr shows why)"
                )
            if time.monotonic() >= deadline:
                raise WorkerError(
                    self.idx, f"no {expect!r} reply within {timeout} s ({self._status()})"
                )

    def recv_reply(self, timeout: float) -> Any:
        return self._recv(timeout, "reply")

    def recv_batch(self, timeout: float) -> Any:
        if self.batches:
            return self.batches.popleft()
        return self._recv(timeout, "batch")

    @property
    def waitables(self) -> list[Any]:
        return [self.conn, self.process.sentinel]

    def close(self, timeout: float = 3.0) -> None:
        """Ask the worker to stop, then terminate and kill it if it does not; bounded."""
        try:
            if self.process.is_alive():
                self.conn.send(("close", None))
        except (BrokenPipeError, OSError):
            pass
        stop_processes([self.process], timeout)
        self.conn.close()


class InProcessWorker:
    """The same interface as :class:`ProcessWorker`, running the runtime right here."""

    def __init__(self, spec: WorkerSpec) -> None:
        self.idx = spec.worker_idx
        spec.shared = False
        spec.num_threads = None
        try:
            self.runtime: WorkerRuntime | None = WorkerRuntime(spec)
        except Exception as err:
            raise WorkerError(self.idx, "raised", traceback.format_exc()) from err
        self.buffer = self.runtime.buffer
        self.num_rows = self.runtime.num_rows
        self.batches: deque[Any] = deque()
        self.replies: deque[Any] = deque()

    def wait_ready(self, timeout: float) -> None:
        pass

    def send(self, cmd: str, payload: Any = None) -> None:
        if self.runtime is None:
            raise WorkerError(self.idx, f"cannot send {cmd!r}: closed")
        try:
            kind, result = self.runtime.handle(cmd, payload)
        except Exception as err:
            raise WorkerError(self.idx, "raised", traceback.format_exc(), alive=True) from err
        (self.batches if kind == "batch" else self.replies).append(result)

    def recv_reply(self, timeout: float) -> Any:
        return self.replies.popleft()

    def recv_batch(self, timeout: float) -> Any:
        return self.batches.popleft()

    @property
    def waitables(self) -> list[Any]:
        return []

    def close(self, timeout: float = 3.0) -> None:
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None
