"""What rl-migrate maps: TorchRL's module paths, the packages searched for a name, the
arguments with no counterpart, and the migration page's row for each gap.

The names themselves are in ``_names.py``, generated from the packages' ``__all__`` (a
root test keeps it exact).
"""

from __future__ import annotations

__all__ = [
    "ARGS", "DOCS_PAGE", "NO_COUNTERPART", "PACKAGES", "PATHS", "ROWS", "all_rows", "row_for",
]

DOCS_PAGE = "docs/migrating-from-torchrl.md"

PACKAGES = (
    "rl_envs",
    "rl_collectors",
    "rl_replay",
    "rl_objectives",
    "rl_modules",
    "rl_recurrent",
    "rl_record",
    "rl_trainers",
)
"""Where a name is looked up, in this order (the first package exporting it wins)."""

PATHS: dict[str, str | None] = {
    "torchrl.envs": "rl_envs",
    "torchrl.envs.utils": "rl_envs.utils",
    "torchrl.envs.libs": "rl_envs.libs",
    "torchrl.envs.libs.gym": "rl_envs.libs.gym",
    "torchrl.envs.transforms": "rl_envs.transforms",
    "torchrl.envs.transforms.transforms": "rl_envs.transforms",
    "torchrl.envs.common": "rl_envs",
    "torchrl.envs.batched_envs": "rl_envs",
    "torchrl.data": None,
    "torchrl.data.tensor_specs": "rl_envs",
    "torchrl.data.postprocs": "rl_replay.postprocs",
    "torchrl.data.replay_buffers": "rl_replay.replay_buffers",
    "torchrl.data.replay_buffers.samplers": "rl_replay.replay_buffers.samplers",
    "torchrl.data.replay_buffers.storages": "rl_replay.replay_buffers.storages",
    "torchrl.data.replay_buffers.writers": "rl_replay.replay_buffers.writers",
    "torchrl.data.replay_buffers.replay_buffers": "rl_replay.replay_buffers",
    "torchrl.collectors": "rl_collectors",
    "torchrl.collectors.collectors": "rl_collectors",
    "torchrl.collectors.utils": "rl_collectors",
    "torchrl.collectors.weight_update": "rl_collectors.weight_sync",
    "torchrl.objectives": "rl_objectives",
    "torchrl.objectives.utils": "rl_objectives.utils",
    "torchrl.objectives.value": "rl_objectives.value",
    "torchrl.objectives.value.advantages": "rl_objectives.value",
    "torchrl.objectives.value.functional": "rl_objectives.value.functional",
    "torchrl.modules": "rl_modules",
    "torchrl.modules.distributions": "rl_modules",
    "torchrl.modules.distributions.continuous": "rl_modules",
    "torchrl.modules.distributions.discrete": "rl_modules",
    "torchrl.modules.tensordict_module": "rl_modules",
    "torchrl.modules.models": "rl_modules",
    "torchrl.record": "rl_record",
    "torchrl.record.loggers": "rl_record",
    "torchrl.record.loggers.csv": "rl_record",
    "torchrl.record.loggers.tensorboard": "rl_record",
    "torchrl.record.loggers.wandb": "rl_record",
    "torchrl.record.loggers.mlflow": "rl_record",
    "torchrl.trainers": "rl_trainers",
    "torchrl.trainers.trainers": "rl_trainers",
    "torchrl._utils": "rl_profiling",
}
"""TorchRL module -> the module here that keeps its shape (``None``: split, by name)."""

