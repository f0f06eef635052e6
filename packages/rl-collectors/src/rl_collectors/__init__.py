"""Data collectors (single, multi-process, async-batched, distributed) and weight sync.

``Collector`` steps one batched env with a policy into preallocated ``[*B, T]``
batches; ``MultiSyncCollector`` / ``MultiAsyncCollector`` / ``AsyncCollector`` run
Collectors in spawned worker processes with batches in shared memory;
``AsyncBatchedCollector`` steps envs independently around an inference server;
``RayCollector``, ``DistributedDataCollector`` / ``DistributedSyncDataCollector`` and
``RPCDataCollector`` run Collectors on other processes or nodes. Every collector derives
from ``BaseCollector``.

TorchRL's older names are aliases of the same classes (``isinstance`` works with either):
``SyncDataCollector`` is ``Collector``, ``MultiSyncDataCollector`` is
``MultiSyncCollector``, ``MultiaSyncDataCollector`` is ``MultiAsyncCollector``,
``aSyncDataCollector`` is ``AsyncCollector`` and ``DataCollectorBase`` is ``BaseCollector``.
"""

from __future__ import annotations

from rl_collectors import weight_sync
from rl_collectors._async_batched import AsyncBatchedCollector
from rl_collectors._base import BaseCollector
from rl_collectors._checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    valid_checkpoint,
)
from rl_collectors._checkpointer import Checkpointer
from rl_collectors._collector import Collector
from rl_collectors._distributed import DistributedDataCollector, DistributedSyncDataCollector
from rl_collectors._distributed_worker import serve_distributed_collector
from rl_collectors._launchers import submitit_delayed_launcher
from rl_collectors._multi import (
    AsyncCollector,
    MultiAsyncCollector,
    MultiCollector,
    MultiSyncCollector,
)
from rl_collectors._options import CollectorOptions, RemoteOptions
from rl_collectors._ray import RayCollector
from rl_collectors._ray_weight_sync import RayWeightUpdater
from rl_collectors._remote_weight_sync import RemoteModuleWeightUpdater
from rl_collectors._rpc import RPCDataCollector
from rl_collectors._traj import TrajCounter, split_trajectories
from rl_collectors.exceptions import (
    CheckpointError,
    CollectorClosedError,
    CollectorError,
    WorkerError,
)
from rl_collectors.weight_sync import (
    MultiProcessedWeightUpdater,
    VanillaWeightUpdater,
    WeightUpdaterBase,
)

# TorchRL's names before 0.14 (same objects)
SyncDataCollector = Collector
MultiSyncDataCollector = MultiSyncCollector
MultiaSyncDataCollector = MultiAsyncCollector
aSyncDataCollector = AsyncCollector
DataCollectorBase = BaseCollector

__version__ = "0.1.0"

__all__ = [
    "AsyncBatchedCollector",
    "AsyncCollector",
    "BaseCollector",
    "CheckpointError",
    "Checkpointer",
    "Collector",
    "CollectorClosedError",
    "CollectorError",
    "CollectorOptions",
    "DataCollectorBase",
    "DistributedDataCollector",
    "DistributedSyncDataCollector",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiProcessedWeightUpdater",
    "MultiSyncCollector",
    "MultiSyncDataCollector",
    "MultiaSyncDataCollector",
    "RPCDataCollector",
    "RayCollector",
    "RayWeightUpdater",
    "RemoteModuleWeightUpdater",
    "RemoteOptions",
    "SyncDataCollector",
    "TrajCounter",
    "VanillaWeightUpdater",
    "WeightUpdaterBase",
    "WorkerError",
    "__version__",
    "aSyncDataCollector",
    "latest_checkpoint",
    "load_checkpoint",
    "save_checkpoint",
    "serve_distributed_collector",
    "split_trajectories",
    "submitit_delayed_launcher",
    "valid_checkpoint",
    "weight_sync",
]
