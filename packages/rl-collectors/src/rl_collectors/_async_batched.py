"""``AsyncBatchedCollector``: independent env workers, one batching inference server.

Wiring (one place):

- slots (``[num_envs, *B]`` TensorDicts, in shared memory for processes; built with the
  probed policy and the frame templates in ``_async_setup``): each env is bound to its row,
  so it steps straight into them; the server reads observations from them and writes
  actions into them;
- env workers (``_async_envs``): threads or spawned processes, one single env each;
- the inference server (``_inference_server``), in a thread of this process: batches
  the waiting envs' requests into one policy forward and records frames into the
  frame store (``_async_store``);
- a queue of one finished batch between the server thread and the iterating thread.
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import torch
from rl_envs.processes import env_constructors
from rl_profiling import record
from tensordict import TensorDictBase

from rl_collectors._async_args import check_async_args
from rl_collectors._async_envs import ProcessEnvPool, ThreadEnvPool, make_env
from rl_collectors._async_setup import frame_templates, make_envs, make_slots, probe_policy
from rl_collectors._async_store import FrameStore, completed_trajectories
from rl_collectors._base import BaseCollector
from rl_collectors._inference_server import InferenceServer
from rl_collectors._options import CollectorOptions
from rl_collectors._policy import exploration_context, policy_forward
from rl_collectors._profiling import ProfilingMixin
from rl_collectors.exceptions import CollectorClosedError, CollectorError, WorkerError
from rl_collectors.weight_sync import bind_updater

__all__ = ["AsyncBatchedCollector"]

_POLL = 0.2
_END = object()


def _shutdown(state: dict) -> None:
    """Finalizer: stop the server thread, then the env workers; safe to call twice."""
    state["stop"].set()
    thread = state.pop("thread", None)
    if thread is not None and thread.is_alive() and thread is not threading.current_thread():
        thread.join(5.0)
    pool = state.pop("pool", None)
    if pool is not None:
        pool.close()


class AsyncBatchedCollector(BaseCollector, ProfilingMixin):
    """Many single envs stepping independently, one inference server batching their policy calls.

    Each env runs in its own worker (a thread or a spawned process) and steps as soon as
    its action arrives. The inference server, a thread of this process, runs one batched
    forward over the waiting envs when ``max_batch_size`` wait, when every env waits, or
    when ``min_batch_size`` wait and the oldest has waited ``server_timeout`` seconds. No
    env waits for the slowest one: a slow env contributes fewer frames, not a stall.

    Batches are flat, ``[frames_per_batch]``: frames grouped by env (each env's frames in
    time order, so its trajectories are contiguous), in the usual layout (root: state at
    ``t`` and policy outputs; ``"next"``: the step's results) plus ``("collector",
    "traj_ids")``, ``("collector", "policy_version")`` and ``("collector", "env_ids")``.
    With ``yield_completed_trajectories=True`` each item is one finished trajectory.

    Args:
        create_env_fn: a callable returning a single env (``batch_size`` ``()`` or
            ``(1,)``, e.g. ``GymEnv(name, num_envs=1)``), or a list of ``num_envs`` of
            them. Picklable for the multiprocessing backend.
        policy: as for ``Collector`` (``td -> td`` module, plain ``nn.Module`` or ``None``
            for random actions); it runs in this process, on ``policy_device``.
        num_envs: number of env workers.
        frames_per_batch: frames per batch (or per internal chunk with trajectories).
        total_frames: frames in total (exact), ``-1`` for no limit.
        max_batch_size: most envs per forward (default ``num_envs``).
        min_batch_size: fewest envs for a forward triggered by ``server_timeout``.
        server_timeout: seconds the oldest waiting request may wait for more to batch.
        backend: ``"threading"`` (envs that release the GIL: I/O, sleeps, C simulators)
            or ``"multiprocessing"`` (CPU-bound Python envs).
        yield_completed_trajectories: yield one ``[T]`` trajectory each time one ends.
        timeout: seconds the iterator waits for a batch before declaring the workers hung.
        filter_warnings_subprocess: ignore warnings in worker processes (``False`` to see
            them).
        **options: the :class:`~rl_collectors.CollectorOptions` that apply
            (``exploration_type``, ``policy_device``, ``split_trajs``, ``postproc``,
            ``replay_buffer``, ``post_collect_hook``, ``weight_updater`` and the
            performance knobs ``compile_policy``, ``cudagraph_policy``, ``trust_policy``).

    Raises:
        ValueError: an argument is out of range, or an option that does not apply here.
        CollectorError: the policy does not write the action with the env's dtype.
        WorkerError: (while iterating) an env worker raised or died; the collector shuts down.

    Examples:
        >>> from rl_envs import GymEnv
        >>> collector = AsyncBatchedCollector(lambda: GymEnv("CartPole-v1"), num_envs=2,
        ...                                   frames_per_batch=8, total_frames=16)
        >>> batches = list(collector)
        >>> [batch.batch_size for batch in batches]
        [torch.Size([8]), torch.Size([8])]
        >>> sorted(batches[-1]["collector"].keys())
        ['env_ids', 'policy_version', 'traj_ids']
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        num_envs: int,
        frames_per_batch: int,
        total_frames: int = -1,
        max_batch_size: int | None = None,
        min_batch_size: int = 1,
        server_timeout: float = 1e-3,
        backend: str = "threading",
        yield_completed_trajectories: bool = False,
        timeout: float = 300.0,
        filter_warnings_subprocess: bool = True,
        **options: Any,
    ) -> None:
        check_async_args(num_envs, max_batch_size, min_batch_size, server_timeout, backend, options)
        fns = env_constructors(create_env_fn, num_envs, "num_envs")
        self.options = opts = CollectorOptions(**options)
        opts.check_frames(frames_per_batch, total_frames, 1)
        self.num_envs, self.backend = num_envs, backend
        self.frames_per_batch, self.total_frames, self.timeout = (
            frames_per_batch,
            total_frames,
            timeout,
        )
        self.max_batch_size = max_batch_size or num_envs
        self.yield_completed_trajectories = bool(yield_completed_trajectories)
        self.policy_device = torch.device(opts.policy_device or "cpu")
        self.frames = 0
        self.policy_version = 0
        self._closed = False
        self._lock = threading.Lock()
        self._state: dict[str, Any] = {"stop": threading.Event()}
        self._finalizer = weakref.finalize(self, _shutdown, self._state)
        self.init_worker_profiling(0)
        try:
            self._setup(fns, policy, min_batch_size, server_timeout, filter_warnings_subprocess)
        except BaseException:
            self.shutdown()
            raise

    # -- construction ------------------------------------------------------------------------
    def _setup(
        self, fns: list, policy: Any, min_bs: int, server_timeout: float, filter_warnings: bool
    ) -> None:
        envs = make_envs(fns) if self.backend == "threading" else None
        template = envs[0] if envs else make_env(fns[0])
        try:
            slots = make_slots(template, self.num_envs)
            self.action_key = template.action_key
            self._source_policy = policy
            self.policy, self.out_keys, probe = probe_policy(
                policy, template, slots, self.options, self.policy_device
            )
        except BaseException:
            for env in envs or [template]:
                env.close()
            raise
        if envs is None:
            template.close()
            for part in slots:
                part.share_memory_()
            pool: Any = ProcessEnvPool(fns, slots, filter_warnings)
        else:
            pool = ThreadEnvPool(fns, slots, envs)
        self._state["pool"] = pool
        self.weight_updater = bind_updater(self.options.weight_updater, self.policy, policy)
        forward = policy_forward(self.policy, self.options, self.policy_device, self.out_keys)
        root, nxt = frame_templates(slots, self.out_keys, probe)
        store = FrameStore(root, nxt, self.frames_per_batch, self.num_envs)
        self._server = InferenceServer(
            pool,
            slots,
            self._locked(forward),
            self.out_keys,
            self.action_key,
            store,
            self.max_batch_size,
            min_bs,
            float(server_timeout),
            self.policy_device,
        )
        self._queue: queue.Queue = queue.Queue(maxsize=1)
        pool.start(self.timeout)
        thread = threading.Thread(target=self._server_main, name="rl-inference-server", daemon=True)
        self._state["thread"] = thread
        thread.start()

    def _locked(self, forward: Any) -> Any:
        lock = self._lock

        def run(td: TensorDictBase) -> Any:
            with lock:
                return forward(td)

        return run

    # -- the server thread -------------------------------------------------------------------
    def _batch_frames(self, k: int) -> int:
        if self.total_frames < 0:
            return self.frames_per_batch
        return max(0, min(self.frames_per_batch, self.total_frames - k * self.frames_per_batch))

    def _server_main(self) -> None:
        """Thread target: serve batch after batch into the queue; errors go to the queue too."""
        server, stop = self._server, self._state["stop"]
        try:
            with torch.no_grad(), exploration_context(self.options.interaction):
                server.plan(0, self._batch_frames(0))
                k = 0
                while not stop.is_set() and self._batch_frames(k):
                    with self._hook(), record("AsyncBatchedCollector._rollout_frames"):
                        server.serve(k, self._batch_frames(k + 1), stop)
                    self._put(server.store.finalize(k % 2, self._batch_frames(k)), stop)
                    k += 1
            self._put(_END, stop)
        except InterruptedError:
            pass
        except BaseException as err:  # noqa: BLE001  (handed to the iterating thread)
            self._put(err, stop)

    def _put(self, item: Any, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL)
                return
            except queue.Full:
                continue

    def _get(self) -> Any:
        """The next item of the server thread: a batch, ``_END``, or the error it raised."""
        waited = 0.0
        while True:
            try:
                return self._queue.get(timeout=_POLL)
            except queue.Empty:
                waited += _POLL
            thread = self._state.get("thread")
            if thread is None or not thread.is_alive():
                try:
                    return self._queue.get_nowait()
                except queue.Empty:
                    return CollectorError(
                        "AsyncBatchedCollector: the inference server thread stopped"
                    )
            if waited >= self.timeout:
                return WorkerError(
                    -1, f"no batch within timeout={self.timeout} s (an env worker hung?)"
                )

    # -- iteration ---------------------------------------------------------------------------
    def _items(self) -> Iterator[TensorDictBase]:
        if self._closed:
            raise CollectorClosedError("AsyncBatchedCollector: iterated after shutdown()")
        while True:
            item = self._get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                self.shutdown()
                raise item
            yield item

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        if self.yield_completed_trajectories:
            yield from self._trajectories()
            return
        for batch in self._items():
            self.frames += batch.numel()
            yield self.options.deliver(batch)

    def _trajectories(self) -> Iterator[TensorDictBase | None]:
        """One finished ``[T]`` trajectory per item; unfinished tails wait for the next batch."""
        tails: dict[int, TensorDictBase] = {}
        for batch in self._items():
            self.frames += batch.numel()
            with record("AsyncBatchedCollector._rollout_yield_trajs"):
                done_trajs = completed_trajectories(batch, tails)
            for traj in done_trajs:
                yield self.options.deliver(traj)

    # -- weights, state --------------------------------------------------------------------------
    def update_policy_weights_(self, policy_or_weights: Any = None) -> int:
        """Copy new weights into the server's policy between two forwards; bump the version.

        Returns:
            The new policy version (frames acted on with it carry it).
        """
        self._check_open()
        with self._lock:
            self.policy_version = self.weight_updater.push(policy_or_weights)
            self._server.version = self.policy_version
        return self.policy_version

    def state_dict(self) -> dict[str, Any]:
        """Frames collected, policy version, trajectory counters and the policy's weights."""
        state: dict[str, Any] = {"frames": self.frames, "policy_version": self.policy_version,
                                 "traj": self._server.store.traj.state_dict()}
        if isinstance(self.policy, torch.nn.Module):
            state["policy_state_dict"] = self.policy.state_dict()
        return state

    def server_stats(self) -> dict[str, float]:
        """``forwards``, ``mean_batch_size``, ``max_batch_size`` and ``mean_queue_wait_s``."""
        s = self._server.stats
        return {
            "forwards": s.forwards,
            "mean_batch_size": s.mean_batch,
            "max_batch_size": s.max_batch,
            "mean_queue_wait_s": s.wait_s / s.requests if s.requests else 0.0,
        }

    def timing_report(self) -> str:
        """The server's ``Timing`` tree (rollout: wait, policy, storage) and its batch
        statistics."""
        return self._server.timing.report() + "\n" + self._server.stats.report()

    # -- lifecycle ---------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise CollectorClosedError("AsyncBatchedCollector: used after shutdown()")

    def shutdown(self) -> None:
        """Stop the server thread and every env worker (bounded); idempotent."""
        self._closed = True
        self._finalizer()
        self._stop_profiling()

    def __repr__(self) -> str:
        return (
            f"AsyncBatchedCollector(num_envs={self.num_envs}, backend={self.backend!r}, "
            f"frames_per_batch={self.frames_per_batch}, total_frames={self.total_frames}, "
            f"frames={self.frames})"
        )
