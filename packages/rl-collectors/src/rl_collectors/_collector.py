"""``Collector``: one batched env, one policy, a preallocated ``[*B, T]`` batch."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch
from rl_envs import carry_pairs, moving_obs_source, reset_where, step_loop
from rl_profiling import profiled
from tensordict import TensorDictBase

from rl_collectors._base import BaseCollector, build_env
from rl_collectors._collector_state import CollectorStateMixin
from rl_collectors._finite import FiniteCheck
from rl_collectors._keys import DONE, NEXT, POLICY_VERSION, TRAJ_IDS
from rl_collectors._layout import BatchPlanner, alloc_buffer, make_policy_input, nested
from rl_collectors._options import CollectorOptions
from rl_collectors._policy import (
    StreamSyncActor,
    exploration_context,
    find_outputs,
    policy_forward,
    prepare_policy,
)
from rl_collectors._profiling import ProfilingMixin
from rl_collectors._strategies import (
    DevicePolicyActor,
    PolicyActor,
    RandomActor,
    TrajectoryLimit,
    env_action,
)
from rl_collectors._traj import TrajCounter
from rl_collectors.exceptions import CollectorClosedError
from rl_collectors.weight_sync import WeightUpdaterBase, bind_updater

__all__ = ["Collector"]


class Collector(CollectorStateMixin, BaseCollector, ProfilingMixin):
    """Collect ``[*env.batch_size, T]`` batches from one batched env with one policy.

    Iterate over it to get batches until ``total_frames`` frames were collected (exactly:
    the last batch is shorter if needed), or call :meth:`rollout` for one batch. Batches
    follow the rollout layout (root: state at t, policy outputs; ``"next"``: what the
    step produced) plus ``("collector", "traj_ids")`` and ``("collector",
    "policy_version")``. Time is the last batch dim.

    The loop writes each step into a preallocated batch (no TensorDict built per
    step) and hands that batch out at the end, writing the next one into a new batch (no
    copy of the data); see ``docs/internals/collector.md``.

    Args:
        create_env_fn: an env (``rl_envs.EnvBase``) or a callable returning one.
        policy: a callable ``td -> td`` writing the action key (a
            ``tensordict.nn.TensorDictModule``), a plain ``nn.Module`` (wrapped to read the
            observation and write the action), or ``None`` for ``rl_envs.RandomPolicy``.
        frames_per_batch: frames per batch (sub-envs x steps); a multiple of the number
            of sub-envs.
        total_frames: frames to collect in total, ``-1`` for an endless iterator.
        **options: the rest of :class:`~rl_collectors.CollectorOptions` (keyword-only):
            ``max_frames_per_traj``, ``init_random_frames``, ``reset_at_each_iter``,
            ``split_trajs``, ``exploration_type``, ``reset_when_done``, ``env_device``,
            ``policy_device``, ``storing_device``, ``postproc``, ``replay_buffer``,
            ``post_collect_hook``, ``weight_updater``, and the performance knobs
            ``compile_policy``, ``cudagraph_policy``, ``trust_policy``, ``no_cuda_sync``,
            and ``check_finite`` (a NaN/inf guard, once per batch).

    Raises:
        ValueError: an argument is out of range (the message names it).
        CollectorError: the policy does not write the action key, or fails on the first
            input.

    Examples:
        >>> from rl_envs import GymEnv
        >>> collector = Collector(lambda: GymEnv("CartPole-v1", num_envs=2),
        ...                       frames_per_batch=8, total_frames=16)
        >>> for batch in collector:
        ...     print(batch.batch_size)
        torch.Size([2, 4])
        torch.Size([2, 4])
        >>> sorted(batch["collector"].keys())
        ['policy_version', 'traj_ids']
        >>> collector.shutdown()
    """

    def __init__(
        self,
        create_env_fn: Any,
        policy: Any = None,
        *,
        frames_per_batch: int,
        total_frames: int = -1,
        **options: Any,
    ) -> None:
        self.env = build_env(create_env_fn)
        self.options = opts = CollectorOptions(**options)
        num_rows = self.env.batch_size.numel()
        opts.check_frames(frames_per_batch, total_frames, num_rows)
        self.frames_per_batch, self.total_frames = frames_per_batch, total_frames
        self.steps = frames_per_batch // num_rows
        self.env_device = (
            torch.device(opts.env_device) if opts.env_device is not None else self.env.device
        )
        self.policy_device = (
            torch.device(opts.policy_device) if opts.policy_device is not None else self.env_device
        )
        self.storing_device = (
            torch.device(opts.storing_device)
            if opts.storing_device is not None
            else self.env_device
        )
        self._source_policy = policy
        self.policy = prepare_policy(policy, self.env, self.policy_device)
        # every batch from RandomActor (no RandomPolicy call per step)
        self._random_only = policy is None
        self.weight_updater: WeightUpdaterBase = bind_updater(
            opts.weight_updater, self.policy, policy
        )
        self._build(shared=False)
        self._finite = FiniteCheck(self.env) if opts.check_finite else None
        self.frames = 0
        self.iterations = 0
        self.policy_version = 0
        self._seed: int | None = None  # the last set_seed, for reseeding on load
        self._traj = TrajCounter(num_rows)
        self._needs_reset = True
        self._closed = False
        self.init_worker_profiling(0)

    # -- construction ------------------------------------------------------------------
    def _build(self, shared: bool) -> None:
        """Probe the policy, pick the strategies, allocate the batch and its plan."""
        env_root, env_next = self.env.buffers()
        self._env_bufs = (env_root, env_next)
        probe = make_policy_input(env_root.clone())
        if self.policy_device != self.env_device:
            probe = probe.to(self.policy_device)
        opts = self.options
        self.out_keys = find_outputs(
            self.policy, probe, self.env.action_keys, opts.interaction, opts.trust_policy
        )
        if opts.trust_policy:
            self.env.action_checks_left = 0  # the env's value checks of the first actions
        outputs = probe.select(*self.out_keys).to(self.env_device)
        carried = {k[1:]: outputs.get(k) for k in self.out_keys if k[0] == NEXT and len(k) > 1}
        self.policy_input = make_policy_input(env_root)
        for key, value in carried.items():
            if key not in self.policy_input.keys(True, True):
                self.policy_input.set(key, torch.zeros_like(value))
        for key in self.out_keys:
            self.policy_input.set(key, outputs.get(key).clone())
        self._carry = carry_pairs(list(carried))  # the one carry rule: rl_envs.carry_state
        template = self.policy_input.exclude(*[k for k in self.out_keys if k[0] == NEXT])
        next_template = env_next.clone()
        for key in self.out_keys:
            if key[0] == NEXT:
                next_template.set(key[1:], outputs.get(key))
        self._templates = (template, next_template)
        self._choose_strategies()
        root_flags = [nested(k) for k in self.env.done_keys]
        # the env writes its observation straight into each batch where it can (one device,
        # no after-step hook that resets between steps): rl_envs.MovingObs
        same = {self.policy_device, self.env_device, self.storing_device} == {torch.device("cpu")}
        moving = (moving_obs_source(self.env, self.policy_input)
                  if same and not self._after_step else None)
        self._planner = BatchPlanner(self.policy_input, env_next, self.out_keys, root_flags,
                                     self._carry, self._after_step, moving)
        self._new_batch(shared, fresh=True)

    def _new_batch(self, shared: bool, fresh: bool = False) -> None:
        """Allocate a zeroed batch and its plan: the next steps are written there. After the
        first batch of a layout, laid out as the last one (``RolloutWriter.renew``)."""
        if fresh:
            self._writer = alloc_buffer(*self._templates, self.steps, self.storing_device)
        else:  # a small layout's batches share a slab, unless moved to shared memory
            self._writer = self._writer.renew(slab=not shared)
        self.buffer = self._writer.storage
        self._plan(shared)

    def _plan(self, shared: bool) -> None:
        """Build the batch's plan (numpy views of it) and bind the after-step hooks to it.

        ``share_memory_()`` moves storage, so it must happen before any view is taken.
        """
        if shared and not self.buffer.is_shared():
            self.buffer.share_memory_()
        self._shared = shared
        self._batch_plan = self._planner.plan(self._writer)
        if self._limit is not None:
            self._limit.bind(self.buffer)

    def _choose_strategies(self) -> None:
        opts = self.options
        forward = policy_forward(self.policy, opts, self.policy_device, self.out_keys)
        keys = [nested(k) for k in self.env.action_keys]
        action = env_action(keys)
        if self.policy_device != self.env_device:
            self._policy_actor: Any = DevicePolicyActor(
                forward, self.policy_input, self.out_keys, self.policy_device, action
            )
            if self.policy_device.type == "cuda" and not opts.no_cuda_sync:
                self._policy_actor = StreamSyncActor(self._policy_actor, self.policy_device)
        else:
            self._policy_actor = PolicyActor(forward, action)
        self._random_actor = RandomActor(self.env.full_action_spec, keys, action)
        self._after_step: list[Callable[[int], None]] = []
        self._limit = None
        if opts.max_frames_per_traj is not None:
            self._limit = TrajectoryLimit(self.env, opts.max_frames_per_traj)
            self._after_step.append(self._limit)

    # -- the rollout loop: rl_envs.step_loop, the one every rollout runs ----------------
    def _run(self, steps: int, actor: Any) -> None:
        """Run ``steps`` steps of ``rl_envs.step_loop``, writing step ``t`` into
        ``buffer[..., t]``; the policy's and the env's time are measured, the copies' time
        is the rest of the batch's (the loop's own cost included)."""
        plan = self._batch_plan
        if actor.writes_batch:  # its outputs are in the batch already: nothing to carry
            plan = dataclasses.replace(plan, outs=[], carry=[])
        if plan.moving is not None:  # an actor that reads no observation needs no slot views
            plan.moving.rebind = getattr(actor, "reads_input", True)
        _, t_policy, t_env, total = step_loop(steps, actor, self.env.fast_step, plan)
        self._credit_steps(t_policy, t_env, total - t_policy - t_env, steps)

    @profiled("Collector.rollout")
    def _collect(self, steps: int) -> TensorDictBase:
        """Fill ``buffer[..., :steps]`` (no copy) and return that view."""
        if self._closed:
            raise CollectorClosedError("Collector: rollout() after shutdown()")
        new_start = self._start_batch()
        if self._writer.views_moved():  # its slab moved (another batch of it was shared)
            self._plan(self._shared)
        random = self._random_only or self.frames < self.options.init_random_frames
        if random:
            self._random_actor.begin(steps, self.policy_input, self.buffer)
        with (
            self._hook(),
            self.timing.add_time("rollout"),
            torch.no_grad(),
            exploration_context(self.options.interaction),
        ):
            self._run(steps, self._random_actor if random else self._policy_actor)
        view = self.buffer[..., :steps] if steps < self.steps else self.buffer
        rows = self._traj.num_rows
        # a whole slab batch: its numpy views (time first), made already; no torch op
        arrays = self._writer.arrays() if view is self.buffer else None
        if arrays is not None:
            self._traj.assign(arrays[(NEXT, DONE)].reshape(steps, rows).T,
                              new_start=new_start, out=arrays[TRAJ_IDS], time_first=True)
            arrays[POLICY_VERSION].fill(self.policy_version)
        else:
            done = view.get((NEXT, DONE)).reshape(rows, steps)
            ids = view.get(TRAJ_IDS)
            if ids.device.type == "cpu" and done.device.type == "cpu":  # written in place
                self._traj.assign(done, new_start=new_start, out=ids.numpy())
            else:
                ids.copy_(self._traj.assign(done, new_start=new_start).reshape(view.batch_size))
            view.get(POLICY_VERSION).fill_(self.policy_version)
        if self._finite is not None:
            self._finite(view, self.frames, arrays)
        self.frames += view.numel()
        self.iterations += 1
        return view

    def _start_batch(self) -> bool:
        """Reset the env when needed; returns whether every sub-env starts a trajectory."""
        root, nxt = self.env.buffers()
        if root is not self._env_bufs[0] or nxt is not self._env_bufs[1]:
            self._build(shared=self._shared)  # the env rebuilt its buffers
        if not (self._needs_reset or self.options.reset_at_each_iter):
            return False
        reset_where(self.env)
        if self._limit is not None:
            self._limit.reset()
        self._needs_reset = False
        return True

    def _hand_out(self, view: TensorDictBase) -> TensorDictBase:
        """Give ``view`` (the batch just written) to the caller and write the next batch into
        a new one: the caller owns the data without a copy of it (``bench_layout.py``)."""
        self._new_batch(self._shared)
        return view

    def rollout(self) -> TensorDictBase:
        """Collect one batch of ``frames_per_batch`` frames and return it (a new TensorDict)."""
        return self._hand_out(self._collect(self.steps))

    def _next_steps(self) -> int:
        if self.total_frames < 0:
            return self.steps
        return min(self.steps, (self.total_frames - self.frames) // self._traj.num_rows)

    def __iter__(self) -> Iterator[TensorDictBase | None]:
        while self.total_frames < 0 or self.frames < self.total_frames:
            view = self._collect(self._next_steps())
            opts = self.options
            # a replay buffer copies what it stores: hand it the view unless postproc may edit it
            no_copy = opts.replay_buffer is not None and opts.postproc is None
            yield self.options.deliver(view if no_copy else self._hand_out(view))

    # -- hosting: the interface of the runtimes that run a Collector as a worker ---------
    # Called by WorkerRuntime (_worker.py), RankRuntime (_distributed_worker.py, also the
    # RPC collector's) and CollectorActor (_ray_actor.py); not public API.
    def bind_worker(self, worker_idx: int, num_workers: int) -> None:
        """Make this collector worker ``worker_idx`` of ``num_workers`` (internal interface).

        Trajectory ids become ``k * num_workers + worker_idx`` (unique across workers
        without communication), and profiling and the ``Timing`` title use the worker
        index (:meth:`init_worker_profiling`). The runtime that hosts the collector in a
        worker process, rank or Ray actor calls it once, right after construction. Not
        public API: the multi-process and remote collectors do this for their workers, so
        users (and TorchRL code) never call it.

        Args:
            worker_idx: this worker's index, ``0 <= worker_idx < num_workers``.
            num_workers: how many workers share the trajectory-id space.

        Raises:
            ValueError: ``worker_idx`` is not in ``[0, num_workers)``.
        """
        if not 0 <= worker_idx < num_workers:
            raise ValueError(
                f"bind_worker: expected 0 <= worker_idx < num_workers={num_workers}, "
                f"got {worker_idx}"
            )
        self.init_worker_profiling(worker_idx)
        self._traj = TrajCounter(self._traj.num_rows, stride=num_workers, offset=worker_idx)

    def share_buffer(self) -> None:
        """Move the batch into shared memory and rebuild its plan (internal).

        ``WorkerRuntime`` calls it before sending the batch to the main process, which
        then reads every batch the worker writes without a copy through the pipe. Not
        public API (users never call it).
        """
        self._plan(shared=True)

    def collect_view(self, steps: int) -> TensorDictBase:
        """Collect the next ``steps`` steps and return that view of the batch (internal).

        No copy: the next call overwrites the view, so the caller ships or copies it
        first (shared memory, a flat byte buffer, Ray's serialisation). The worker
        runtimes call it to collect the share of a batch their driver asked for. Not
        public API: :meth:`rollout` (a full batch, copied) and iteration are the user's
        ways to collect.

        Args:
            steps: steps per sub-env, ``1 <= steps <= frames_per_batch // num_sub_envs``.

        Returns:
            ``buffer[..., :steps]`` (the whole buffer when ``steps`` is the full length).

        Raises:
            CollectorClosedError: the collector was shut down.
        """
        return self._collect(steps)

    # -- weights (seeds and state: ``CollectorStateMixin``) -------------------------------
    @profiled("Collector.update_policy_weights_")
    def update_policy_weights_(self, policy_or_weights: Any = None) -> int:
        """Copy new weights into the collector's policy (in place) and bump the version.

        Args:
            policy_or_weights: an ``nn.Module`` or a TensorDict of weights; ``None`` reads
                the policy given at construction (a no-op copy when the collector uses
                that very module).

        Returns:
            The new policy version.
        """
        self.policy_version = self.weight_updater.push(policy_or_weights)
        return self.policy_version

    # -- lifecycle ----------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop profiling and close the env; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop_profiling()
        self.env.close()

    def __repr__(self) -> str:
        return (
            f"Collector(env={self.env!r}, frames_per_batch={self.frames_per_batch}, "
            f"total_frames={self.total_frames}, frames={self.frames})"
        )
