"""rl-profiling's own range recorder, used when torch is not importable.

It keeps complete events (``ph="X"``) in memory and writes them as a Chrome trace
(Trace Event Format) that Perfetto, ``chrome://tracing`` and ``rl-profile summary`` read.
Like ``torch.profiler``, the process-wide :data:`RECORDER` only keeps the ranges that
``record`` / ``profiled`` open between :meth:`Recorder.start` and :meth:`Recorder.stop`.
"""

from __future__ import annotations

import gzip
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

    ``range`` always records; ``start`` / ``stop`` open and close a recording, which is
    what ``record`` and ``profiled`` check before they use the process-wide recorder.

    Examples:
        >>> rec = Recorder()
        >>> with rec.range("work"):
        ...     pass
        >>> [e["name"] for e in rec.events]
        ['work']
        >>> rec.start()  # a new recording: drops the old events
        >>> rec.recording, rec.events
        (True, [])
        >>> rec.stop()
    """

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._recording = False

    @property
    def recording(self) -> bool:
        """Whether a recording is open (between :meth:`start` and :meth:`stop`)."""
        return self._recording

    def start(self) -> None:
        """Open a new recording: drop every event kept so far."""
        self.clear()
        self._recording = True

    def stop(self) -> None:
        """Close the recording; the events stay until :meth:`clear` or :meth:`start`."""
        self._recording = False

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
                "tid": threading.get_native_id(),
            }
            with self._lock:
                self.events.append(event)

    def clear(self) -> None:
        """Drop every recorded event."""
        with self._lock:
            self.events.clear()

    def export_chrome_trace(self, path: str | os.PathLike[str]) -> Path:
        """Write the recorded events as a Chrome trace and return its path.

        A path ending in ``.gz`` is gzip-compressed (as ``torch.profiler`` does).
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            payload = {"traceEvents": list(self.events), "displayTimeUnit": "ms"}
        text = json.dumps(payload)
        if path.suffix == ".gz":
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            path.write_text(text, encoding="utf-8")
        return path


RECORDER = Recorder()
"""The process-wide recorder that ``record`` falls back to without torch."""
