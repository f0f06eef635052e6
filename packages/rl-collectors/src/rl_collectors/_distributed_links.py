"""Trainer side of the torch.distributed collectors' messages: one receiver thread per rank.

gloo offers no "wait for any rank" that notices a dead peer (a receive from any source
only times out, and a timed-out wait closes the connection), so each rank gets a
receiver thread that does one blocking receive, with the collector's timeout, per
request it was sent; replies land in one queue. The main thread waits on that queue in
short slices and checks the launcher's liveness between slices, so a rank that dies is
reported within a fraction of a second whichever rank it was waiting for (gloo also
fails the dead rank's receive at once: "Connection closed by peer").
"""

from __future__ import annotations

import datetime
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import torch

from rl_collectors._distributed_worker import (
    KIND_BATCH,
    KIND_ERROR,
    TAG_DATA,
    TAG_HDR,
    loads,
    recv,
)
from rl_collectors._flat import FlatLayout
from rl_collectors.exceptions import WorkerError

__all__ = ["RankLinks"]

_SLICE = 0.1  # seconds between liveness checks while waiting
_LOST = -1


class RankLinks:
    """Receiver threads for ranks ``1..num_ranks`` and the waits on their replies.

    Args:
        num_ranks: number of collector ranks.
        timeout: seconds a reply may take once requested.
        alive: ``rank -> bool`` (``None``: no liveness information, e.g. under torchrun).
        describe: ``rank -> str`` for error messages.
    """

    def __init__(self, num_ranks: int, timeout: float, alive: Callable[[int], bool] | None,
                 describe: Callable[[int], str]) -> None:
        self.timeout = timeout
        self.layout: FlatLayout | None = None
        self._alive, self._describe = alive, describe
        self._queue: queue.Queue = queue.Queue()
        self._stash: dict[int, dict[int, deque]] = {r: {} for r in range(1, num_ranks + 1)}
        self._requests = {r: threading.Semaphore(0) for r in range(1, num_ranks + 1)}
        self._stopping = False
        self._threads = [threading.Thread(target=self._receive_loop, args=(r,), daemon=True,
                                          name=f"rl-distributed-recv-{r}") for r in self._requests]
        for thread in self._threads:
            thread.start()

    # -- receiver threads -------------------------------------------------------------------
    def expect(self, rank: int) -> None:
        """Tell ``rank``'s thread that one more reply is on its way."""
        self._requests[rank].release()

    def _receive_loop(self, rank: int) -> None:
        wait = datetime.timedelta(seconds=self.timeout)
        hdr = torch.empty(2, dtype=torch.int64)
        while True:
            self._requests[rank].acquire()
            if self._stopping:
                return
            try:
                recv(hdr, rank, TAG_HDR, wait)
                kind, n = int(hdr[0]), int(hdr[1])
                if kind == KIND_BATCH:
                    layout = self.layout if n == self.layout.steps else self.layout.with_steps(n)
                    payload = layout.unpack(recv(layout.empty(), rank, TAG_DATA, wait))
                else:
                    payload = loads(recv(torch.empty(n, dtype=torch.uint8), rank, TAG_DATA, wait))
            except Exception as err:  # connection closed (the rank died) or timed out
                self._queue.put((rank, _LOST, err))
                return
            self._queue.put((rank, kind, payload))

    # -- waiting (main thread) -----------------------------------------------------------------
    def wait(
        self, ranks: Sequence[int], kind: int, what: str, timeout: float | None = None
    ) -> tuple[int, Any]:
        """The first ``kind`` reply from any of ``ranks``: ``(rank, payload)``.

        Raises:
            WorkerError: a rank raised, died, or did not answer within ``timeout``.
        """
        timeout = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            for rank in ranks:
                stash = self._stash[rank].get(kind)
                if stash:
                    return rank, stash.popleft()
            try:
                rank, got, payload = self._queue.get(timeout=_SLICE)
            except queue.Empty:
                self._check(ranks, deadline, timeout, what)
                continue
            if got == _LOST:
                raise self.lost(rank, what, payload)
            if got == KIND_ERROR:
                raise WorkerError(
                    rank - 1, f"rank {rank} ({self._describe(rank)}) raised (in {what!r})", payload
                )
            self._stash[rank].setdefault(got, deque()).append(payload)

    def _check(self, ranks: Sequence[int], deadline: float, timeout: float, what: str) -> None:
        for rank in ranks:
            if self._alive is not None and not self._alive(rank):
                raise WorkerError(
                    rank - 1, f"rank {rank} died ({self._describe(rank)}) during {what!r}"
                )
        if time.monotonic() > deadline:
            names = ", ".join(str(r) for r in ranks)
            raise WorkerError(
                ranks[0] - 1, f"no reply to {what!r} within {timeout} s from rank(s) {names}"
            )

    def lost(self, rank: int, what: str, err: BaseException) -> WorkerError:
        """The ``WorkerError`` for a failed send or receive with ``rank``."""
        text = str(err).splitlines()[0] if str(err) else type(err).__name__
        deadline = time.monotonic() + 2.0  # a killed process takes a moment to be reaped
        while self._alive is not None and self._alive(rank) and time.monotonic() < deadline:
            time.sleep(0.02)
        if "closed" in text.lower() or (self._alive is not None and not self._alive(rank)):
            return WorkerError(
                rank - 1, f"rank {rank} died ({self._describe(rank)}) during {what!r}: {text}"
            )
        return WorkerError(
            rank - 1, f"rank {rank} ({self._describe(rank)}) failed during {what!r}: {text}"
        )

    def close(self, timeout: float = 3.0) -> None:
        """Let idle threads exit; join them (busy ones end when their rank's connection closes)."""
        self._stopping = True
        for sem in self._requests.values():
            sem.release()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    @property
    def busy(self) -> bool:
        """Whether a receiver thread is still running."""
        return any(t.is_alive() for t in self._threads)
