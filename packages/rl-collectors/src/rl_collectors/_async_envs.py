"""Env workers of :class:`~rl_collectors.AsyncBatchedCollector`: threads or processes.

Each worker owns one single (non-batched) env bound to its row of the shared slots
(``env.bind_buffers(root[i], next[i])``), so a step writes straight into memory the
inference server reads. The protocol is one signal each way per step:

- worker -> server: "my row is ready" (after the first reset, then after every step);
- server -> worker: "your action is in the action slot" (then the worker steps), or stop.

Threads use ``queue.SimpleQueue`` (one inbox for the server, one per worker); processes
(spawned) use one duplex pipe per worker with one-byte messages, and the server waits on
the pipes and the process sentinels together, so a dead worker is seen at once. A worker
that raises sends its traceback; the server raises :class:`WorkerError` with its index.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import multiprocessing.connection as mpc
import queue
import threading
import traceback
import warnings
from typing import Any

import torch
import torch.multiprocessing  # noqa: F401  (registers the shared-memory pickling of tensors)
from rl_envs import FastPathEnv, reset_where
from rl_envs.processes import Portable, start_process, stop_processes
from rl_profiling import record
from tensordict import TensorDictBase

from rl_collectors._base import build_env
from rl_collectors.exceptions import WorkerError

__all__ = ["ProcessEnvPool", "ThreadEnvPool", "make_env"]

_POLL = 0.2  # seconds between liveness checks of an idle worker
_READY, _ACT, _STOP, _ERROR = b"r", b"a", b"s", b"e"


def make_env(create_env_fn: Any) -> FastPathEnv:
    """``create_env_fn()`` (or the env itself), checked to be a single env."""
    env = build_env(create_env_fn)
    if env.batch_size.numel() != 1:
        raise ValueError(
            "create_env_fn: expected a single env (batch_size () or (1,)), got "
            f"batch_size={tuple(env.batch_size)}; "
            "AsyncBatchedCollector batches across envs itself (use GymEnv(..., num_envs=1))"
        )
    return env


def _bind(
    env: FastPathEnv, idx: int, slots: tuple[TensorDictBase, TensorDictBase, torch.Tensor]
) -> torch.Tensor:
    root, nxt, action = slots
    env.bind_buffers(root[idx], nxt[idx])
    return action[idx]


def _env_loop(env: FastPathEnv, action: torch.Tensor, send: Any, recv: Any) -> None:
    """Reset, then step on every action signal until told to stop."""
    reset_where(env)
    send(_READY)
    step = env.fast_step
    while recv() == _ACT:
        with record("EnvBase.fast_step"):
            step(action)
        send(_READY)


# -- threads ------------------------------------------------------------------------------
class ThreadEnvPool:
    """One thread per env; envs are built here, in the calling thread."""

    def __init__(
        self, create_env_fns: list[Any], slots: tuple, envs: list[Any] | None = None
    ) -> None:
        self.envs = envs if envs is not None else [make_env(fn) for fn in create_env_fns]
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.outboxes = [queue.SimpleQueue() for _ in self.envs]
        self.threads = []
        for i, env in enumerate(self.envs):
            action = _bind(env, i, slots)
            t = threading.Thread(
                target=self._run, args=(i, env, action), name=f"rl-async-env-{i}", daemon=True
            )
            self.threads.append(t)

    def start(self, timeout: float) -> None:
        for t in self.threads:
            t.start()

    def _run(self, i: int, env: FastPathEnv, action: torch.Tensor) -> None:
        box = self.outboxes[i]
        try:
            _env_loop(env, action, lambda _: self.inbox.put(i), box.get)
        except BaseException:
            self.inbox.put((i, traceback.format_exc()))

    def wait(self, timeout: float) -> list[int]:
        """Indices of the workers whose row is ready (empty after ``timeout`` seconds)."""
        try:
            items = [self.inbox.get(timeout=timeout)]
        except queue.Empty:
            return []
        while True:
            try:
                items.append(self.inbox.get_nowait())
            except queue.Empty:
                break
        for item in items:
            if isinstance(item, tuple):
                raise WorkerError(item[0], "raised", item[1])
        return items

    def act(self, i: int) -> None:
        self.outboxes[i].put(_ACT)

    def close(self, timeout: float = 3.0) -> None:
        for box in self.outboxes:
            box.put(_STOP)
        for t in self.threads:
            if t.is_alive():
                t.join(timeout)
        for env in self.envs:
            env.close()


# -- processes ----------------------------------------------------------------------------
def process_main(
    idx: int, create_env_fn: Portable, slots: tuple, conn: Any, filter_warnings: bool
) -> None:
    """Process target: load the env constructor, build the env, bind it to its slot row,
    serve steps. A failure to load or build is sent to the server as a traceback."""
    if filter_warnings:
        warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    env = None
    parent = mp.parent_process()

    def recv() -> bytes:
        while not conn.poll(_POLL):
            if parent is not None and not parent.is_alive():
                return _STOP
        return conn.recv_bytes()

    try:
        env = make_env(create_env_fn.load())
        _env_loop(env, _bind(env, idx, slots), conn.send_bytes, recv)
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass
    except BaseException:
        with contextlib.suppress(OSError):
            conn.send_bytes(_ERROR + traceback.format_exc().encode())
    finally:
        if env is not None:
            env.close()


class ProcessEnvPool:
    """One spawned process per env; ``slots`` must be in shared memory."""

    def __init__(
        self, create_env_fns: list[Any], slots: tuple, filter_warnings: bool = True
    ) -> None:
        ctx = mp.get_context("spawn")
        self.conns: list[Any] = []
        self.processes: list[Any] = []
        try:
            for i, fn in enumerate(create_env_fns):
                conn, child = ctx.Pipe()
                self.conns.append(conn)
                p = ctx.Process(
                    target=process_main,
                    args=(i, Portable(fn, "create_env_fn"), slots, child, filter_warnings),
                    name=f"rl-async-env-{i}",
                )
                try:
                    # pickles the env constructor: one that cannot cross raises here
                    start_process(p)
                finally:
                    child.close()
                self.processes.append(p)
        except BaseException:
            self.close()
            raise
        self._index = {c: i for i, c in enumerate(self.conns)}
        self._index.update({p.sentinel: i for i, p in enumerate(self.processes)})

    def start(self, timeout: float) -> None:
        """Nothing to start (the processes run); start-up is bounded by the first waits."""

    def wait(self, timeout: float) -> list[int]:
        ready = mpc.wait(list(self._index), timeout=timeout)
        out = []
        for obj in ready:
            i = self._index[obj]
            if obj is not self.conns[i]:
                continue
            try:
                msg = self.conns[i].recv_bytes()
            except (EOFError, OSError):
                raise WorkerError(i, f"died (exit code {self.processes[i].exitcode})") from None
            if msg[:1] == _ERROR:
                raise WorkerError(i, "raised", msg[1:].decode())
            out.append(i)
        if not out:
            for i, p in enumerate(self.processes):
                if p.sentinel in ready and not self.conns[i].poll():
                    raise WorkerError(i, f"died without a reply (exit code {p.exitcode})")
        return out

    def act(self, i: int) -> None:
        try:
            self.conns[i].send_bytes(_ACT)
        except (BrokenPipeError, OSError):
            raise WorkerError(
                i, f"cannot send the action (exit code {self.processes[i].exitcode})"
            ) from None

    def close(self, timeout: float = 5.0) -> None:
        """Ask every worker to stop, then terminate and kill the stragglers; bounded."""
        for conn, p in zip(self.conns, self.processes, strict=False):
            try:
                if p.is_alive():
                    conn.send_bytes(_STOP)
            except OSError:
                pass
        stop_processes(self.processes, timeout)
        for conn in self.conns:
            conn.close()
