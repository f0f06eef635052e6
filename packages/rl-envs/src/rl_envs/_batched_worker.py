"""The process side of ``ParallelEnv``: the worker loop and the pool that drives it.

Protocol (small pickled tuples ``(command, argument)`` over one duplex pipe per worker;
every bulk tensor lives in shared memory that the main process allocated):

- ``create_env_fn`` and its kwargs cross as :class:`~rl_envs.processes.Portable` (by
  reference, or by value when defined in ``__main__``, a lambda or a closure); the worker
  loads them and builds its env with ``create_env_fn(**kwargs)`` and answers
  ``("ok", meta)`` (batch size, device and specs) or ``("error", traceback)``: a factory
  that raises or cannot be loaded is reported with the worker's own exception;
- ``("bind", buffers)``: the shared ``root``/``next``/action/reset-mask TensorDicts; the
  worker binds its env to views of its row (``env.bind_buffers(root[i], next[i])``);
- ``("step", None)``: the action is already in the shared action buffer;
  ``env.fast_step`` writes the step into the shared ``next``/``root`` rows;
- ``("reset", partial)``: ``env.fast_reset(None)``, or with the worker's row of the
  shared reset mask when ``partial``;
- ``("seed", seed)``, ``("close", None)``.

Every command is answered ``("ok", payload)`` or ``("error", traceback)``. The main
process waits on the pipes *and* the process sentinels together (one ``select.poll``),
so a worker that dies is seen at once, and every wait has a deadline.

A worker's wait for its next command spins, then sleeps (:func:`wait_readable`): up to
``WORKER_SPIN_S`` of non-blocking polls, each followed by ``os.sched_yield()`` (so the
spinning worker gives its core to any runnable process, e.g. the main process), then a
blocking poll. A command that arrives while the worker spins costs no wake-up of a
sleeping process on an idle core, which on a VM is tens to hundreds of microseconds.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import sys
import time
import traceback
from multiprocessing import connection, parent_process
from multiprocessing.reduction import ForkingPickler
from typing import Any

import torch
from tensordict import TensorDictBase

from rl_envs.exceptions import WorkerError
from rl_envs.processes import Portable, start_process, stop_processes

__all__ = ["WorkerPool", "env_meta", "env_state", "load_env_state", "worker_main"]

PARENT_POLL_S = 1.0
"""How often an idle worker checks that the main process is still alive."""
CLOSE_TIMEOUT_S = 5.0
"""How long ``close()`` waits for the workers to exit before terminating them."""
STEP_MSG = pickle.dumps(("step", None))
"""The ``step`` message, pickled once."""
OK_MSG = pickle.dumps(("ok", None))
"""A worker's answer to a command that returns nothing, pickled once."""
WORKER_SPIN_S = 0.002
"""How long a worker polls without sleeping for its next command (covers the main
process's work between two steps: storing the step, a small policy forward)."""
MAIN_SPIN_S = 0.0
"""How long the main process polls without sleeping for the workers' answers. Zero: it
would spin while the workers compute, on a core a worker needs when there are no more
cores than workers (measured: slower, the more so the busier the machine). The answer
still lands on a core that is not idle, the answering worker's, now spinning."""
SPEC_NAMES = (
    "observation_spec",
    "state_spec",
    "full_action_spec",
    "full_reward_spec",
    "full_done_spec",
)


def env_state(env: Any) -> dict[str, Any]:
    """``env.state_dict()`` (e.g. a ``TransformedEnv``'s transforms), ``{}`` when it has none."""
    return env.state_dict() if hasattr(env, "state_dict") else {}


def load_env_state(env: Any, state: dict[str, Any]) -> None:
    """Restore :func:`env_state` into ``env``.

    Raises:
        ValueError: ``state`` is not empty and ``env`` has no ``load_state_dict``.
    """
    if hasattr(env, "load_state_dict"):
        env.load_state_dict(state)
    elif state:
        raise ValueError(
            f"state: {type(env).__name__} keeps no state, got one with keys {sorted(state)}"
        )


def env_meta(env: Any) -> dict[str, Any]:
    """What the batched env needs from a sub-env: batch size, device and specs."""
    meta = {name: getattr(env, name) for name in SPEC_NAMES}
    meta["batch_size"] = torch.Size(env.batch_size)
    meta["device"] = torch.device(env.device)
    return meta


