"""rl-profiling's own range recorder, used when torch is not importable.

It keeps complete events (``ph="X"``) in memory and writes them as a Chrome trace
(Trace Event Format) that Perfetto, ``chrome://tracing`` and ``rl-profile summary`` read.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["RECORDER", "Recorder"]


class Recorder:
    """An in-process list of completed ranges.

    Examples:
        >>> rec = Recorder()
        >>> with rec.range("work"):
        ...     pass
        >>> [e["name"] for e in rec.events]
        ['work']
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @contextmanager
    def range(self, name: str) -> Iterator[None]:
        """Record the time spent inside the ``with`` block under ``name``."""
        start = time.perf_counter_ns()
        try:
            yield
        finally:
            end = time.perf_counter_ns()
            event = {
                "name": name,
                "ph": "X",
                "cat": "rl_profiling",
                "ts": start / 1000.0,
                "dur": (end - start) / 1000.0,
                "pid": os.getpid(),
                "tid": threading.get_ident(),
            }
            with self._lock:
                self.events.append(event)

    def clear(self) -> None:
        """Drop every recorded event."""
        with self._lock:
            self.events.clear()

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write the recorded events as a Chrome trace JSON file and return its path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            payload = {"traceEvents": list(self.events), "displayTimeUnit": "ms"}
        path.write_text(json.dumps(payload))
        return path


RECORDER = Recorder()
"""The process-wide recorder that ``record`` falls back to without torch."""