_COLLECTORS = (
    "Collector", "SyncDataCollector", "MultiCollector", "MultiSyncCollector",
    "MultiAsyncCollector", "MultiSyncDataCollector", "MultiaSyncDataCollector",
    "AsyncCollector", "aSyncDataCollector",
)
_COLLECTOR_ARGS = (
    "devices", "storing_devices", "env_devices", "policy_devices",
    "create_env_kwargs", "interruptor", "preemptive_threshold", "use_buffers", "cat_results",
    "track_policy_version", "set_truncated", "trajs_per_batch", "traj_format",
    "auto_register_policy_transforms",
)
_BATCHED = ("SerialEnv", "ParallelEnv")
_BATCHED_ARGS = (
    "shared_memory", "memmap", "mp_start_method", "use_buffers", "num_threads", "daemon",
)
_ESTIMATORS = ("GAE", "TD0Estimator", "TD1Estimator", "TDLambdaEstimator", "VTrace")
_ESTIMATOR_ARGS = ("vectorized", "advantage_key", "value_target_key", "value_key")
_RECURRENT = ("LSTMModule", "GRUModule")
_RECURRENT_ARGS = ("batch_first", "bidirectional")

ROWS: dict[str, str] = {
    "collectors": "Collector arguments with no counterpart",
    "batched envs": "`SerialEnv` / `ParallelEnv` arguments",
    "estimators": "Value-estimator arguments",
    "recurrent": "`LSTMModule` / `GRUModule` arguments",
}
"""A family of refused arguments -> the first words of its row on the migration page."""

ARGS: dict[tuple[str, str], tuple[str, str]] = {
    **{(c, a): ("collectors", ROWS["collectors"]) for c in _COLLECTORS for a in _COLLECTOR_ARGS},
    **{(c, a): ("batched envs", ROWS["batched envs"]) for c in _BATCHED for a in _BATCHED_ARGS},
    **{(c, a): ("estimators", ROWS["estimators"]) for c in _ESTIMATORS for a in _ESTIMATOR_ARGS},
    **{(c, a): ("recurrent", ROWS["recurrent"]) for c in _RECURRENT for a in _RECURRENT_ARGS},
}
"""``(TorchRL class, keyword)`` refused here -> ``(family, its row on the page)``."""

_FAMILIES: dict[str, tuple[str, ...]] = {
    "`torchrl._utils` helpers": ("torchrl_logger", "logger", "timeit", "_utils", "VERBOSE",
                                 "merge_ray_runtime_env"),
    "Replay: n-step and slice samplers": (
        "LazyStackStorage", "RayReplayBuffer"),
    "Transforms not here yet": ("RNDTransform", "R3MTransform",
                                "VIPTransform", "BatchSizeTransform", "RandomCropTensorDict"),
}
_PREFIXES: dict[str, tuple[str, ...]] = {
    "Other simulators and their envs": ("torchrl.envs.libs.",),
    "LLM and VLA stacks": ("torchrl.envs.llm", "torchrl.modules.llm", "torchrl.objectives.llm",
                           "torchrl.data.llm", "torchrl.collectors.llm", "torchrl.weight_update",
                           "torchrl.modules.vla", "torchrl.data.vla"),
    "Trainers, configs and checkpoints": ("torchrl.trainers.", "torchrl.checkpoint"),
    "Datasets": ("torchrl.data.datasets",),
}
NO_COUNTERPART = "Names with no counterpart yet"
"""The migration page's row for a name with no more specific row."""


def row_for(name: str, module: str = "") -> str:
    """The migration page's row for a TorchRL name (from ``module``) with no counterpart.

    Examples:
        >>> row_for("merge_ray_runtime_env")
        '`torchrl._utils` helpers'
        >>> row_for("DMControlEnv", "torchrl.envs.libs.dm_control")
        'Other simulators and their envs'
    """
    for row, names in _FAMILIES.items():
        if name in names:
            return row
    for row, prefixes in _PREFIXES.items():
        if module.startswith(prefixes):
            return row
    if name.endswith("Env"):
        return "Other simulators and their envs"
    return NO_COUNTERPART


def all_rows() -> list[str]:
    """Every row title rl-migrate may print (the page must have each)."""
    return [*ROWS.values(), *_FAMILIES, *_PREFIXES, NO_COUNTERPART]
