"""TorchRL's ``torchrl._utils`` helpers that scripts import: ``timeit``, ``logger`` and
``get_available_device``, with TorchRL's names and call semantics.

``timeit`` keeps one process-wide registry (TorchRL's design, kept so that a migrated
script's ``timeit.todict()`` / ``timeit.print()`` calls work unchanged); :class:`Timing`
is the tree-shaped, state-free timer of this toolkit.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable
from functools import wraps
from typing import Any, ClassVar

from rl_profiling._torch import import_torch

__all__ = ["get_available_device", "logger", "timeit"]



class _StdoutHandler(logging.StreamHandler):
    """Writes to the ``sys.stdout`` of the moment (a redirect or a capture sees it)."""

    @property
    def stream(self) -> Any:  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


logger = logging.getLogger("rl")
"""The toolkit's script logger (TorchRL's ``torchrl._utils.logger``): INFO and above go to
stdout (``RL_LOGGING_LEVEL`` sets the level, as TorchRL reads it); it does not propagate to
the root logger. Library modules log under their own module names, not here."""
if not logger.handlers:
    _level = os.environ.get("RL_LOGGING_LEVEL", "INFO").upper()
    _handler = _StdoutHandler()
    _handler.setFormatter(logging.Formatter("%(asctime)s [%(name)s][%(levelname)s] %(message)s"))
    _handler.setLevel(_level)
    logger.addHandler(_handler)
    logger.setLevel(_level)
    logger.propagate = False


def _sync(flag: bool) -> None:
    if flag:
        torch = import_torch()
        if torch is not None and torch.cuda.is_available():
            torch.cuda.synchronize()


class timeit:  # noqa: N801 (TorchRL's name)
    """A named timer shared by the whole process, as TorchRL's ``timeit``.

    Use it as a context manager or a decorator; each block adds its duration to the
    name's entry: ``[mean seconds per call, total seconds, calls]``, read back with
    :meth:`todict`, logged with :meth:`print`, zeroed with :meth:`erase` / :meth:`reset`.

    Args:
        name: the entry's name.
        sync: wait for CUDA (when torch and a GPU are available) before each timestamp,
            so GPU work lands in the block that launched it.

    Examples:
        >>> from rl_profiling import timeit
        >>> timeit.reset()
        >>> with timeit("collect"):
        ...     _ = sum(range(1000))
        >>> @timeit("train")
        ... def train():
        ...     return 1
        >>> train(), train()
        (1, 1)
        >>> sorted(timeit.todict(prefix="time"))
        ['time/collect', 'time/train']
        >>> timeit.todict(percall=False)["train"] >= 0, timeit._REG["train"][2]
        (True, 2)
        >>> timer = timeit("long").start()
        >>> timer.elapsed() >= 0
        True
        >>> timeit.erase()
        >>> timeit.todict()["collect"]
        0.0
    """

    _REG: ClassVar[dict[str, list[float]]] = {}
    _MARKS: ClassVar[dict[str, float]] = {}
    _printevery_count: ClassVar[int] = 0

    def __init__(self, name: str, *, sync: bool = False) -> None:
        if not isinstance(name, str):
            raise TypeError(f"timeit: name must be a str, got {type(name).__name__}")
        self.name = name
        self._sync = sync
        self.t0 = 0.0

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return timed

    def start(self) -> timeit:
        """Start the clock without a ``with`` block; returns ``self``."""
        _sync(self._sync)
        self.t0 = time.perf_counter()
        return self

    def __enter__(self) -> timeit:
        return self.start()

    def elapsed(self) -> float:
        """Seconds since :meth:`start` (or the ``with`` block's entry)."""
        _sync(self._sync)
        return time.perf_counter() - self.t0

    def __exit__(self, *exc: object) -> None:
        self._record(self.name, self.elapsed())

    @classmethod
    def _record(cls, name: str, seconds: float) -> None:
        entry = cls._REG.setdefault(name, [0.0, 0.0, 0])
        calls = entry[2] + 1
        entry[0] += (seconds - entry[0]) / calls
        entry[1] += seconds
        entry[2] = calls

    @classmethod
    def mark_start(cls, name: str) -> None:
        """Start a named event ended by :meth:`mark_end` (no object to carry)."""
        cls._MARKS[name] = time.perf_counter()

    @classmethod
    def mark_end(cls, name: str) -> None:
        """End the event :meth:`mark_start` began and record it.

        Raises:
            KeyError: no ``mark_start(name)`` is pending.
        """
        if name not in cls._MARKS:
            raise KeyError(f"timeit.mark_end: no mark_start({name!r}) is pending")
        cls._record(name, time.perf_counter() - cls._MARKS.pop(name))

    @classmethod
    def todict(cls, percall: bool = True, prefix: str | None = None) -> dict[str, float]:
        """Each name's mean seconds per call (``percall``) or total seconds, keys
        ``f"{prefix}/{name}"`` when a prefix is given."""
        col = 0 if percall else 1
        return {(f"{prefix}/{k}" if prefix else k): v[col] for k, v in cls._REG.items()}

    @classmethod
    def print(cls, prefix: str | None = None) -> str:  # noqa: A003 (TorchRL's name)
        """Log one line per name (sorted) through :data:`logger`; returns the lines."""
        lines = []
        for name in sorted(cls._REG):
            mean, total, _ = cls._REG[name]
            line = (f"{name} took {mean * 1000:4.4f} msec "
                    f"(total = {total: 4.4f} sec since last reset).")
            lines.append(f"{prefix} -- {line}" if prefix else line)
            logger.info(lines[-1])
        return "\n".join(lines)

    @classmethod
    def printevery(cls, num_prints: int, total_count: int, *, prefix: str | None = None,
                   erase: bool = False) -> None:
        """Call :meth:`print` ``num_prints`` times over ``total_count`` calls of this."""
        if cls._printevery_count % max(1, total_count // num_prints) == 0:
            cls.print(prefix=prefix)
            if erase:
                cls.erase()
        cls._printevery_count += 1

    @classmethod
    def erase(cls) -> None:
        """Zero every entry (the names stay)."""
        for name in cls._REG:
            cls._REG[name] = [0.0, 0.0, 0]

    @classmethod
    def reset(cls) -> None:
        """Same as :meth:`erase`, as TorchRL's."""
        cls.erase()


def get_available_device(return_str: bool = False) -> Any:
    """The first accelerator torch sees (CUDA, then NPU, then MPS), else the CPU, as
    TorchRL's ``get_available_device``.

    Args:
        return_str: return ``"cuda:0"`` / ``"npu:0"`` / ``"mps:0"`` / ``"cpu"`` instead
            of a ``torch.device``.

    Returns:
        A ``torch.device`` (or its string).

    Raises:
        ImportError: torch is not installed.

    Examples:
        >>> import torch
        >>> device = get_available_device()
        >>> device.type == ("cuda" if torch.cuda.is_available() else device.type)
        True
        >>> isinstance(get_available_device(return_str=True), str)
        True
    """
    torch = import_torch()
    if torch is None:
        raise ImportError("get_available_device needs torch, which is not installed")
    if torch.cuda.is_available():
        device = "cuda:0"
    elif hasattr(torch, "npu") and torch.npu.is_available():
        device = "npu:0"
    elif torch.backends.mps.is_available():
        device = "mps:0"
    else:
        device = "cpu"
    return device if return_str else torch.device(device)
