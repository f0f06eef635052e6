"""Worker processes: sending user code to them, and stopping them.

Public because rl-collectors' process-based components use it too (one implementation of
each; ``docs/internals/multiprocess.md`` describes the protocol around it).

Sending: by reference where a fresh process can load it, by value (cloudpickle) where it
cannot.

A spawned worker, a torch.distributed rank or an RPC worker starts a fresh interpreter
and unpickles what it was sent. Plain pickle writes a function or class as a reference
(``module.qualname``) that the worker imports again; that fails for what users define in a
notebook cell, in ``python -c``, on stdin or under ``if __name__ == "__main__":`` (the
worker's ``__main__`` is not the trainer's), and for lambdas and closures. This module
decides per object:

- **by reference** (plain pickle; torch's shared-memory tensors when the bytes cross at a
  spawn) when every function and class it reaches lives in an importable module;
- **by value** (cloudpickle, a dependency of rl-envs) when it reaches anything defined in
  ``__main__``, a lambda or a local function, a module a fresh process would not find on
  ``sys.path``, or when plain pickle refuses it. Tensors are
  then copied, not shared.

:class:`Portable` wraps one argument of a process target: the choice and the pickling are
made when the process starts, and the worker unpickles with :meth:`Portable.load` *inside*
its own error handling, so a failure to load reaches the trainer as the worker's exception
and traceback instead of a dead process. :func:`dumps` / :func:`loads` do the same for
bytes sent over a socket (torch.distributed, RPC). :func:`error_summary` gives the one-line
``Type: message`` of a worker's traceback for the trainer's error.
:func:`env_constructors` checks what each worker is sent to build its env: one
constructor per worker.

Starting and stopping: :func:`start_process` starts a spawn-context process from any
``__main__`` (stdin included); :func:`stop_processes` is the one join -> terminate -> kill
sequence, bounded, that every component runs after asking its workers to close.
"""

from __future__ import annotations

import contextlib
import io
import logging
import multiprocessing
import os
import pickle
import sys
import threading
import time
import types
from multiprocessing.reduction import ForkingPickler
from typing import Any

import cloudpickle

__all__ = [
    "Portable",
    "dumps",
    "env_constructors",
    "error_summary",
    "loads",
    "start_process",
    "stop_processes",
]

logger = logging.getLogger(__name__)

BY_REFERENCE, BY_VALUE = b"R", b"V"
_MAIN_MODULES = ("__main__", "__mp_main__")
_HINT = (
    "Objects such as open files, locks, sockets, generators or a live env cannot cross a "
    "process boundary: build them inside the worker (in create_env_fn, or lazily in the "
    "policy), or pass a function that builds them"
)


def _needs_value(obj: Any) -> bool:
    """Whether a function or class cannot be imported again by a fresh process."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", "")
    if module is None or "<lambda>" in qualname or "<locals>" in qualname:
        return True
    return not _importable(module)


_IMPORTABLE: dict[tuple[str, tuple[str, ...]], bool] = {}


def _importable(module: str) -> bool:
    """Whether a fresh process (same ``sys.path``) finds ``module``'s top-level package.

    Not ``__main__``; not a module imported from a path that is not on ``sys.path`` (a
    test file under pytest's importlib mode, a file run with ``runpy``). Asks the import
    system's finders directly: ``importlib.util.find_spec`` would answer from
    ``sys.modules``. Cached per package and ``sys.path``.
    """
    top = module.partition(".")[0]
    if top in _MAIN_MODULES:
        return False
    key = (top, tuple(sys.path))
    found = _IMPORTABLE.get(key)
    if found is None:
        spec = getattr(sys.modules.get(top), "__spec__", None)
        found = top in sys.builtin_module_names or (
            spec is not None and spec.origin in ("built-in", "frozen")
        )
        for finder in sys.meta_path:
            if found:
                break
            with contextlib.suppress(Exception):
                found = getattr(finder, "find_spec", lambda *_: None)(top, None) is not None
        _IMPORTABLE[key] = found
    return found


def _reference_pickler(base: type) -> type:
    class ReferencePickler(base):  # type: ignore[misc, valid-type]
        """Plain pickle that records what a fresh process could not import (and writes a
        stand-in for it, so that the scan goes on to find every such module)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.needs_value = False
            self.modules: set[str] = set()

        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, (types.FunctionType, type)) and _needs_value(obj):
                self.needs_value = True
                module = getattr(obj, "__module__", None)
                if module in sys.modules and module not in _MAIN_MODULES:
                    self.modules.add(module)
                return int, ()
            return NotImplemented

    return ReferencePickler