# -- worker side ------------------------------------------------------------------------
class _Worker:
    """Serves one env in a worker process; one method per command."""

    def __init__(self, index: int, env: Any):
        self.index, self.env = index, env
        self.action: Any = None
        self.reset_mask: torch.Tensor | None = None

    def bind(self, buffers: tuple[TensorDictBase, ...]) -> None:
        root, nxt, action, reset_mask = buffers
        i = self.index
        self.env.bind_buffers(root[i], nxt[i])
        keys = list(action.keys(True, True))
        self.action = action.get(keys[0])[i] if len(keys) == 1 else action[i]
        self.reset_mask = reset_mask[i]

    def step(self, _: Any) -> None:
        self.env.fast_step(self.action)

    def reset(self, partial: bool) -> None:
        self.env.fast_reset(self.reset_mask.clone() if partial else None)

    def seed(self, seed: int | None) -> None:
        self.env.set_seed(seed)

    def state_dict(self, _: Any) -> dict[str, Any]:
        return env_state(self.env)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_env_state(self.env, state)

    def close(self, _: Any) -> None:
        self.env.close()

    def _fail(self, tb: str) -> None:
        raise RuntimeError(f"could not read the command:\n{tb}")


def wait_readable(poller: Any, spin_s: float, timeout_ms: int) -> list[tuple[int, int]]:
    """``poller.poll``, spinning first: non-blocking polls (yielding the core in between)
    for up to ``spin_s`` seconds, then one blocking poll of at most ``timeout_ms``."""
    events = poller.poll(0)
    if events:
        return events
    end = time.perf_counter() + spin_s
    yield_, clock, poll = os.sched_yield, time.perf_counter, poller.poll
    while clock() < end:
        yield_()
        events = poll(0)
        if events:
            return events
    return poll(timeout_ms)


def _next_command(conn: connection.Connection, poller: Any) -> tuple[str, Any] | None:
    """Wait for a command, checking every second that the main process is alive."""
    parent = parent_process()
    if not wait_readable(poller, WORKER_SPIN_S, int(PARENT_POLL_S * 1000)):
        while not poller.poll(int(PARENT_POLL_S * 1000)):
            if parent is not None and not parent.is_alive():
                return None
    try:
        raw = conn.recv_bytes()
    except (EOFError, OSError):
        return None
    if raw == STEP_MSG:  # the hot message: no unpickling
        return ("step", None)
    try:
        return pickle.loads(raw)
    except Exception:  # a message that cannot be unpickled here
        return ("_fail", traceback.format_exc())


