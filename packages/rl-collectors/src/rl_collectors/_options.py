"""``CollectorOptions``: the keyword options every collector accepts, validated once;
``RemoteOptions``: those the remote collectors share."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tensordict.nn import InteractionType

from rl_collectors._policy import resolve_interaction

__all__ = ["CollectorOptions", "RemoteOptions"]


def _check_count(name: str, value: Any, minimum: int, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"{name}: expected an int >= {minimum}{' or None' if allow_none else ''}, got {value!r}"
        )


_ONE_FOR_ALL = "one value for every worker: each worker runs the same Collector"
_NOT_PREEMPTED = "slow workers are not pre-empted: MultiAsyncCollector yields the first batch ready"
TORCHRL_ONLY = {
    "devices": f"pass env_device= / policy_device= / storing_device=, {_ONE_FOR_ALL}",
    "storing_devices": f"pass storing_device=, {_ONE_FOR_ALL}",
    "env_devices": f"pass env_device=, {_ONE_FOR_ALL}",
    "policy_devices": f"pass policy_device=, {_ONE_FOR_ALL}",
    "create_env_kwargs": "bind them into the constructor: functools.partial(make_env, **kwargs)",
    "interruptor": _NOT_PREEMPTED,
    "preemptive_threshold": _NOT_PREEMPTED,
    "use_buffers": "batches are always written into preallocated buffers",
    "cat_results": "MultiSyncCollector stacks the workers' batches as [num_workers, *batch, T]: "
    "reshape as needed",
    "track_policy_version": 'every batch carries ("collector", "policy_version") already',
    "set_truncated": 'truncation is always marked: ("next", "truncated") is set at '
    "max_frames_per_traj",
    "trajs_per_batch": "batches hold frames_per_batch frames, not whole episodes: "
    "split_trajectories(batch) (padded, or as_nested=True) gives them per episode",
    "traj_format": "batches hold frames_per_batch frames, not whole episodes: "
    "split_trajectories(batch) (padded, or as_nested=True) gives them per episode",
    "auto_register_policy_transforms": "the env is never changed by the collector: append "
    "InitTracker() and module.make_tensordict_primer() to it yourself",
}
"""TorchRL collector arguments that have no counterpart here, and what to do instead."""


@dataclass
class CollectorOptions:
    """Options of :class:`~rl_collectors.Collector` (and of each worker's Collector).

    Attributes:
        max_frames_per_traj: truncate (``("next", "truncated")`` set) and reset a sub-env
            after this many steps; ``None`` for no limit.
        init_random_frames: collect this many frames with ``RandomPolicy`` before the
            policy is used (whole batches: a batch that starts below it is random).
        reset_at_each_iter: reset every sub-env at the start of each batch.
        split_trajs: yield ``split_trajectories(batch)`` instead of the ``[*B, T]`` batch.
        exploration_type: the ``tensordict.nn.InteractionType`` (or its name) set while
            the policy runs (``"random"``: sample; ``"deterministic"``/``"mode"``: greedy).
        reset_when_done: finished sub-envs are reset by the env's fast path; only
            ``True`` is supported.
        device: TorchRL's shorthand: the default of ``env_device``, ``policy_device`` and
            ``storing_device`` (each one given explicitly wins).
        env_device: device of the env's tensors (default: ``env.device``).
        policy_device: where the policy runs (default: the env device); a module is
            copied there and fed through preallocated buffers.
        storing_device: where batches are stored (default: the env device).
        postproc: ``batch -> batch`` applied to each batch before it is yielded.
        replay_buffer: an object with ``extend(batch)``: batches are written into it and
            iteration yields ``None``.
        post_collect_hook: ``batch -> None`` called on each batch (after ``postproc``).
        weight_updater: a :class:`~rl_collectors.weight_sync.WeightUpdaterBase`; default
            :class:`~rl_collectors.weight_sync.VanillaWeightUpdater`.
        compile_policy: run the policy through ``torch.compile`` (``True``, or a dict of
            ``torch.compile`` keyword arguments such as ``{"backend": "aot_eager"}``);
            compiled lazily on the first rollout (seconds to tens of seconds on a CPU),
            then every forward runs the compiled graph. Weights stay shared with the
            eager module, so weight updates need no recompilation.
        cudagraph_policy: wrap the policy in ``tensordict.nn.CudaGraphModule`` (``True``
            or a dict of its keyword arguments) when it runs on a CUDA device: one graph
            launch per forward instead of one per kernel. Inert (logged) elsewhere.
            Both follow the rules of ``docs/compile.md``, as ``make_update_step`` does.
        trust_policy: skip the output checks: the construction probe still learns the
            keys the policy writes but no longer checks them (action written, env keys
            kept, in-place semantics), and the env's value checks of the first actions
            are skipped. Errors then surface later, and less clearly.
        no_cuda_sync: skip the ``torch.cuda`` stream synchronisation after a policy that
            runs on another device than the env (``policy_device != env_device``).
            Inert without CUDA.
        check_finite: check each batch's observations, floating-point actions and rewards
            for NaN and inf (SB3's ``VecCheckNan``, TorchRL's ``FiniteTensorDictCheck``),
            once per batch: ``rl_envs.NonFiniteError`` names the key, the sub-env and the
            step of the first one, before the batch is yielded or stored.

    Examples:
        >>> CollectorOptions(init_random_frames=100).interaction
        <InteractionType.RANDOM: 'random'>
        >>> CollectorOptions(max_frames_per_traj=0)
        Traceback (most recent call last):
        ...
        ValueError: max_frames_per_traj: expected an int >= 1 or None, got 0
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> CollectorOptions:
        # TorchRL's arguments with no counterpart: name what to use instead (not a bare TypeError)
        for name in TORCHRL_ONLY.keys() & kwargs.keys():
            raise TypeError(
                f"{name}: TorchRL's argument is not supported by the collectors here; "
                f"{TORCHRL_ONLY[name]}"
            )
        return super().__new__(cls)

    max_frames_per_traj: int | None = None
    init_random_frames: int = 0
    reset_at_each_iter: bool = False
    split_trajs: bool = False
    exploration_type: Any = InteractionType.RANDOM
    reset_when_done: bool = True
    device: Any = None
    env_device: Any = None
    policy_device: Any = None
    storing_device: Any = None
    postproc: Callable[[Any], Any] | None = None
    replay_buffer: Any = None
    post_collect_hook: Callable[[Any], None] | None = None
    weight_updater: Any = None
    compile_policy: bool | dict[str, Any] = False
    cudagraph_policy: bool | dict[str, Any] = False
    trust_policy: bool = False
    no_cuda_sync: bool = False
    check_finite: bool = False

    def __post_init__(self) -> None:
        _check_count("max_frames_per_traj", self.max_frames_per_traj, 1, allow_none=True)
        _check_count(
            "init_random_frames",
            self.init_random_frames if self.init_random_frames is not None else 0,
            0,
        )
        self.init_random_frames = self.init_random_frames or 0
        if self.device is not None:  # TorchRL: fills in the devices not given
            for name in ("env_device", "policy_device", "storing_device"):
                if getattr(self, name) is None:
                    setattr(self, name, self.device)
        self.interaction = resolve_interaction(self.exploration_type)
        if self.reset_when_done is not True:
            raise ValueError(
                "reset_when_done: only True is supported (the env's fast path resets finished "
                f"sub-envs in the step that finished them), got {self.reset_when_done!r}"
            )
        for name in ("postproc", "post_collect_hook"):
            value = getattr(self, name)
            if value is not None and not callable(value):
                raise TypeError(f"{name}: expected a callable or None, got {type(value).__name__}")
        for name in ("compile_policy", "cudagraph_policy"):
            value = getattr(self, name)
            if not isinstance(value, (bool, dict)):
                raise TypeError(
                    f"{name}: expected a bool or a dict of keyword arguments, got {value!r}"
                )
        for name in ("trust_policy", "no_cuda_sync", "check_finite"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name}: expected a bool, got {getattr(self, name)!r}")
        if self.replay_buffer is not None and not hasattr(self.replay_buffer, "extend"):
            raise TypeError(
                "replay_buffer: expected an object with extend(batch), "
                f"got {type(self.replay_buffer).__name__}"
            )

    def deliver(self, batch: Any) -> Any:
        """Apply ``split_trajs``, ``postproc``, ``post_collect_hook`` and ``replay_buffer``.

        Every collector hands each batch through here: it returns the batch to yield, or
        ``None`` when a replay buffer took it.
        """
        from rl_collectors._traj import split_trajectories

        if self.split_trajs:
            batch = split_trajectories(batch)
        if self.postproc is not None:
            batch = self.postproc(batch)
        if self.post_collect_hook is not None:
            self.post_collect_hook(batch)
        if self.replay_buffer is None:
            return batch
        self.replay_buffer.extend(batch)
        return None

    @staticmethod
    def check_frames(frames_per_batch: Any, total_frames: Any, num_rows: int) -> None:
        """Validate ``frames_per_batch``/``total_frames`` for ``num_rows`` sub-envs (x workers)."""
        _check_count("frames_per_batch", frames_per_batch, 1)
        if frames_per_batch % num_rows:
            raise ValueError(
                f"frames_per_batch: expected a multiple of the number of sub-envs ({num_rows}), "
                f"got {frames_per_batch}"
            )
        if (
            isinstance(total_frames, bool)
            or not isinstance(total_frames, int)
            or (total_frames < 1 and total_frames != -1)
        ):
            raise ValueError(
                f"total_frames: expected an int >= 1, or -1 for no limit, got {total_frames!r}"
            )
        if total_frames > 0 and total_frames % num_rows:
            raise ValueError(
                f"total_frames: expected a multiple of the number of sub-envs ({num_rows}) so "
                f"that it is honoured exactly, got {total_frames}"
            )


@dataclass
class RemoteOptions:
    """Options of the remote collectors (:class:`~rl_collectors.RayCollector`,
    :class:`~rl_collectors.DistributedDataCollector`, :class:`~rl_collectors.RPCDataCollector`),
    documented once here.

    Each field is also a keyword argument of those collectors, under the same (TorchRL's)
    name: ``RayCollector(make_env, policy, frames_per_batch=200, num_collectors=2)``. Build
    a ``RemoteOptions`` to reuse a set of them (``options=opts``); keywords given beside
    it replace its fields. A keyword that is no field raises ``TypeError`` naming it.

    Attributes:
        num_collectors: number of remote collectors (ranks, RPC workers or actors);
            default: the length of ``create_env_fn`` when it is a list, else 1.
        collector_class: the collector each one hosts (``None``: ``Collector``).
        collector_kwargs: its keyword options (see :class:`CollectorOptions`);
            ``postproc``, ``replay_buffer``, ``post_collect_hook`` and ``split_trajs`` run
            on the trainer.
        num_workers_per_collector: env copies given to a ``MultiCollector`` class.
        update_after_each_batch: push the policy's weights after each yielded batch.
        timeout: seconds a batch or a reply may take before the remote collector is
            declared hung.
        start_timeout: seconds the remote collectors may take to start (process,
            imports, env).
        launcher: how the torch.distributed and RPC collectors start their ranks:
            ``"mp"`` (processes on this machine), ``"submitit"`` (one job per rank),
            ``"submitit_delayed"`` (ranks started by ``submitit_delayed_launcher``;
            torch.distributed only) or ``None`` (the process group you initialised, e.g.
            under torchrun; torch.distributed only). Ray starts its own actors.
        tcp_port: the trainer's store port; ``None`` picks a free one (not for
            ``"submitit_delayed"``, whose jobs need to know it).
        master_addr: the address ranks connect to (default: ``127.0.0.1`` for local
            launchers, this host's name for Slurm).
        submitit_executor: ``"auto"``, ``"slurm"``, ``"local"`` or a submitit Executor.
        submitit_folder: submitit's log folder.
        slurm_kwargs: submitit ``update_parameters`` for the collector jobs.
        num_threads: ``torch.set_num_threads`` on each rank (``None``: leave it); Ray
            actors get their CPUs from ``remote_config`` instead.

    Examples:
        >>> opts = RemoteOptions(num_collectors=2, timeout=60.0)
        >>> opts.launcher, opts.timeout
        ('mp', 60.0)
        >>> RemoteOptions(timeout=0)
        Traceback (most recent call last):
        ...
        ValueError: timeout: expected a number of seconds > 0, got 0
    """

    num_collectors: int | None = None
    collector_class: type | None = None
    collector_kwargs: dict[str, Any] | None = None
    num_workers_per_collector: int = 1
    update_after_each_batch: bool = False
    timeout: float = 300.0
    start_timeout: float = 300.0
    launcher: str | None = "mp"
    tcp_port: int | None = None
    master_addr: str | None = None
    submitit_executor: Any = "auto"
    submitit_folder: str = "submitit_logs"
    slurm_kwargs: dict[str, Any] | None = None
    num_threads: int | None = 1

    LAUNCH_FIELDS = ("launcher", "tcp_port", "master_addr", "submitit_executor", "submitit_folder",
                     "slurm_kwargs", "num_threads", "num_workers_per_collector")
    """The fields ``RayCollector`` has no use for: they must keep their defaults there."""

    def __post_init__(self) -> None:
        _check_count("num_collectors", self.num_collectors, 1, allow_none=True)
        _check_count("num_workers_per_collector", self.num_workers_per_collector, 1)
        _check_count("num_threads", self.num_threads, 1, allow_none=True)
        if self.collector_class is not None and not isinstance(self.collector_class, type):
            raise TypeError(
                f"collector_class: expected a collector class, got {self.collector_class!r}"
            )
        for name in ("timeout", "start_timeout"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name}: expected a number of seconds > 0, got {value!r}")

    @classmethod
    def merge(
        cls, owner: str, options: RemoteOptions | None, keywords: dict[str, Any]
    ) -> RemoteOptions:
        """``options`` (or the defaults) with a collector's keyword arguments applied.

        Raises:
            TypeError: ``options`` is not a ``RemoteOptions``, or a keyword is no field
                (TorchRL-only names say what to use instead).
        """
        fields = {f.name for f in dataclasses.fields(cls)}
        for name in sorted(keywords.keys() - fields):
            hint = TORCHRL_ONLY.get(
                name, f"expected one of RemoteOptions' fields: {', '.join(sorted(fields))}"
            )
            raise TypeError(f"{owner}: unexpected keyword argument {name!r}; {hint}")
        if options is None:
            return cls(**keywords)
        if not isinstance(options, cls):
            raise TypeError(f"options: expected a RemoteOptions, got {type(options).__name__}")
        return dataclasses.replace(options, **keywords)

    def refuse_launch_fields(self, owner: str) -> None:
        """Raise ``ValueError`` naming a launch field set away from its default (Ray)."""
        for f in dataclasses.fields(self):
            if f.name in self.LAUNCH_FIELDS and getattr(self, f.name) != f.default:
                raise ValueError(
                    f"{f.name}: {owner} starts its actors through Ray and does not take it "
                    f"(got {getattr(self, f.name)!r}); give actors resources with remote_config"
                )
