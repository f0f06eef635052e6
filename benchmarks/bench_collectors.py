"""Collector throughput against its limit, measured in the same run.

1. Random policy, ``GymEnv("CartPole-v1", num_envs=8,
                           categorical_action_encoding=True)``: limit = the plain gymnasium loop
   with random actions (target >= 0.8).
2. A ``TensorDictModule`` MLP policy (4-64-64-2, greedy action): limit = the plain loop
   calling the same network on the observations (target >= 0.75).
3. The numpy-vectorised CartPole with 4096 envs and the MLP (target >= 0.7).

   Rows 1-3 are medians over ``ROUNDS`` back-to-back (plain loop, collector) pairs of the
   per-pair ratio of frames/s by CPU time (as ``bench_envs.py``): one long timing of each
   swung 0.55-0.87 between runs on this shared machine. Each has a twin row with the
   same pairs timed by the wall clock (``time.perf_counter``, steady state: the
   collector's first batch is left out), the figure a user timing a run would see; the
   CPU-time figure leaves out the time this process waited for a core.
4. ``MultiSyncCollector`` / ``MultiAsyncCollector`` with 2 workers vs ``Collector`` on an
   env whose step burns ~0.5 ms of CPU (target >= 1.6x on 2 cores).
5. Uneven envs: 8 single envs whose step sleeps a random 0.1-2 ms (``time.sleep``, so
   the GIL is released like a C simulator or a remote env would):
   ``AsyncBatchedCollector`` (threading backend) vs ``MultiSyncCollector`` (2 workers x 4)
   vs ``Collector`` (``SerialEnv`` of 8), with the MLP; the limit of the async collector
   is the envs' own rate (8 / mean step time); the server's mean batch size; and
   ``compile_policy=True`` (inductor) on vs off.

Run: ``uv run --no-sync python benchmarks/bench_collectors.py``. With ``--floor``, only
row 1's floor (:func:`bench_floor`): the plain loop that also stores what a batch holds
into tensors preallocated ``[T, N]``, as a CleanRL loop does, beside the plain loop and
the collector (wall clock, interleaved).
"""

from __future__ import annotations

import importlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch
from tensordict.nn import TensorDictModule

SAME_STEP = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
SPIN_S = 0.0005
ROUNDS = 11
"""Interleaved (plain loop, collector) pairs per single-collector row."""


