"""RayCollector, DistributedDataCollector, RPCDataCollector vs MultiSyncCollector: throughput
and start-up.

Same env (``GymEnv("CartPole-v1", num_envs=8,
                   categorical_action_encoding=True)`` per worker), same policy (a 4-64-64-2
MLP, greedy action), same batch (1600 frames = 2 x 8 envs x 100 steps), measured in the
same run:

1. frames/s of each after one warm-up batch, over at least 6 batches and 2 s; the
   figure is RayCollector/MultiSync
   (target >= 0.8: Ray serialises each batch through its object store, the
   multi-process collectors share memory).
2. start-up (constructor to first batch ready to ask for) of each; RayCollector's
   includes ``ray.init`` of a local instance, reported separately from its actors.
3. the same two figures for ``DistributedSyncDataCollector`` (gloo over loopback, 2
   ranks started with ``launcher="mp"``) and ``RPCDataCollector(sync=True)`` (TensorPipe,
   2 RPC workers): each batch crosses a socket once as one flat byte tensor.

Ray's ``uv run`` runtime-env hook is switched off (``RAY_ENABLE_UV_RUN_RUNTIME_ENV=0``):
the actors use this very virtual environment (see ``docs/distributed.md``).

Run: ``uv run --no-sync python benchmarks/bench_distributed.py``.
"""

from __future__ import annotations

import os
import time
from functools import partial
from typing import Any

import torch
from tensordict.nn import TensorDictModule, TensorDictSequential

FRAMES_PER_BATCH = 1600
BATCHES = 6
MIN_SECONDS = 2.0
"""Each throughput figure is timed over at least ``BATCHES`` batches and this long (on a
fast machine six batches are under 0.1 s, where one scheduling hiccup moves the ratio)."""


def make_policy() -> TensorDictSequential:
    """4-64-64-2 MLP writing ``logits`` then the greedy ``action`` (picklable by name)."""
    mlp = torch.nn.Sequential(
        torch.nn.Linear(4, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 64),
        torch.nn.Tanh(),
        torch.nn.Linear(64, 2),
    )
    return TensorDictSequential(
        TensorDictModule(mlp, in_keys=["observation"], out_keys=["logits"]),
        TensorDictModule(partial(torch.argmax, dim=-1), in_keys=["logits"], out_keys=["action"]),
    )


def make_env_fn() -> Any:
    from rl_envs import GymEnv

    return partial(GymEnv, "CartPole-v1", num_envs=8, categorical_action_encoding=True)


def _measure(collector: Any) -> float:
    it = iter(collector)
    next(it)  # warm-up batch
    start = time.perf_counter()
    frames = batches = 0
    while batches < BATCHES or time.perf_counter() - start < MIN_SECONDS:
        frames += next(it).numel()
        batches += 1
    return frames / (time.perf_counter() - start)


def bench_multi_sync() -> tuple[float, float]:
    from rl_collectors import MultiSyncCollector

    start = time.perf_counter()
    collector = MultiSyncCollector(
        [make_env_fn()] * 2,
        make_policy(),
        frames_per_batch=FRAMES_PER_BATCH,
        total_frames=-1,
        start_timeout=600.0,
    )
    startup = time.perf_counter() - start
    try:
        return _measure(collector), startup
    finally:
        collector.shutdown()


def bench_ray() -> tuple[float, float, float]:
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    import ray
    from rl_collectors import RayCollector

    start = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray_init = time.perf_counter() - start
    try:
        start = time.perf_counter()
        collector = RayCollector(
            make_env_fn(),
            make_policy(),
            frames_per_batch=FRAMES_PER_BATCH,
            total_frames=-1,
            num_collectors=2,
            start_timeout=600.0,
        )
        actors = time.perf_counter() - start
        try:
            return _measure(collector), ray_init, actors
        finally:
            collector.shutdown()
    finally:
        ray.shutdown()


def bench_torch_distributed(kind: str) -> tuple[float, float]:
    """``kind``: ``"gloo"`` (DistributedSyncDataCollector) or ``"rpc"`` (RPCDataCollector)."""
    from rl_collectors import DistributedSyncDataCollector, RPCDataCollector

    cls = DistributedSyncDataCollector if kind == "gloo" else RPCDataCollector
    extra = {} if kind == "gloo" else {"sync": True}
    start = time.perf_counter()
    collector = cls(
        make_env_fn(),
        make_policy(),
        frames_per_batch=FRAMES_PER_BATCH,
        total_frames=-1,
        num_collectors=2,
        start_timeout=600.0,
        **extra,
    )
    startup = time.perf_counter() - start
    try:
        return _measure(collector), startup
    finally:
        collector.shutdown()


def _row(figure: str, value: float, limit: float, unit: str) -> dict:
    return {"figure": figure, "value": value, "unit": unit, "limit": limit, "ratio": value / limit}


def run() -> list[dict]:
    """All figures of this file (see the module docstring)."""
    multi_rate, multi_start = bench_multi_sync()
    ray_rate, ray_init, ray_actors = bench_ray()
    gloo_rate, gloo_start = bench_torch_distributed("gloo")
    rpc_rate, rpc_start = bench_torch_distributed("rpc")
    return [
        _row(
            "RayCollector 2 actors, CartPole x8 MLP: Ray/MultiSync frames/s (target >= 0.8)",
            ray_rate,
            multi_rate,
            "frames/s",
        ),
        _row(
            "RayCollector start-up, actors only: Ray/MultiSync start-up (lower is better)",
            ray_actors,
            multi_start,
            "s",
        ),
        _row(
            "RayCollector start-up incl. local ray.init: Ray/MultiSync start-up (lower is better)",
            ray_init + ray_actors,
            multi_start,
            "s",
        ),
        _row(
            "DistributedSyncDataCollector gloo 2 ranks: Dist/MultiSync frames/s (target >= 0.8)",
            gloo_rate,
            multi_rate,
            "frames/s",
        ),
        _row(
            "DistributedSyncDataCollector start-up: Dist/MultiSync start-up (lower is better)",
            gloo_start,
            multi_start,
            "s",
        ),
        _row(
            "RPCDataCollector sync 2 workers: RPC/MultiSync frames/s (target >= 0.8)",
            rpc_rate,
            multi_rate,
            "frames/s",
        ),
        _row(
            "RPCDataCollector start-up: RPC/MultiSync start-up (lower is better)",
            rpc_start,
            multi_start,
            "s",
        ),
    ]


if __name__ == "__main__":
    print(f"{'figure':<90} {'value':>10} {'limit':>10} {'unit':>9} {'ratio':>7}")
    for row in run():
        print(
            f"{row['figure']:<90} {row['value']:>10.1f} {row['limit']:>10.1f} {row['unit']:>9} "
            f"{row['ratio']:>7.2f}"
        )
