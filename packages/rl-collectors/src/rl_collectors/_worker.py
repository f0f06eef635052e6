"""Worker processes: the pipe I/O around a :class:`~rl_collectors._host.HostRuntime`.

Wiring (one place):

- ``HostSpec`` (``_host.py``, pickled to the worker at spawn): env constructor, policy,
  Collector options, shared weights, worker index. The user's objects cross as
  :class:`rl_envs.processes.Portable`: by reference when importable, by value
  (cloudpickle) when defined in ``__main__``, lambdas or closures; the worker loads them
  inside its error handling, so a failure to load or to build reaches the trainer as
  ``WorkerError("failed to start: <the worker's exception>")``.
- :func:`handle` (in the worker): the two commands, ``collect`` (pull newer shared
  weights, collect into the shared batch) and ``call`` (``HostRuntime.call``).
- ``worker_main`` (the process target): sends ``("ready", buffer)`` once (the shared
  batch crosses the pipe as file descriptors), then loops on the pipe; every reply is
  ``("batch" | "reply" | "error", payload)``. It polls with a timeout and exits when the
  parent process is gone.
- ``ProcessWorker`` / ``InProcessWorker`` (main side): the same interface over a spawned
  process or a runtime living here (``in_process=True``: pdb and cProfile work); the
  :class:`~rl_collectors._multi.PipeTransport` drives them.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection as mpc
import time
import traceback
import warnings
from collections import deque
from typing import Any

import torch.multiprocessing  # noqa: F401  (registers the shared-memory pickling of tensors)
from rl_envs.processes import start_process, stop_processes

from rl_collectors._host import HostRuntime, HostSpec
from rl_collectors.exceptions import WorkerError
from rl_collectors.weight_sync import SharedWeightsReader

__all__ = ["InProcessWorker", "ProcessWorker", "handle", "worker_main"]

_POLL = 0.2  # seconds between liveness checks while waiting


def handle(runtime: HostRuntime, cmd: str, payload: Any) -> tuple[str, Any]:
    """Run one pipe command; returns ``(kind, payload)``. ``collect`` first pulls newer
    weights from the shared copy (``runtime.reader``), then collects into the shared batch."""
    if cmd == "collect":
        c = runtime.collector
        if runtime.reader is not None:
            c.policy_version = runtime.reader.pull(c.policy)
        runtime.batch(payload)
        return "batch", (payload, c.policy_version)
    if cmd == "call":
        return "reply", runtime.call(*payload)
    raise ValueError(f"unknown worker command {cmd!r}")


def start_runtime(spec: HostSpec) -> HostRuntime:
    """The worker's runtime, with the reader of the shared weights when there are any."""
    runtime = HostRuntime(spec)
    runtime.reader = SharedWeightsReader(*spec.weights) if spec.weights is not None else None
    return runtime


def worker_main(spec: HostSpec, conn: Any) -> None:
    """Process target: build the runtime, then serve commands until ``close`` or orphaned.

    With ``spec.filter_warnings`` (``filter_warnings_subprocess``, the default) every
    warning is ignored in the worker: optional dependencies warn once per process, and
    N workers would repeat each one N times.
    """
    if spec.filter_warnings:
        warnings.filterwarnings("ignore")
    try:
        runtime = start_runtime(spec.loaded())
        conn.send(("ready", (runtime.template, runtime.num_rows)))
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
                conn.send(handle(runtime, cmd, payload))
            except Exception:
                conn.send(("error", traceback.format_exc()))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return
    finally:
        runtime.close()


class ProcessWorker:
    """Main-side handle of one spawned worker process."""

    def __init__(self, spec: HostSpec, ctx: Any) -> None:
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

    def __init__(self, spec: HostSpec) -> None:
        self.idx = spec.worker_idx
        spec.shared = False
        spec.num_threads = None
        try:
            self.runtime: HostRuntime | None = start_runtime(spec)
        except Exception as err:
            raise WorkerError(self.idx, "raised", traceback.format_exc()) from err
        self.buffer = self.runtime.template
        self.num_rows = self.runtime.num_rows
        self.batches: deque[Any] = deque()
        self.replies: deque[Any] = deque()

    def wait_ready(self, timeout: float) -> None:
        pass

    def send(self, cmd: str, payload: Any = None) -> None:
        if self.runtime is None:
            raise WorkerError(self.idx, f"cannot send {cmd!r}: closed")
        try:
            kind, result = handle(self.runtime, cmd, payload)
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
