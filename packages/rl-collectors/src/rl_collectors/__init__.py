"""Data collectors (single, multi-process, async-batched, distributed) and weight sync.

``Collector`` steps one batched env with a policy into preallocated ``[*B, T]``
batches; ``MultiSyncCollector`` / ``MultiAsyncCollector`` / ``AsyncCollector`` run
Collectors in spawned worker processes with batches in shared memory;
``AsyncBatchedCollector`` steps envs independently around an inference server;
``RayCollector``, ``DistributedDataCollector`` / ``DistributedSyncDataCollector`` and
``RPCDataCollector`` run Collectors on other processes or nodes.
"""

from __future__ import annotations

from rl_collectors import weight_sync
from rl_collectors._async_batched import AsyncBatchedCollector
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
from rl_collectors._options import CollectorOptions
from rl_collectors._ray import RayCollector
from rl_collectors._ray_weight_sync import RayWeightUpdater
from rl_collectors._rpc import RPCDataCollector
from rl_collectors._traj import TrajCounter, split_trajectories
from rl_collectors.exceptions import CollectorClosedError, CollectorError, WorkerError

__version__ = "0.1.0"

__all__ = [
    "AsyncBatchedCollector",
    "AsyncCollector",
    "Collector",
    "CollectorClosedError",
    "CollectorError",
    "CollectorOptions",
    "DistributedDataCollector",
    "DistributedSyncDataCollector",
    "MultiAsyncCollector",
    "MultiCollector",
    "MultiSyncCollector",
    "RPCDataCollector",
    "RayCollector",
    "RayWeightUpdater",
    "TrajCounter",
    "WorkerError",
    "__version__",
    "serve_distributed_collector",
    "split_trajectories",
    "submitit_delayed_launcher",
    "weight_sync",
]
