"""``Timing``: a tree of wall-clock timers built by nested ``with`` blocks.

Each ``with timing.add_time("x"):`` opened inside another one nests its key under the
outer key, so a training loop's structure becomes the report's structure::

    Timing:
      collect: 0.8123
        env: 0.6011, policy: 0.1650
      train: 1.2040
        loss: 0.7001, backward: 0.3820, optim: 0.0910

Clock: ``time.perf_counter``; with ``cuda_sync=True`` it first waits for the GPU
(``torch.cuda.synchronize()``, when torch and CUDA are available) so GPU work lands in
the block that launched it. A ``Timing`` holds no global state and pickles, so a worker
can send its own back to be combined with :meth:`Timing.merge`.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from rl_profiling._torch import import_torch

__all__ = ["Timing"]

_ADD, _LAST, _AVG = "add_time", "timeit", "time_avg"


class _Node:
    """One key of the tree: how it is timed, its value and its children (insertion order)."""

    __slots__ = ("kind", "total", "count", "window", "children")

    def __init__(self, kind: str, n: int = 0) -> None:
        self.kind = kind
        self.total = 0.0  # add_time: the sum; timeit: the last value; time_avg: unused
        self.count = 0
        self.window: deque[float] | None = deque(maxlen=n) if kind == _AVG else None
        self.children: dict[str, _Node] = {}

    @property
    def value(self) -> float:
        if self.window is None:
            return self.total
        return sum(self.window) / len(self.window) if self.window else 0.0

    def add(self, seconds: float) -> None:
        self.count += 1
        if self.kind == _ADD:
            self.total += seconds
        elif self.kind == _LAST:
            self.total = seconds
        else:
            self.window.append(seconds)  # type: ignore[union-attr]

    def child(self, key: str, kind: str, n: int) -> _Node:
        node = self.children.get(key)
        if node is None:
            node = self.children[key] = _Node(kind, n)
        elif node.kind != kind or (node.window is not None and node.window.maxlen != n):
            was = f"{node.kind}(n={node.window.maxlen})" if node.window is not None else node.kind
            now = f"{kind}(n={n})" if kind == _AVG else kind
            raise ValueError(f"Timing key {key!r} was timed with {was}, now with {now}")
        return node


class _Scope:
    """The context manager of one ``add_time`` / ``timeit`` / ``time_avg`` block."""

    __slots__ = ("_timing", "_key", "_kind", "_n", "_node", "_start")

    def __init__(self, timing: Timing, key: str, kind: str, n: int) -> None:
        if not isinstance(key, str) or not key or "/" in key:
            raise ValueError(f"Timing key: expected a non-empty str without '/', got {key!r}")
        self._timing, self._key, self._kind, self._n = timing, key, kind, n

    def __enter__(self) -> None:
        stack = self._timing._stack
        self._node = stack[-1].child(self._key, self._kind, self._n)
        stack.append(self._node)
        self._start = self._timing._clock()

    def __exit__(self, *exc: object) -> None:
        elapsed = self._timing._clock() - self._start
        stack = self._timing._stack
        if stack[-1] is not self._node:
            raise RuntimeError(
                f"Timing block {self._key!r} closed while an inner block is still open: "
                "close nested blocks in the reverse order they were opened"
            )
        stack.pop()
        self._node.add(elapsed)


def _make_clock(cuda_sync: bool) -> Callable[[], float]:
    torch = import_torch() if cuda_sync else None
    if torch is None or not torch.cuda.is_available():
        return time.perf_counter
    sync, now = torch.cuda.synchronize, time.perf_counter

    def clock() -> float:
        sync()
        return now()

    return clock


def _fmt(seconds: float) -> str:
    return f"{seconds:.4f}" if seconds >= 1e-3 or seconds == 0 else f"{seconds:.2e}"


class Timing:
    """Nested wall-clock timers that build a tree, for logs and end-of-run reports.

    Three kinds of block, each a context manager keyed by a name; a block opened inside
    another one nests under it (``"train/loss"``):

    - ``add_time(key)``: accumulates every time spent in the block (totals).
    - ``timeit(key)``: keeps the last time only.
    - ``time_avg(key, n)``: the moving average of the last ``n`` times.

    A key keeps the kind (and ``n``) it was first timed with; timing it another way
    raises ``ValueError``. A ``Timing`` is not thread-safe: give each thread its own and
    combine them with :meth:`merge`.

    Args:
        name: the report's title.
        cuda_sync: call ``torch.cuda.synchronize()`` before each clock read, when torch
            and CUDA are available (otherwise ignored), so asynchronous GPU work is
            counted in the block that launched it. It slows the GPU pipeline down: use
            it to measure, not in production loops.

    Examples:
        >>> timing = Timing()
        >>> for _ in range(3):
        ...     with timing.add_time("collect"):
        ...         with timing.add_time("env"):
        ...             pass
        ...         with timing.time_avg("policy", n=10):
        ...             pass
        >>> sorted(timing.to_dict())
        ['collect', 'collect/env', 'collect/policy']
        >>> timing.count("collect/env")
        3
        >>> print(timing.report())  # doctest: +ELLIPSIS
        Timing:
          collect: ...
            env: ..., policy: ...
    """

    def __init__(self, name: str = "Timing", *, cuda_sync: bool = False) -> None:
        if not isinstance(name, str):
            raise TypeError(f"Timing(name=...): expected a str, got {type(name).__name__}")
        self.name = name
        self.cuda_sync = bool(cuda_sync)
        self._root = _Node(_ADD)
        self._stack = [self._root]
        self._clock = _make_clock(self.cuda_sync)

    # --- the three blocks -------------------------------------------------------------
    def add_time(self, key: str) -> AbstractContextManager[None]:
        """Time a block and add it to the total of ``key`` (nested under open blocks)."""
        return _Scope(self, key, _ADD, 0)

    def timeit(self, key: str) -> AbstractContextManager[None]:
        """Time a block and keep it as the value of ``key``, replacing the previous one."""
        return _Scope(self, key, _LAST, 0)

    def time_avg(self, key: str, n: int = 10) -> AbstractContextManager[None]:
        """Time a block into the moving average of the last ``n`` times of ``key``."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"time_avg(n=...): expected an int >= 1, got {n!r}")
        return _Scope(self, key, _AVG, n)

    def add(self, key: str, seconds: float, count: int = 1) -> None:
        """Add a duration measured elsewhere to the ``add_time`` key ``key``.

        The key nests under the blocks open now, as ``with add_time(key)`` would. For hot
        loops that read the clock themselves each step and credit the sum once per batch
        (``count`` is the number of steps, for :meth:`count`).

        Raises:
            ValueError: a bad key, or ``key`` timed with another kind.
        """
        _Scope(self, key, _ADD, 0)  # validates the key
        node = self._stack[-1].child(key, _ADD, 0)
        node.total += seconds
        node.count += count

    # --- reading ----------------------------------------------------------------------
    def _find(self, path: str) -> _Node:
        node = self._root
        for key in path.split("/"):
            if key not in node.children:
                raise KeyError(f"no Timing key {path!r}; known: {sorted(self.to_dict())}")
            node = node.children[key]
        return node

    def __getitem__(self, path: str) -> float:
        """Seconds of the key at ``path`` (``"collect/env"``)."""
        return self._find(path).value

    def __contains__(self, path: object) -> bool:
        return isinstance(path, str) and path in self.to_dict()

    def count(self, path: str) -> int:
        """How many times the block at ``path`` was closed."""
        return self._find(path).count

    def _walk(self, node: _Node, prefix: str) -> Iterator[tuple[str, _Node]]:
        for key, child in node.children.items():
            yield prefix + key, child
            yield from self._walk(child, prefix + key + "/")

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        """Flat ``{"a/b/c": seconds}`` of every key, for loggers (``prefix`` is prepended)."""
        return {prefix + path: node.value for path, node in self._walk(self._root, "")}

    def report(self) -> str:
        """The tree as text: leaf siblings on one line, sub-trees indented below their key."""
        lines = [f"{self.name}:"]
        self._report(self._root, 1, lines)
        if len(lines) == 1:
            lines.append("  (nothing timed)")
        return "\n".join(lines)

    def _report(self, node: _Node, depth: int, lines: list[str]) -> None:
        indent = "  " * depth
        items = node.children.items()
        leaves = [f"{key}: {_fmt(child.value)}" for key, child in items if not child.children]
        if leaves:
            lines.append(indent + ", ".join(leaves))
        for key, child in items:
            if child.children:
                lines.append(f"{indent}{key}: {_fmt(child.value)}")
                self._report(child, depth + 1, lines)

    def __str__(self) -> str:
        return self.report()

    def __repr__(self) -> str:
        return f"Timing(name={self.name!r}, keys={len(self.to_dict())})"

    def reset(self) -> None:
        """Forget every key (open blocks must be closed first)."""
        if len(self._stack) > 1:
            raise RuntimeError("Timing.reset() inside an open block")
        self._root = _Node(_ADD)
        self._stack = [self._root]

    # --- combining workers --------------------------------------------------------------
    @classmethod
    def merge(cls, *timings: Timing) -> Timing:
        """Combine the Timing of several workers into a new one.

        ``add_time`` keys are summed (total seconds spent by all workers, so 4 workers
        busy for 1 s give 4 s: divide by the number of workers for a per-worker figure);
        ``timeit`` and ``time_avg`` keys take the mean over the workers that timed them.
        Counts are summed. The result has the first Timing's ``name`` and ``cuda_sync``.

        Args:
            *timings: one or more ``Timing`` (e.g. unpickled from workers).

        Returns:
            A new ``Timing``; the inputs are left unchanged.

        Raises:
            ValueError: no Timing given, or one key timed with different kinds.
            TypeError: an argument is not a ``Timing``.
        """
        if not timings:
            raise ValueError("Timing.merge() needs at least one Timing")
        for t in timings:
            if not isinstance(t, Timing):
                raise TypeError(f"Timing.merge(): expected Timing objects, got {type(t).__name__}")
        out = cls(timings[0].name, cuda_sync=timings[0].cuda_sync)
        _merge_into(out._root, [t._root for t in timings], "")
        return out

    # --- pickling: the tree only; the clock is rebuilt where it is unpickled ----------
    def __getstate__(self) -> dict[str, Any]:
        return {"name": self.name, "cuda_sync": self.cuda_sync, "root": self._root}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.name, self.cuda_sync, self._root = state["name"], state["cuda_sync"], state["root"]
        self._stack = [self._root]
        self._clock = _make_clock(self.cuda_sync)


def _merge_into(target: _Node, sources: list[_Node], prefix: str) -> None:
    keys = dict.fromkeys(key for node in sources for key in node.children)
    for key in keys:
        nodes = [s.children[key] for s in sources if key in s.children]
        kinds = {n.kind for n in nodes}
        if len(kinds) > 1:
            raise ValueError(f"Timing.merge(): key {prefix + key!r} timed as {sorted(kinds)}")
        first = nodes[0]
        n = (first.window.maxlen or 1) if first.window is not None else 0
        node = _Node(first.kind, n)
        node.count = sum(n.count for n in nodes)
        values = [n.value for n in nodes]
        if node.kind == _ADD:
            node.total = sum(values)
        elif node.kind == _LAST:
            node.total = sum(values) / len(values)
        else:
            node.window.append(sum(values) / len(values))  # type: ignore[union-attr]
        target.children[key] = node
        _merge_into(node, nodes, prefix + key + "/")