_SHARED_PICKLER = _reference_pickler(ForkingPickler)
_COPY_PICKLER = _reference_pickler(pickle.Pickler)
_BY_VALUE_LOCK = threading.Lock()


def _cloudpickle_dumps(obj: Any, modules: set[str]) -> bytes:
    """cloudpickle, with ``modules`` (imported here, not importable there) by value too:
    cloudpickle itself sends by value only ``__main__`` and what ``sys.modules`` lacks."""
    with _BY_VALUE_LOCK:
        registered = []
        try:
            for name in sorted(modules):
                if name not in cloudpickle.list_registry_pickle_by_value():
                    cloudpickle.register_pickle_by_value(sys.modules[name])
                    registered.append(name)
            return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        finally:
            for name in registered:
                cloudpickle.unregister_pickle_by_value(sys.modules[name])


def dumps(obj: Any, what: str, shared_memory: bool = False) -> bytes:
    """Pickle ``obj`` for another process: by reference when that process can import
    everything it reaches, else by value.

    Args:
        obj: what to send (an env factory, a policy, a dict of options, ...).
        what: the argument's name, for the error message (``"create_env_fn"``).
        shared_memory: pickle tensors by reference to shared memory (torch's
            ``ForkingPickler`` reductions; only valid while a process is being spawned, or
            with torch's file-descriptor sharing) instead of copying them.

    Returns:
        Bytes for :func:`loads`.

    Raises:
        pickle.PicklingError: neither plain pickle nor cloudpickle can pickle ``obj``; the
            message names ``what`` and both reasons.
    """
    buffer = io.BytesIO()
    scan = (_SHARED_PICKLER if shared_memory else _COPY_PICKLER)(buffer, pickle.HIGHEST_PROTOCOL)
    reference_error = None
    try:
        scan.dump(obj)
        if not scan.needs_value:
            return BY_REFERENCE + buffer.getvalue()
    except Exception as err:  # plain pickle refused it: try by value before giving up
        reference_error = err
    try:
        return BY_VALUE + _cloudpickle_dumps(obj, scan.modules)
    except Exception as err:
        reasons = f"by value (cloudpickle): {type(err).__name__}: {err}"
        if reference_error is not None:
            reasons = (
                f"by reference: {type(reference_error).__name__}: {reference_error}; " + reasons
            )
        raise pickle.PicklingError(
            f"{what}: cannot be sent to a worker process; received {_short_repr(obj)}, "
            f"which cannot be pickled ({reasons}). {_HINT}."
        ) from err


def loads(data: bytes, what: str = "the argument") -> Any:
    """Unpickle what :func:`dumps` wrote. A failure carries a note on what to do."""
    how, payload = data[:1], data[1:]
    try:
        return pickle.loads(payload)
    except Exception as err:
        if how == BY_REFERENCE:
            note = (
                f"while loading {what} in this worker process: it was sent by reference and this "
                "process could not import it again; make its module importable here (installed, "
                "or on sys.path before the worker starts), or define it in __main__ (a notebook "
                "cell, the script) so that it is sent by value"
            )
        else:
            note = (
                f"while loading {what} in this worker process (sent by value with cloudpickle): "
                "a module it uses is missing here, or the worker runs another Python or package "
                "version than the trainer"
            )
        if hasattr(err, "add_note"):
            err.add_note(note)
        raise


class Portable:
    """One argument of a process target, sent by reference or by value at spawn time.

    Pickling it (when the process starts) calls :func:`dumps` with torch's shared-memory
    reductions; the worker calls :meth:`load` inside its own error handling. In the
    process that made it, :meth:`load` returns the object itself.

    Args:
        obj: the object to send.
        what: its name, for errors (``"create_env_fn"``, ``"policy"``).

    Examples:
        >>> import pickle
        >>> fn = Portable(lambda: 3, "create_env_fn")
        >>> pickle.loads(pickle.dumps(fn)).load()()
        3
    """

    __slots__ = ("_data", "_obj", "what")

    def __init__(self, obj: Any, what: str) -> None:
        self._obj, self._data, self.what = obj, None, what

    def __reduce__(self) -> tuple[Any, tuple[str, bytes]]:
        data = (
            self._data
            if self._data is not None
            else dumps(self._obj, self.what, shared_memory=True)
        )
        return _received, (self.what, data)

    def load(self) -> Any:
        """The object: unpickled on first use in the worker, as given in the trainer."""
        if self._data is not None:
            self._obj, self._data = loads(self._data, self.what), None
        return self._obj

    def __repr__(self) -> str:
        state = "to load" if self._data is not None else _short_repr(self._obj)
        return f"Portable({self.what}: {state})"