def worker_main(
    index: int,
    conn: connection.Connection,
    create_env_fn: Portable,
    kwargs: Portable,
    num_threads: int,
) -> None:
    """Entry point of a ``ParallelEnv`` worker process (spawned).

    Ends with ``os._exit`` once the env and the pipe are closed: the interpreter's own
    teardown (seconds with torch loaded on a busy machine) would only delay ``close()``.
    So nothing here may need that teardown: every answer is pickled by value (no shared
    file descriptors, whose ``multiprocessing`` resource sharer leaves a ``pymp-*`` temp dir
    and socket behind a process that skips it).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the main process decides when we stop
    code = 0
    try:
        torch.set_num_threads(num_threads)
        _serve(index, conn, create_env_fn, kwargs)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _serve(
    index: int, conn: connection.Connection, create_env_fn: Portable, kwargs: Portable
) -> None:
    env = None
    try:
        env = create_env_fn.load()(**kwargs.load())
        # by value, like every answer: torch's file-descriptor sharing would start
        # multiprocessing's resource sharer here, whose socket and temp dir only the
        # interpreter's exit removes, which ``os._exit`` skips
        conn.send_bytes(pickle.dumps(("ok", env_meta(env))))
    except Exception:
        conn.send(("error", traceback.format_exc()))
        if env is not None:
            env.close()
        conn.close()
        return
    worker = _Worker(index, env)
    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    try:
        while (msg := _next_command(conn, poller)) is not None:
            cmd, arg = msg
            try:
                result = getattr(worker, cmd)(arg)
            except Exception:
                conn.send(("error", traceback.format_exc()))
                continue
            # a payload by value (plain pickle: its tensors are copied, not shared)
            conn.send_bytes(OK_MSG if result is None else pickle.dumps(("ok", result)))
            if cmd == "close":
                return
    finally:
        if not env.is_closed:
            env.close()
        conn.close()


# -- main side --------------------------------------------------------------------------
class WorkerPool:
    """The worker processes and their pipes, with bounded, liveness-checked waits.

    Holds no reference to the env, so a ``weakref.finalize`` on the env can call
    :meth:`shutdown`.
    """

    def __init__(self, owner: str, timeout: float):
        self.owner, self.timeout = owner, timeout
        self.procs: list[Any] = []
        self.conns: list[connection.Connection] = []
        self._poller = select.poll()  # built once: every pipe and sentinel, reused per wait
        self._fd_owner: dict[int, tuple[int, bool]] = {}  # fd -> (worker, is it the sentinel)

    def start(
        self, ctx: Any, create_env_fns: list[Any], kwargs: list[dict], num_threads: int
    ) -> None:
        """Start one worker per ``(create_env_fns[i], kwargs[i])``."""
        for i, (create_env_fn, kw) in enumerate(zip(create_env_fns, kwargs, strict=True)):
            parent_end, child_end = ctx.Pipe(duplex=True)
            proc = ctx.Process(
                target=worker_main,
                args=(i, child_end, Portable(create_env_fn, "create_env_fn"),
                      Portable(kw, "create_env_kwargs"), num_threads),
                name=f"{self.owner}-worker-{i}",
                daemon=False,  # a daemon could not start processes (e.g. gymnasium's async env)
            )
            try:
                start_process(proc)
            except BaseException:
                parent_end.close()
                raise
            finally:
                child_end.close()
            self.procs.append(proc)
            self.conns.append(parent_end)
            for fd, is_sentinel in ((parent_end.fileno(), False), (proc.sentinel, True)):
                self._poller.register(fd, select.POLLIN)
                self._fd_owner[fd] = (i, is_sentinel)

    def send(self, indices: list[int], payload: bytes, what: str) -> None:
        """Send a pre-pickled message; a broken pipe means the worker is gone."""
        for i in indices:
            try:
                self.conns[i].send_bytes(payload)
            except OSError:
                raise self._died(i, what) from None

    def call(self, indices: list[int], cmd: str, args: list[Any] | None = None) -> list[Any]:
        """Send ``(cmd, args[k])`` to worker ``indices[k]`` (``None`` when no ``args``), then
        wait for every answer. Each message is pickled for its worker: a shared tensor's
        file descriptor can be fetched only once."""
        for k, i in enumerate(indices):
            arg = None if args is None else args[k]
            self.send([i], bytes(ForkingPickler.dumps((cmd, arg))), cmd)
        return self.gather(indices, cmd)

    def gather(self, indices: list[int], what: str) -> list[Any]:
        """Wait for one answer from each worker of ``indices``, in that order.

        One ``poll`` over every worker's pipe and process sentinel: an answer, an error
        or a death (of any worker) wakes it at once.

        Raises:
            WorkerError: a worker answered with its traceback, died, or did not answer
                within ``timeout`` seconds.
        """
        pending = set(indices)
        answers: dict[int, Any] = {}
        deadline = time.monotonic() + self.timeout
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                late = sorted(pending)
                raise WorkerError(
                    late[0],
                    f"did not answer {what!r} within {self.timeout:g} s (workers still pending: "
                    f"{late}); raise `timeout` if the env is that slow",
                    owner=self.owner,
                )
            dead = []
            for fd, _ in wait_readable(self._poller, MAIN_SPIN_S, int(remaining * 1000) + 1):
                i, is_sentinel = self._fd_owner[fd]
                if is_sentinel:
                    dead.append(i)
                elif i in pending:
                    pending.discard(i)
                    answers[i] = self._receive(i, what)
                else:  # nothing else is ever in flight: this is an EOF or an error
                    self._receive(i, what)
            for i in dead:
                if i not in answers and not (i in pending and self.conns[i].poll(0)):
                    raise self._died(i, what)
        return [answers[i] for i in indices]

    def _receive(self, i: int, what: str) -> Any:
        try:
            raw = self.conns[i].recv_bytes()
        except (EOFError, OSError):
            raise self._died(i, what) from None
        if raw == OK_MSG:  # the hot answer: no unpickling
            return None
        status, payload = ForkingPickler.loads(raw)
        if status == "error":
            raise WorkerError(i, f"raised during {what!r}", payload, owner=self.owner)
        return payload

    def _died(self, i: int, what: str) -> WorkerError:
        proc = self.procs[i]
        proc.join(CLOSE_TIMEOUT_S)
        code = proc.exitcode
        how = f"exit code {code}"
        if code is None:
            how = "its pipe closed; the process is still exiting"
        elif code < 0:
            how = f"killed by signal {signal.Signals(-code).name}"
        if what == "create_env_fn":
            how += "; it died before it could report an error: its stderr shows why"
        return WorkerError(i, f"died (pid {proc.pid}) during {what!r} ({how})", owner=self.owner)

    def shutdown(self) -> None:
        """Ask every worker to close, then join, terminate and kill; bounded and idempotent."""
        _shutdown(self.procs, self.conns)
        self.procs, self.conns = [], []
        self._poller, self._fd_owner = select.poll(), {}

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]


def _shutdown(procs: list[Any], conns: list[connection.Connection]) -> None:
    close_msg = pickle.dumps(("close", None))
    for proc, conn in zip(procs, conns, strict=True):
        if proc.is_alive():
            with contextlib.suppress(OSError):
                conn.send_bytes(close_msg)
    stop_processes(procs, CLOSE_TIMEOUT_S)
    for proc, conn in zip(procs, conns, strict=True):
        conn.close()
        if proc.exitcode is not None:
            proc.close()