class ActorNet(torch.nn.Module):
    """4-64-64-2 MLP returning the greedy action."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(4, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 64),
            torch.nn.Tanh(),
            torch.nn.Linear(64, 2),
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.mlp(obs).argmax(-1)


class SpinWrapper(gym.Wrapper):
    """Burn ~0.5 ms of CPU per step (a stand-in for an expensive simulator)."""

    def step(self, action: Any) -> Any:
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:
            pass
        return self.env.step(action)


def _spin_cartpole() -> gym.Env:
    return SpinWrapper(gym.make("CartPole-v1"))


def make_slow_env() -> Any:
    """Two CartPoles whose steps cost ~0.5 ms each (importable by spawned workers)."""
    from rl_envs import GymWrapper

    venv = gym.vector.SyncVectorEnv(
        [_spin_cartpole] * 2, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, copy=False
    )
    return GymWrapper(venv)


def _rate(frames: int, seconds: float) -> float:
    return frames / seconds


def _iter_rate(collector: Any, batches: int, warmup: int = 1) -> float:
    """Frames/s (wall clock) of ``batches`` batches of ``collector``, after ``warmup`` ones."""
    it = iter(collector)
    for _ in range(warmup):
        next(it)
    start = time.perf_counter()
    frames = sum(next(it).numel() for _ in range(batches))
    return _rate(frames, time.perf_counter() - start)


def _plain_timed(
    env: gym.vector.VectorEnv, steps: int, net: torch.nn.Module | None
) -> Callable[[], tuple[float, float]]:
    """``steps`` steps of the plain loop per call: (frames/s by CPU time, by wall time)."""

    def timed() -> tuple[float, float]:
        obs, _ = env.reset()
        sample, step = env.action_space.sample, env.step
        wall, cpu = time.perf_counter(), time.process_time()
        with torch.no_grad():
            for _ in range(steps):
                action = sample() if net is None else net(torch.from_numpy(obs)).numpy()
                obs, *_ = step(action)
        frames = steps * env.num_envs
        return frames / (time.process_time() - cpu), frames / (time.perf_counter() - wall)

    return timed


def _plain_storing_timed(env: gym.vector.VectorEnv, steps: int,
                         per_batch: int) -> Callable[[], tuple[float, float]]:
    """The plain loop writing what a batch holds into tensors preallocated ``[T, N]`` (a
    CleanRL loop's buffers: observation, action, reward, the three flags, the next
    observation), ``per_batch`` steps a batch: the collector's work without its machinery."""
    n, dim = env.num_envs, env.single_observation_space.shape[0]
    bufs = {k: torch.zeros(per_batch, n, *shape, dtype=dt) for k, shape, dt in (
        ("obs", (dim,), torch.float32), ("next_obs", (dim,), torch.float32),
        ("action", (), torch.int64), ("reward", (), torch.float32),
        ("terminated", (), torch.bool), ("truncated", (), torch.bool),
        ("done", (), torch.bool))}

    def timed() -> tuple[float, float]:
        obs, _ = env.reset()
        sample, step = env.action_space.sample, env.step
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(steps):
            t = i % per_batch
            bufs["obs"][t] = torch.from_numpy(obs)
            action = sample()
            bufs["action"][t] = torch.from_numpy(action)
            obs, reward, term, trunc, _ = step(action)
            bufs["next_obs"][t] = torch.from_numpy(obs)
            bufs["reward"][t] = torch.from_numpy(reward)
            bufs["terminated"][t] = torch.from_numpy(term)
            bufs["truncated"][t] = torch.from_numpy(trunc)
            bufs["done"][t] = bufs["terminated"][t] | bufs["truncated"][t]
        frames = steps * n
        return frames / (time.process_time() - cpu), frames / (time.perf_counter() - wall)

    return timed