def _received(what: str, data: bytes) -> Portable:
    portable = Portable(None, what)
    portable._data = data
    return portable


def error_summary(remote_traceback: str | None) -> str:
    """The ``Type: message`` line of a formatted traceback (its last unindented lines
    before any note), or ``""``."""
    if not remote_traceback:
        return ""
    lines = remote_traceback.rstrip().splitlines()
    last_frame = max((i for i, line in enumerate(lines) if line.startswith("  ")), default=-1)
    tail = lines[last_frame + 1:]
    return tail[0].strip() if tail else lines[-1].strip()


def env_constructors(create_env_fn: Any, count: Any, count_name: str = "num_workers") -> list[Any]:
    """One env constructor per worker: ``create_env_fn`` repeated, or its list as given.

    Args:
        create_env_fn: a callable returning an env, or a list (or tuple) of ``count`` of
            them.
        count: the number of workers.
        count_name: the argument ``count`` was given as, named in the errors.

    Returns:
        ``count`` callables.

    Raises:
        ValueError: ``count`` is not a positive int, or the list has another length.
        TypeError: a constructor is not callable.

    Examples:
        >>> env_constructors(dict, 2) == [dict, dict]
        True
        >>> env_constructors((dict, list), 2, "num_envs") == [dict, list]
        True
    """
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"{count_name}: expected a positive int, received {count!r}")
    fns = (
        list(create_env_fn) if isinstance(create_env_fn, (list, tuple)) else [create_env_fn] * count
    )
    if len(fns) != count:
        raise ValueError(
            f"create_env_fn: expected one callable or a list of {count_name}={count} "
            f"callables (one per worker), received a list of {len(fns)}"
        )
    for fn in fns:
        if not callable(fn):
            raise TypeError(
                f"create_env_fn: expected a callable returning an EnvBase (or a list of them), "
                f"received {type(fn).__name__}"
            )
    return fns


def _short_repr(obj: Any, limit: int = 120) -> str:
    try:
        text = repr(obj)
    except Exception:
        text = f"<{type(obj).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def start_process(process: Any) -> None:
    """``process.start()``, also when ``__main__`` was read from stdin.

    A spawned child first runs the parent's main file again when ``__main__`` has a
    ``__file__``; for ``python -`` that is ``"<stdin>"``, which the child cannot open, and
    it dies before running its target. Our workers never need the parent's main module
    (what it defines is sent by value), so a ``__file__`` that names no file is hidden
    while the process starts, then put back.

    Starting a spawned process also makes ``multiprocessing`` fix the program's start
    method to the platform's default (``"fork"`` on Linux); when the program had set none,
    that is undone, so code that follows the program's choice (``ParallelEnv``, TorchRL's
    rule) still finds none.
    """
    chosen = multiprocessing.get_start_method(allow_none=True)
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    hide = path is not None and not os.path.exists(path)
    if hide:
        del main.__file__
    try:
        process.start()
    finally:
        if hide:
            main.__file__ = path
        if chosen is None:
            multiprocessing.set_start_method(None, force=True)


def stop_processes(processes: list[Any], timeout: float = 5.0) -> None:
    """Join ``processes``, then terminate, then kill those still alive; bounded.

    The caller asks its workers to close first (its own message); this waits up to
    ``timeout`` seconds in all for them to exit, then sends SIGTERM and waits up to
    ``timeout`` again, then SIGKILL and waits up to ``timeout``. Each escalation is logged
    as a warning naming the process. Idempotent; every process must have been started.
    Works for ``multiprocessing.Process`` and anything with ``join``, ``is_alive``,
    ``terminate``, ``kill`` and ``name``.
    """
    deadline = time.monotonic() + timeout
    for proc in processes:
        proc.join(max(0.0, deadline - time.monotonic()))
    for stop in ("terminate", "kill"):
        alive = [p for p in processes if p.is_alive()]
        for proc in alive:
            logger.warning("%s did not exit after close; calling %s()", proc.name, stop)
            getattr(proc, stop)()
        for proc in alive:
            proc.join(timeout)
