"""The inference server of :class:`~rl_collectors.AsyncBatchedCollector`.

One loop (in a thread of the main process) waits for env workers whose row of the
shared slots is ready, records the step result they bring back, and runs one batched
policy forward over the waiting envs when ``max_batch_size`` of them wait, when every
env waits (nobody else can arrive), or when ``min_batch_size`` wait and the oldest has
waited ``server_timeout`` seconds. It then writes each env's action into the action slot
and signals that env, which steps at once: no env waits for the slowest.

Frames are counted at dispatch: batch ``k`` gets exactly its share of actions, and is
handed out once all of their results are back (see :mod:`rl_collectors._async_store`).
"""

from __future__ import annotations

import time
from typing import Any

import torch
from rl_profiling import Timing, record
from tensordict import TensorDict, TensorDictBase

from rl_collectors._async_store import ROOT_FLAGS, FrameStore
from rl_collectors._layout import leaf_keys

__all__ = ["InferenceServer", "ServerStats"]

_POLL = 0.2


class ServerStats:
    """Counters of the server: forwards, batch sizes, queue waits (request -> action)."""

    def __init__(self) -> None:
        self.forwards = 0
        self.requests = 0
        self.max_batch = 0
        self.wait_s = 0.0

    def add(self, size: int, waited: float) -> None:
        self.forwards += 1
        self.requests += size
        self.max_batch = max(self.max_batch, size)
        self.wait_s += waited

    @property
    def mean_batch(self) -> float:
        return self.requests / self.forwards if self.forwards else 0.0

    def report(self) -> str:
        wait_ms = 1e3 * self.wait_s / self.requests if self.requests else 0.0
        return (
            f"inference server: {self.forwards} forwards, mean batch size {self.mean_batch:.2f}, "
            f"max {self.max_batch}; mean queue wait {wait_ms:.3f} ms (request -> action)"
        )


def flat(td: TensorDictBase, num: int) -> TensorDictBase:
    """``[num, *B]`` with ``B.numel() == 1`` viewed as ``[num]`` (shares memory)."""
    nb = td.batch_dims - 1
    out = TensorDict(batch_size=[num])
    for key in leaf_keys(td):
        x = td.get(key)
        out.set(key, x.reshape(num, *x.shape[1 + nb :]))
    return out