def bench_floor(steps: int = 1000) -> list[dict]:
    """Random policy, CartPole x8: the plain loop, the same loop storing into preallocated
    ``[T, N]`` tensors (issue 42's floor), and ``Collector``, interleaved; not in
    :func:`run` (``--floor``)."""
    from rl_collectors import Collector
    from rl_envs import GymEnv

    plain = gym.make_vec("CartPole-v1", num_envs=8, vectorization_mode="sync",
                         vector_kwargs=SAME_STEP)
    plain.reset(seed=0)
    env = GymEnv("CartPole-v1", num_envs=8, vectorization_mode="sync",
                 categorical_action_encoding=True)
    per_batch = min(steps, 200)
    collector = Collector(env, None, frames_per_batch=8 * per_batch, total_frames=-1)
    try:
        storing = _plain_storing_timed(plain, steps, per_batch)
        vs_plain = _paired_ratio(_plain_timed(plain, steps, None), storing)[1]
        ours = _paired_ratio(storing, _collector_timed(collector, steps // per_batch))[1]
    finally:
        collector.shutdown()
        plain.close()
    return [_row("Plain loop storing [T, N], random x8: storing/plain loop, wall clock",
                 vs_plain[1], vs_plain[2], ratio=vs_plain[0]),
            _row("Collector random x8: ours/plain loop storing [T, N], wall clock",
                 ours[1], ours[2], ratio=ours[0])]


def _collector_timed(collector: Any, batches: int) -> Callable[[], tuple[float, float]]:
    """``batches`` batches of a running collector per call: (frames/s by CPU, by wall)."""
    it = iter(collector)
    next(it)  # warm-up batch

    def timed() -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        frames = sum(next(it).numel() for _ in range(batches))
        return frames / (time.process_time() - cpu), frames / (time.perf_counter() - wall)

    return timed


def _paired_ratio(plain: Callable[[], tuple[float, float]], ours: Callable[[], tuple[float, float]],
                  rounds: int = ROUNDS) -> list[tuple[float, float, float]]:
    """Median over ``rounds`` back-to-back (plain, ours) pairs of ours/plain, with the
    medians of both rates, by CPU time and by wall clock (in that order): the two sides of
    a ratio run seconds apart, so the load of a shared machine moves both (the method of
    ``bench_envs.py``)."""
    pairs = [(plain(), ours()) for _ in range(rounds)]
    return [
        (
            statistics.median(o[k] / p[k] for p, o in pairs),
            statistics.median(o[k] for _, o in pairs),
            statistics.median(p[k] for p, _ in pairs),
        )
        for k in (0, 1)
    ]


def collector_rate(env: Any, policy: Any, steps_per_batch: int, batches: int) -> float:
    from rl_collectors import Collector

    n = env.batch_size.numel()
    collector = Collector(env, policy, frames_per_batch=n * steps_per_batch, total_frames=-1)
    rate = _iter_rate(collector, batches)
    collector.shutdown()
    return rate


def _row(
    figure: str, value: float, limit: float, unit: str = "frames/s", ratio: float | None = None
) -> dict:
    return {"figure": figure, "value": value, "unit": unit, "limit": limit,
            "ratio": value / limit if ratio is None else ratio}


def _single_row(
    figure: str, num_envs: int, steps: int, policy: Any, mode: str = "sync"
) -> list[dict]:
    """Collector vs plain loop, ``rounds`` interleaved pairs of ``steps`` steps: the row by
    CPU time and its twin by wall clock."""
    from rl_collectors import Collector
    from rl_envs import GymEnv

    kwargs = {"vector_kwargs": SAME_STEP} if mode == "sync" else {}
    plain = gym.make_vec("CartPole-v1", num_envs=num_envs, vectorization_mode=mode, **kwargs)
    plain.reset(seed=0)
    env = GymEnv("CartPole-v1", num_envs=num_envs, vectorization_mode=mode,
                 categorical_action_encoding=True)
    steps_per_batch = min(steps, 200)
    collector = Collector(env, policy, frames_per_batch=num_envs * steps_per_batch, total_frames=-1)
    try:
        net = None if policy is None else policy.module
        by_cpu, by_wall = _paired_ratio(_plain_timed(plain, steps, net),
                                        _collector_timed(collector, steps // steps_per_batch))
    finally:
        collector.shutdown()
        plain.close()
    wall_figure = figure.replace("ours/plain loop", "ours/plain loop, wall clock")
    return [_row(figure, by_cpu[1], by_cpu[2], ratio=by_cpu[0]),
            _row(wall_figure, by_wall[1], by_wall[2], ratio=by_wall[0])]


def bench_single(steps: int = 1000) -> list[dict]:
    policy = TensorDictModule(ActorNet(), in_keys=["observation"], out_keys=["action"])
    return [
        *_single_row(
            "Collector random policy, CartPole x8: ours/plain loop (target >= 0.8)", 8, steps, None
        ),
        *_single_row(
            "Collector MLP policy, CartPole x8: ours/plain loop (target >= 0.75)", 8, steps, policy
        ),
        *_single_row(
            "Collector MLP policy, numpy CartPole x4096: ours/plain loop (target >= 0.7)",
            4096,
            steps // 20,
            policy,
            mode="vector_entry_point",
        ),
    ]


def _multi_rate(cls: Any, make_env: Any, frames_per_batch: int, batches: int) -> float:
    collector = cls(
        [make_env] * 2, frames_per_batch=frames_per_batch, total_frames=-1, start_timeout=600.0
    )
    rate = _iter_rate(collector, batches)
    collector.shutdown()
    return rate


def bench_multi(frames_per_batch: int = 200, batches: int = 10) -> list[dict]:
    from rl_collectors import MultiAsyncCollector, MultiSyncCollector

    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    make_env = importlib.import_module("bench_collectors").make_slow_env  # picklable by name
    single = collector_rate(make_env(), None, frames_per_batch // 2, batches)
    sync = _multi_rate(MultiSyncCollector, make_env, frames_per_batch, batches)
    asyn = _multi_rate(MultiAsyncCollector, make_env, frames_per_batch, 2 * batches)
    return [
        _row(
            "MultiSyncCollector 2 workers, 0.5 ms env: ours/Collector (target >= 1.6)", sync, single
        ),
        _row(
            "MultiAsyncCollector 2 workers, 0.5 ms env: ours/Collector (target >= 1.6)",
            asyn,
            single,
        ),
    ]


def _uneven_class() -> type:
    import random

    from rl_envs import Categorical, Composite, EnvBase, Unbounded
    from tensordict import TensorDict

    class Uneven(EnvBase):
        """A single env whose step sleeps a random ``UNEVEN_S`` seconds; 4-dim observation."""

        def __init__(self) -> None:
            super().__init__(batch_size=())
            self.observation_spec = Composite(observation=Unbounded((4,)), shape=())
            self.action_spec = Categorical(2, shape=())
            self.t = 0

        def _reset(self, td: Any) -> Any:
            self.t = 0
            return TensorDict(observation=torch.zeros(4), batch_size=())

        def _step(self, td: Any) -> Any:
            time.sleep(random.uniform(*UNEVEN_S))
            self.t += 1
            done = torch.tensor([self.t >= 200])
            return TensorDict(
                observation=torch.randn(4), reward=torch.ones(1), terminated=done, batch_size=()
            )

    return Uneven


UNEVEN_S = (0.0001, 0.002)


def make_uneven() -> Any:
    """One uneven env (importable by spawned workers)."""
    return _uneven_class()()


def make_uneven_serial(n: int) -> Any:
    from rl_envs import SerialEnv

    return SerialEnv(n, make_uneven)


def _async_rate(
    module: Any, policy: Any, frames: int, batches: int, **knobs: Any
) -> tuple[float, float]:
    from rl_collectors import AsyncBatchedCollector

    collector = AsyncBatchedCollector(
        module.make_uneven, policy, num_envs=8, frames_per_batch=frames, **knobs
    )
    rate = _iter_rate(collector, batches, warmup=2)
    mean_bs = collector.server_stats()["mean_batch_size"]
    collector.shutdown()
    return rate, mean_bs


def bench_uneven(frames: int = 320, batches: int = 4) -> list[dict]:
    from functools import partial

    from rl_collectors import MultiSyncCollector

    here = os.path.dirname(os.path.abspath(__file__))
    if here not in sys.path:
        sys.path.insert(0, here)
    module = importlib.import_module("bench_collectors")  # picklable by name
    policy = TensorDictModule(ActorNet(), in_keys=["observation"], out_keys=["action"])
    limit = 8 / (sum(UNEVEN_S) / 2)
    single = collector_rate(module.make_uneven_serial(8), policy, frames // 8, batches)
    multi = MultiSyncCollector(
        [partial(module.make_uneven_serial, 4)] * 2,
        policy,
        frames_per_batch=frames,
        total_frames=-1,
        start_timeout=600.0,
    )
    sync = _iter_rate(multi, batches)
    multi.shutdown()
    asyn, mean_bs = _async_rate(module, policy, frames, batches)
    compiled, _ = _async_rate(module, policy, frames, batches, compile_policy=True)
    return [
        _row(
            "AsyncBatchedCollector 8 uneven envs (0.1-2 ms): ours/env limit (target >= 0.7)",
            asyn,
            limit,
        ),
        _row(
            "AsyncBatchedCollector 8 uneven envs: ours/Collector SerialEnv x8 (target >= 3)",
            asyn,
            single,
        ),
        _row(
            "AsyncBatchedCollector 8 uneven envs: ours/MultiSyncCollector 2x4 (target >= 1.5)",
            asyn,
            sync,
        ),
        _row(
            "MultiSyncCollector 2x4 uneven envs: ours/Collector SerialEnv x8 (target >= 1.6)",
            sync,
            single,
        ),
        _row(
            "AsyncBatchedCollector server mean batch size: envs per forward/num_envs (no target)",
            mean_bs,
            8.0,
            unit="envs",
        ),
        _row(
            "AsyncBatchedCollector compile_policy=True (inductor): on/off (target >= 1.0)",
            compiled,
            asyn,
        ),
    ]


def run() -> list[dict]:
    """All figures of this file (see the module docstring)."""
    return bench_single() + bench_multi() + bench_uneven()


if __name__ == "__main__":
    print(f"{'figure':<84} {'value':>12} {'limit':>12} {'ratio':>7}")
    for row in (bench_floor() if "--floor" in sys.argv[1:] else run()):
        print(
            f"{row['figure']:<84} {row['value']:>12.0f} {row['limit']:>12.0f} {row['ratio']:>7.2f}"
        )
