"""Sync and async schedules of ``MultiCollector``: what ``MultiSyncCollector`` and
``MultiAsyncCollector`` choose between (``sync=True`` / ``False``: which workers are asked
to collect, when, and the batch's shape, ``[W, *B, T]`` or one worker's ``[*B, T]``).
Workers, weights, commands and shutdown are ``MultiCollector``'s, shared by both. The
remote collectors have sync and async loops of their own (``_distributed_base.py``).

A schedule turns worker replies into batches. Both copy the workers' shared-memory
batches out (``torch.stack`` for sync, ``clone`` for async) before a worker may write
again, and time the main process's waits in ``collector.timing``.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
from collections.abc import Iterator
from typing import Any

import torch
from tensordict import TensorDictBase

from rl_collectors.exceptions import WorkerError

__all__ = ["AsyncSchedule", "SyncSchedule"]


class SyncSchedule:
    """Every worker collects its share; the batch is their stack ``[W, *B, T]``.

    ``owner`` is the collector (counters, ``timing``, ``timeout``); ``workers`` its worker
    handles (the very list it closes at shutdown).
    """

    def __init__(self, owner: Any, workers: list[Any]) -> None:
        self.owner, self.workers = owner, workers
        self.steps = owner.frames_per_batch // (owner.num_workers * owner.num_rows)

    def batches(self) -> Iterator[TensorDictBase]:
        o = self.owner
        while o.total_frames < 0 or o.frames < o.total_frames:
            left = o.remaining_frames()
            steps = (
                self.steps
                if left is None
                else min(self.steps, left // (o.num_workers * o.num_rows))
            )
            for worker in self.workers:
                worker.send("collect", steps)
            with o.timing.add_time("wait"):
                for worker in self.workers:
                    worker.recv_batch(o.timeout)
            with o.timing.add_time("copy_out"):
                batch = torch.stack([w.buffer[..., :steps] for w in self.workers], 0)
            yield batch


class AsyncSchedule:
    """Workers collect continuously; each batch is the first one ready (arguments as for
    :class:`SyncSchedule`)."""

    def __init__(self, owner: Any, workers: list[Any]) -> None:
        self.owner, self.workers = owner, workers

    def _wait_any(self) -> Any:
        o = self.owner
        while True:
            for worker in self.workers:
                if worker.batches:
                    return worker
            objects = [obj for w in self.workers for obj in w.waitables]
            ready = mpc.wait(objects, timeout=o.timeout) if objects else []
            if objects and not ready:
                raise WorkerError(-1, f"no worker produced a batch within {o.timeout} s")
            for worker in self.workers:
                if any(obj in ready for obj in worker.waitables):
                    worker.batches.append(worker.recv_batch(o.timeout))

    def batches(self) -> Iterator[TensorDictBase]:
        o = self.owner
        steps = o.frames_per_batch // o.num_rows
        for worker in self.workers:
            worker.send("collect", steps)
        while o.total_frames < 0 or o.frames < o.total_frames:
            with o.timing.add_time("wait"):
                worker = self._wait_any()
                n, _version = worker.batches.popleft()
            left = o.remaining_frames()
            keep = n if left is None else min(n, left // o.num_rows)
            with o.timing.add_time("copy_out"):
                batch = worker.buffer[..., :keep].clone()
            worker.send("collect", steps)
            yield batch
