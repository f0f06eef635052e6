"""Named ranges: the ``profiled`` decorator and the ``record`` context manager.

``RL_PROFILING=1`` is read once, at import. When it is unset, ``profiled(name)(f)``
returns ``f`` itself and ``record(name)`` returns one shared ``nullcontext``: profiling
costs nothing when off. When it is set ("armed"), ranges can be switched on and off at
runtime with :func:`set_profiling_enabled`; an enabled range goes to
``torch.profiler.record_function`` when torch is importable and a profiler is running
(else it is skipped: building one costs microseconds and nobody would record it), or,
without torch, to rl-profiling's own recorder while it records
(:mod:`rl_profiling._recorder`).

NVTX: with ``RL_PROFILING_NVTX=1`` (read when the first range opens) or :func:`set_nvtx_enabled`, an
enabled range is also pushed as an NVTX range (``torch.cuda.nvtx``) for Nsight Systems,
whether or not a torch profiler runs. It needs an armed process and CUDA; without CUDA
the switch stays off (inert). The un-armed and disabled paths do not change.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

from rl_profiling._recorder import RECORDER
from rl_profiling._torch import import_torch

__all__ = [
    "ENV_VAR",
    "ARMED",
    "NVTX_ENV_VAR",
    "nvtx_enabled",
    "profiled",
    "profiled_methods",
    "profiling_enabled",
    "profiling_env",
    "record",
    "set_nvtx_enabled",
    "set_profiling_enabled",
]

logger = logging.getLogger(__name__)

ENV_VAR = "RL_PROFILING"
_TRUE = {"1", "true", "yes", "on"}

TORCHRL_ENV_VAR = "TORCHRL_PROFILING"


def _armed_at_import() -> bool:
    """Read ``RL_PROFILING``; without it, honour TorchRL's ``TORCHRL_PROFILING`` and say so.

    The alias arms this process and exports ``RL_PROFILING=1`` so that child processes
    come up armed under our name (and do not repeat the warning).
    """
    ours = os.environ.get(ENV_VAR, "").strip()
    if ours:
        return ours.lower() in _TRUE
    alias = os.environ.get(TORCHRL_ENV_VAR, "").strip()
    if alias.lower() not in _TRUE:
        return False
    logger.warning(
        "%s=%s: profiling ranges armed as with %s=1, which is this toolkit's variable; "
        "set %s=1 instead to silence this warning (see docs/profiling.md)",
        TORCHRL_ENV_VAR, alias, ENV_VAR, ENV_VAR,
    )
    os.environ[ENV_VAR] = "1"
    return True


ARMED: bool = _armed_at_import()
"""Whether ``RL_PROFILING`` (or TorchRL's ``TORCHRL_PROFILING``) was set when
``rl_profiling`` was imported."""
NVTX_ENV_VAR = "RL_PROFILING_NVTX"


class _NullRange(contextlib.nullcontext):  # type: ignore[type-arg]
    """The one shared no-op range: a ``nullcontext`` whose ``__exit__`` takes no ``*args``
    (building that tuple is a measurable part of a ~100 ns ``with`` block)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None


_NULL = _NullRange()
_state = {"enabled": ARMED}
_backend: dict[str, Any] = {}
_nvtx: dict[str, Any] = {"push": None, "pop": None}


class _NvtxRange:
    """An NVTX push/pop around another range (a ``record_function`` or the null one)."""

    __slots__ = ("inner", "name")

    def __init__(self, name: str, inner: Any) -> None:
        self.name, self.inner = name, inner

    def __enter__(self) -> None:
        _nvtx["push"](self.name)
        self.inner.__enter__()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.inner.__exit__(exc_type, exc, tb)
        _nvtx["pop"]()


def nvtx_enabled() -> bool:
    """Return whether enabled ranges are also emitted as NVTX ranges in this process."""
    return _nvtx["push"] is not None


def set_nvtx_enabled(flag: bool) -> bool:
    """Also emit every enabled range as an NVTX range (for Nsight Systems), or stop.

    Args:
        flag: ``True`` to push NVTX ranges, ``False`` to stop.

    Returns:
        Whether NVTX ranges are on now: ``False`` (a logged no-op) when ``flag`` is
        ``True`` but torch with CUDA is not available. Ranges exist only in an armed
        process (``RL_PROFILING=1``); the environment variable ``RL_PROFILING_NVTX=1``
        switches this on when the first range opens.

    Examples:
        >>> from rl_profiling import set_nvtx_enabled
        >>> set_nvtx_enabled(False)
        False
    """
    if not flag:
        _nvtx["push"] = _nvtx["pop"] = None
        return False
    torch = import_torch()
    if torch is None or not torch.cuda.is_available():
        logger.info("set_nvtx_enabled(True): inert, torch with CUDA is not available")
        return False
    _set_nvtx_backend(torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop)
    return True


def _set_nvtx_backend(push: Callable[[str], Any], pop: Callable[[], Any]) -> None:
    """Install the NVTX push/pop functions (``torch.cuda.nvtx`` or a stand-in in tests)."""
    _nvtx["push"], _nvtx["pop"] = push, pop

F = TypeVar("F", bound=Callable[..., Any])


def profiling_enabled() -> bool:
    """Return whether named ranges are emitted right now in this process."""
    return _state["enabled"]


def set_profiling_enabled(flag: bool) -> None:
    """Switch named ranges on or off at runtime, in this process only.

    Args:
        flag: ``True`` to emit ranges, ``False`` to stop.

    Enabling has no effect (and warns) unless ``RL_PROFILING=1`` was set before
    ``rl_profiling`` was imported: un-armed decorators returned the plain function.
    """
    flag = bool(flag)
    if flag and not ARMED:
        warnings.warn(
            f"set_profiling_enabled(True) does nothing: {ENV_VAR}=1 was not set when "
            "rl_profiling was imported, so no range was installed. Set it in the "
            "environment before starting Python.",
            RuntimeWarning,
            stacklevel=2,
        )
        return
    _state["enabled"] = flag


def profiling_env() -> dict[str, str]:
    """Environment variables that arm a child process the way this one is armed.

    Pass them to a subprocess environment or to a Ray actor's
    ``runtime_env["env_vars"]``. Empty when this process is not armed or is disabled.
    """
    if ARMED and _state["enabled"]:
        return {ENV_VAR: "1"}
    return {}


def _compiling() -> bool:
    fn = _backend.get("compiling")
    return bool(fn is not None and fn())


def _open_range(name: str) -> Any:
    """Return a context manager for one enabled range (the shared null one if none is due)."""
    if "record_function" not in _backend:
        _load_backend()
    if _compiling():
        return _NULL
    rf = _backend["record_function"]
    if rf is not None:
        # Outside a running profiler a record_function would be built and thrown away
        # (microseconds): one C call tells whether anyone listens.
        listening = _backend["profiler_enabled"]
        inner = rf(name) if listening is None or listening() else _NULL
        return inner if _nvtx["push"] is None else _NvtxRange(name, inner)
    # Like torch.profiler, the stdlib recorder keeps ranges only while a recording is open,
    # so an armed process without torch does not grow a list of events forever.
    return RECORDER.range(name) if RECORDER.recording else _NULL


def _load_backend() -> None:
    torch = import_torch()
    if os.environ.get(NVTX_ENV_VAR, "").strip().lower() in _TRUE:
        set_nvtx_enabled(
            True
        )  # on the first range, so that importing rl_profiling never imports torch
    if torch is None:
        _backend["record_function"] = None
        _backend["compiling"] = None
        return
    _backend["record_function"] = torch.profiler.record_function
    _backend["profiler_enabled"] = _listening(torch)
    compiler = getattr(torch, "compiler", None)
    _backend["compiling"] = getattr(compiler, "is_compiling", None)


def _listening(torch: Any) -> Callable[[], bool] | None:
    """Whether a torch profiler runs: torch's process-wide flag (a profiler started in
    another thread records this one's ranges too when it profiles all threads), else the
    calling thread's own state."""
    this_thread = getattr(torch.autograd, "_profiler_enabled", None)
    module = getattr(torch.autograd, "profiler", None)
    if module is None or not hasattr(module, "_is_profiler_enabled"):
        return this_thread

    def listening() -> bool:
        return module._is_profiler_enabled or (this_thread is not None and this_thread())

    return listening


def record(name: str) -> contextlib.AbstractContextManager[Any]:
    """Open a named range for a ``with`` block.

    Args:
        name: the range name, ``Class.method`` by convention.

    Returns:
        The one shared ``nullcontext`` when profiling is off (no allocation), else a
        ``torch.profiler.record_function`` range while a torch profiler runs (the shared
        ``nullcontext`` when none does); without torch, a range of the stdlib
        recorder while it records (``RECORDER.start()``) and the shared ``nullcontext``
        otherwise.

    Examples:
        >>> from rl_profiling import record
        >>> with record("MyLoop.step"):
        ...     x = 1 + 1
    """
    if not _state["enabled"]:
        return _NULL
    return _open_range(name)


if not ARMED:  # never enabled in this process: skip even the flag check

    def _record_off(name: str) -> contextlib.AbstractContextManager[Any]:
        return _NULL

    _record_off.__name__ = _record_off.__qualname__ = "record"
    _record_off.__doc__ = record.__doc__
    record = _record_off  # noqa: F811


def profiled(name: str) -> Callable[[F], F]:
    """Decorate a function so each call is a named range.

    Args:
        name: the range name, ``Class.method`` by convention (e.g. ``"EnvBase.step"``).

    Returns:
        A decorator. When ``RL_PROFILING`` was not set at import it returns the very
        same function object, so an un-armed process pays nothing.

    Examples:
        >>> from rl_profiling import profiled
        >>> def f(x):
        ...     return x + 1
        >>> g = profiled("demo.f")(f)
        >>> g(1)
        2
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"profiled(name): expected a non-empty str, got {name!r}")

    def decorate(fn: F) -> F:
        if not ARMED:
            return fn

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if not _state["enabled"]:
                return fn(*args, **kwargs)
            with _open_range(name):
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return decorate



_PLAIN = "_rl_profiled_plain"  # on a wrapper: the plain function it wraps


def profiled_methods(cls: type, *methods: str) -> type:
    """Wrap methods of ``cls`` in ranges named after ``cls``: ``"<cls.__name__>.<method>"``.

    Call it from a base class's ``__init_subclass__`` so that every subclass, a user's
    included, gets ranges with its own name (``ClipPPOLoss.forward``, not the base's).
    An inherited method is wrapped anew from its plain function, so ranges do not nest
    once per level of inheritance; an override that calls ``super()`` nests the wrapped
    parent's range under its own. Not armed, it changes nothing.

    Args:
        cls: the class whose methods to wrap (changed in place).
        *methods: method names; one ``cls`` does not have is skipped.

    Returns:
        ``cls``.

    Examples:
        >>> from rl_profiling import profiled_methods
        >>> class Base:
        ...     def __init_subclass__(cls, **kwargs):
        ...         super().__init_subclass__(**kwargs)
        ...         profiled_methods(cls, "forward")
        ...     def forward(self, x):
        ...         return x + 1
        >>> class Child(Base):
        ...     pass
        >>> Child().forward(1)
        2
    """
    if not ARMED:
        return cls
    for method in methods:
        fn = getattr(cls, method, None)
        if fn is None:
            continue
        plain = getattr(fn, _PLAIN, fn)
        wrapper = profiled(f"{cls.__name__}.{method}")(plain)
        setattr(wrapper, _PLAIN, plain)
        setattr(cls, method, wrapper)
    return cls
