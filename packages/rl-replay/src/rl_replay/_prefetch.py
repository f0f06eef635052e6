"""Background sampling: a daemon thread keeps a queue of ready samples."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Prefetcher"]

_POLL_S = 0.05


class Prefetcher:
    """Run ``produce()`` in a daemon thread and hand its results out in order.

    ``produce`` returns ``None`` when there is nothing to sample yet (it is retried).
    An exception raised by ``produce`` is re-raised by the next :meth:`get`.
    """

    def __init__(self, produce: Callable[[], Any], depth: int) -> None:
        self._produce = produce
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rl-replay-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._produce()
            except BaseException as err:  # handed to the consumer, which re-raises it
                item = err
            if item is None:
                self._stop.wait(0.001)
                continue
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=_POLL_S)
                    break
                except queue.Full:
                    continue
            if isinstance(item, BaseException):
                return

    def get(self, timeout: float) -> Any:
        """Next sample; raises ``TimeoutError`` after ``timeout`` seconds without one."""
        try:
            item = self._queue.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(
                f"prefetch: no sample ready after {timeout} s (is the buffer empty?)"
            ) from None
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        """Stop the thread and drop queued samples."""
        self._stop.set()
        self._thread.join(timeout=5.0)
        while not self._queue.empty():
            self._queue.get_nowait()