class InferenceServer:
    """Batch the envs' policy requests; record frames into a :class:`FrameStore`.

    Args:
        pool: the env workers (``wait(timeout)``, ``act(i)``).
        slots: ``(root, next, action)`` shared slots, ``[num_envs, *B]``.
        forward: the policy callable (possibly compiled), ``td -> td`` in place.
        out_keys: the keys the policy writes (from the probe).
        action_key: the env's action key.
        store: the frame store.
        max_batch_size / min_batch_size / server_timeout: the batching rule.
        policy_device: where the policy runs.
    """

    def __init__(
        self,
        pool: Any,
        slots: tuple,
        forward: Any,
        out_keys: list[tuple],
        action_key: Any,
        store: FrameStore,
        max_batch_size: int,
        min_batch_size: int,
        server_timeout: float,
        policy_device: torch.device,
    ) -> None:
        self.pool, self.forward, self.store = pool, forward, store
        self.num_envs = n = slots[0].batch_size[0]
        self.root = flat(slots[0], n)
        self.root_keys = [k for k in leaf_keys(self.root) if k not in ROOT_FLAGS]
        self.root_src = [self.root.get(k) for k in self.root_keys]
        self.next_src = [flat(slots[1], n).get(k) for k in store.next_keys]
        self.action_dst = slots[2].reshape(n, *slots[2].shape[slots[0].batch_dims :])
        self.action_key = action_key
        self.out_keys = out_keys
        self.max_bs, self.min_bs, self.timeout = max_batch_size, min_batch_size, server_timeout
        self.device = policy_device
        self._policy_inputs: dict[int, TensorDictBase] = {}
        self.inflight = [-1] * n  # flat store position of each env's frame in flight
        self.arrived = [0.0] * n
        self.pending: list[int] = []
        self.planned = [0, 0]  # frames allotted to the batch in each store slot
        self.dispatched = [0, 0]
        self.recorded = [0, 0]
        self.target = 0  # batch index receiving actions
        self.version = 0
        self.stats = ServerStats()
        self.timing = Timing("AsyncBatchedCollector inference server")
        self._t_wait = self._t_policy = self._t_store = 0.0

    def _policy_input(self, k: int) -> TensorDictBase:
        """The preallocated policy input for ``k`` envs (built on first use of each ``k``)."""
        policy_input = self._policy_inputs.get(k)
        if policy_input is None:
            policy_input = TensorDict(
                {
                    key: torch.zeros((k, *src.shape[1:]), dtype=src.dtype)
                    for key, src in zip(self.root_keys, self.root_src, strict=True)
                },
                batch_size=[k],
            ).to(self.device)
            self._policy_inputs[k] = policy_input
        return policy_input

    # -- one batch --------------------------------------------------------------------------
    def plan(self, batch: int, frames: int) -> None:
        """Allot ``frames`` frames to batch ``batch`` (its store slot must be free)."""
        slot = batch % 2
        self.planned[slot], self.dispatched[slot], self.recorded[slot] = frames, 0, 0

    def serve(self, batch: int, next_frames: int, stop: Any) -> None:
        """Serve requests until every frame of ``batch`` is recorded; ``next_frames`` is
        the size of batch ``batch + 1`` (0: there is none)."""
        with self.timing.add_time("rollout"):
            self._serve(batch, next_frames, stop)
            self._flush_timing()

    def _serve(self, batch: int, next_frames: int, stop: Any) -> None:
        slot = batch % 2
        clock = time.perf_counter
        while True:
            if stop.is_set():
                raise InterruptedError("server stopped")
            # Checked before the loop's exit: a batch may be complete before it is served
            # (fast envs finish it while the one before waits on a slow env); the next
            # batch must still be planned, or its slot would be handed out stale.
            if self.target == batch and self.dispatched[slot] == self.planned[slot] and next_frames:
                self.target = batch + 1
                self.plan(batch + 1, next_frames)
            if self.recorded[slot] >= self.planned[slot]:
                return
            t0 = clock()
            ready = self.pool.wait(self._wait_time(t0))
            t1 = clock()
            self._t_wait += t1 - t0
            if ready:
                self._arrive(ready, t1)
            self._dispatch(clock)

    def _wait_time(self, now: float) -> float:
        if not self.pending or not self._budget():
            return _POLL
        return max(0.0, self.timeout - (now - self.arrived[self.pending[0]]))

    def _budget(self) -> int:
        slot = self.target % 2
        return self.planned[slot] - self.dispatched[slot]

    def _arrive(self, ready: list[int], now: float) -> None:
        done = [i for i in ready if self.inflight[i] >= 0]
        if done:
            t0 = time.perf_counter()
            pos = torch.tensor([self.inflight[i] for i in done])
            self.store.write_next(pos, torch.tensor(done), self.next_src)
            for i in done:
                self.recorded[self.inflight[i] // self.store.frames_per_batch] += 1
                self.inflight[i] = -1
            self._t_store += time.perf_counter() - t0
        for i in ready:
            self.arrived[i] = now
        self.pending.extend(ready)

    def _due(self, now: float) -> bool:
        n = len(self.pending)
        if n >= self.max_bs or n == self.num_envs:
            return True
        return n >= self.min_bs and now - self.arrived[self.pending[0]] >= self.timeout

    def _dispatch(self, clock: Any) -> None:
        while self.pending and self._budget() and self._due(clock()):
            k = min(len(self.pending), self.max_bs, self._budget())
            envs, self.pending = self.pending[:k], self.pending[k:]
            self._forward(envs, clock)

    def _forward(self, envs: list[int], clock: Any) -> None:
        """One batched forward for ``envs``: inputs in, actions out, root halves stored."""
        t0 = clock()
        k, slot = len(envs), self.target % 2
        idx = torch.tensor(envs)
        policy_input = self._policy_input(k)
        for key, src in zip(self.root_keys, self.root_src, strict=True):
            dst = policy_input.get(key)
            if dst.device == src.device:
                torch.index_select(src, 0, idx, out=dst)
            else:
                dst.copy_(src.index_select(0, idx), non_blocking=True)
        t1 = clock()
        with record("InferenceServer.forward"):
            self.forward(policy_input)
        t2 = clock()
        self.action_dst.index_copy_(
            0, idx, policy_input.get(self.action_key).to(self.action_dst.device)
        )
        start = slot * self.store.frames_per_batch + self.dispatched[slot]
        pos = torch.arange(start, start + k)
        self.store.write_root(pos, idx, policy_input, self.version)
        for j, i in enumerate(envs):
            self.inflight[i] = start + j
            self.pool.act(i)
        self.dispatched[slot] += k
        waited = sum(t0 - self.arrived[i] for i in envs)
        self.stats.add(k, waited)
        self._t_policy += t2 - t1
        self._t_store += t1 - t0 + clock() - t2

    def _flush_timing(self) -> None:
        timing = self.timing
        timing.add("wait", self._t_wait)
        timing.add("policy", self._t_policy)
        timing.add("storage", self._t_store)
        self._t_wait = self._t_policy = self._t_store = 0.0
