"""rl-envs against plain gymnasium loops, measured side by side in the same run.

(a) limit: a plain ``SyncVectorEnv`` loop over 8 CartPole envs with random actions
    (``envs.step(envs.action_space.sample())``); ours: ``GymEnv("CartPole-v1",
    num_envs=8).rollout(T)`` with random actions (the public API, data stored in a
    ``[8, T]`` TensorDict), and the collector fast path (``env.fast_step``) alone.
    Target: rollout >= 0.8 of the limit.
(b) limit: gymnasium's numpy-vectorised CartPole (``vector_entry_point``) with 4096 envs
    stepped by a plain loop; ours: ``GymEnv(..., vectorization_mode="vector_entry_point")
    .rollout(T)`` on the same env. Target >= 0.7.
(c) limit: ALE's C++ vector env (``gym.make_vec("ALE/Breakout-v5", num_envs=8,
    vectorization_mode="vector_entry_point")``, its default options: 4 stacked 84x84
    grayscale frames) stepped by a plain loop; ours: ``GymEnv("ALE/Breakout-v5",
    num_envs=8)`` (the same vector env, the default vectorization). Target >= 0.9.
(d) limit: gymnasium's ``SyncVectorEnv`` over 8 MuJoCo ``HalfCheetah-v5`` envs stepped by a
    plain loop; ours: ``GymEnv("HalfCheetah-v5", num_envs=8)`` (sync, the default for an
    env without a vector entry point). Target >= 0.85.
(e) limit: the raw steps of 8 single ALE Breakout envs (RGB frames, ``SyncVectorEnv``);
    ours: the same envs through the pixel pipeline ``ToTensorImage(dtype=uint8)`` (layout
    only) + ``GrayScale`` + ``Resize(84, 84)`` + ``CatFrames(4)``, on the collector's fast
    path (no storage). Target: <= 25% on top of the raw steps, i.e. a ratio >= 0.8.
    On these uint8 frames ``GrayScale`` and ``Resize`` run rl-envs' compiled kernels
    (numba: compiled, or loaded from its disk cache, in the warm-up round).
    Run with ``PIXEL_THREADS`` (1) torch threads, stated in the rows: the pipeline's ops
    are ~0.1-1 MB each, where a second intra-op thread costs more CPU time than it saves
    (and, on a loaded machine, waits for a core). The per-transform rows time each
    transform's ``on_step`` after a raw step, in ms per step of the 8 envs (``limit``: the
    raw ``GymEnv`` step; ``ratio``: the share of it), the minimum over the steps.

Each figure is the median of ``REPEATS`` rounds; a round times every side back to back
and a ratio is the median of the per-round ratios, so every side sees the same load. Steps
are counted per sub-env. The ratios use the CPU time of this process
(``time.process_time``): the loops are single-threaded, so on an idle machine it equals
the wall time, and on a loaded one it is not inflated by waiting for a core. The
wall-clock ratio of the rollout is printed too.

Usage::

    uv run --no-sync python benchmarks/bench_envs.py
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import ale_py
import gymnasium as gym
import numpy as np
import torch
from rl_envs import CatFrames, Compose, GrayScale, GymEnv, Resize, ToTensorImage, TransformedEnv

REPEATS = 21
SMALL_ENVS, SMALL_STEPS = 8, 500
BIG_ENVS, BIG_STEPS = 4096, 100
ALE_ENVS, ALE_STEPS = 8, 200
MUJOCO_ENVS, MUJOCO_STEPS = 8, 300
PIXEL_STEPS = 100
HOPPER_STEPS = 1000
PIXEL_THREADS = 1
SLOW_REPEATS = 9  # the ALE and MuJoCo rows: each round takes about a second per side

gym.register_envs(ale_py)


class _Clock:
    """Wall and CPU time of one timed block."""

    def __enter__(self) -> _Clock:
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def _paired(
    fns: dict[str, Callable[[], tuple[float, float]]], repeats: int = REPEATS
) -> dict[str, float]:
    """Run the timing functions back to back ``repeats`` times (one "pair" per round).

    Returns, for each name, the median steps/s by CPU time (``name``) and by wall time
    (``name + "_wall"``), and the median over rounds of the per-round ratio to ``"plain"``
    (``name + "_ratio"``, ``name + "_ratio_wall"``): both sides of a ratio ran seconds
    apart, so a slow drift of the machine's load cancels out.
    """
    rounds: list[dict[str, tuple[float, float]]] = []
    for _ in range(repeats):
        rounds.append({name: fn() for name, fn in fns.items()})
    out: dict[str, float] = {}
    for name in fns:
        out[name] = statistics.median(r[name][0] for r in rounds)
        out[name + "_wall"] = statistics.median(r[name][1] for r in rounds)
        out[name + "_ratio"] = statistics.median(r[name][0] / r["plain"][0] for r in rounds)
        out[name + "_ratio_wall"] = statistics.median(r[name][1] / r["plain"][1] for r in rounds)
    return out


def _rates(steps: int, clock: _Clock) -> tuple[float, float]:
    return steps / clock.cpu, steps / clock.wall


def _plain_loop(envs: gym.vector.VectorEnv, steps: int) -> Callable[[], tuple[float, float]]:
    def timed() -> tuple[float, float]:
        sample, step = envs.action_space.sample, envs.step
        with _Clock() as clock:
            for _ in range(steps):
                step(sample())
        return _rates(steps * envs.num_envs, clock)

    return timed


def _rollout(env: GymEnv, steps: int) -> Callable[[], tuple[float, float]]:
    def timed() -> tuple[float, float]:
        with _Clock() as clock:
            env.rollout(steps, break_when_any_done=False)
        return _rates(steps * env.batch_size.numel(), clock)

    return timed


def _fast_path(env: GymEnv, steps: int) -> Callable[[], tuple[float, float]]:
    """The collector's view: ``fast_step`` on one reused action tensor, the random actions
    drawn in bulk beforehand (as ``rollout`` does), no storage."""

    def timed() -> tuple[float, float]:
        draws = env.action_spec.rand((steps,), generator=env._rng).numpy()
        action = torch.empty(env.action_spec.shape, dtype=env.action_spec.dtype)
        view, step = action.numpy(), env.fast_step
        env.fast_reset()
        with _Clock() as clock:
            for t in range(steps):
                np.copyto(view, draws[t])
                step(action)
        return _rates(steps * env.batch_size.numel(), clock)

    return timed


def _rows(
    label: str, best: dict[str, float], target: float | None, on: str = "rollout"
) -> list[dict]:
    """The limit, the rollout and the fast path (the target, if any, is on ``on``), the
    rollout's wall-clock ratio."""
    limit = best["plain"]
    rows = [
        {
            "figure": f"{label}: plain gymnasium loop (limit)",
            "value": limit,
            "unit": "steps/s",
            "limit": limit,
            "ratio": 1.0,
        }
    ]
    names = {
        "rollout": f"{label}: GymEnv.rollout / limit",
        "fast": f"{label}: GymEnv.fast_step loop / limit",
    }
    if target is not None:
        names[on] += f" (target >= {target})"
    for key, figure in names.items():
        rows.append(
            {
                "figure": figure,
                "value": best[key],
                "unit": "steps/s",
                "limit": limit,
                "ratio": best[key + "_ratio"],
            }
        )
    rows.append(
        {
            "figure": f"{label}: GymEnv.rollout / limit, wall clock",
            "value": best["rollout_wall"],
            "unit": "steps/s",
            "limit": best["plain_wall"],
            "ratio": best["rollout_ratio_wall"],
        }
    )
    return rows


def bench_small() -> list[dict]:
    plain = gym.make_vec("CartPole-v1", num_envs=SMALL_ENVS, vectorization_mode="sync")
    plain.reset(seed=0)
    plain.action_space.seed(0)
    ours = GymEnv("CartPole-v1", num_envs=SMALL_ENVS, categorical_action_encoding=True)
    ours.set_seed(0)
    try:
        fns = {
            "plain": _plain_loop(plain, SMALL_STEPS),
            "rollout": _rollout(ours, SMALL_STEPS),
            "fast": _fast_path(ours, SMALL_STEPS),
        }
        for fn in fns.values():  # warm-up
            fn()
        best = _paired(fns)
    finally:
        plain.close()
        ours.close()
    return _rows(f"(a) CartPole sync x{SMALL_ENVS}", best, 0.8)


def bench_big() -> list[dict]:
    plain = gym.make_vec("CartPole-v1", num_envs=BIG_ENVS, vectorization_mode="vector_entry_point")
    plain.reset(seed=0)
    plain.action_space.seed(0)
    ours = GymEnv("CartPole-v1", num_envs=BIG_ENVS, vectorization_mode="vector_entry_point",
                  categorical_action_encoding=True)
    ours.set_seed(0)
    try:
        fns = {
            "plain": _plain_loop(plain, BIG_STEPS),
            "rollout": _rollout(ours, BIG_STEPS),
            "fast": _fast_path(ours, BIG_STEPS),
        }
        for fn in fns.values():
            fn()
        best = _paired(fns)
    finally:
        plain.close()
        ours.close()
    return _rows(f"(b) CartPole numpy-vectorised x{BIG_ENVS}", best, 0.7)


def _side_by_side(
    plain: gym.vector.VectorEnv, ours: GymEnv | TransformedEnv, steps: int
) -> dict[str, float]:
    """Seed both, warm up, time the plain loop, the rollout and the fast path; close both."""
    plain.reset(seed=0)
    plain.action_space.seed(0)
    ours.set_seed(0)
    try:
        fns = {
            "plain": _plain_loop(plain, steps),
            "rollout": _rollout(ours, steps),
            "fast": _fast_path(ours, steps),
        }
        for fn in fns.values():
            fn()
        return _paired(fns, SLOW_REPEATS)
    finally:
        plain.close()
        ours.close()


def bench_ale_vector() -> list[dict]:
    plain = gym.make_vec(
        "ALE/Breakout-v5", num_envs=ALE_ENVS, vectorization_mode="vector_entry_point"
    )
    best = _side_by_side(plain, GymEnv("ALE/Breakout-v5", num_envs=ALE_ENVS,
                                       categorical_action_encoding=True), ALE_STEPS)
    return _rows(f"(c) ALE Breakout C++ vector env x{ALE_ENVS}", best, 0.9)


def bench_mujoco() -> list[dict]:
    plain = gym.make_vec("HalfCheetah-v5", num_envs=MUJOCO_ENVS, vectorization_mode="sync")
    best = _side_by_side(plain, GymEnv("HalfCheetah-v5", num_envs=MUJOCO_ENVS), MUJOCO_STEPS)
    return _rows(f"(d) MuJoCo HalfCheetah sync x{MUJOCO_ENVS}", best, 0.85)


def _pixel_pipeline() -> Compose:
    # single ALE envs' RGB frames are under "pixels", the image transforms' default key
    return Compose(ToTensorImage(dtype=torch.uint8), GrayScale(), Resize(84, 84), CatFrames(4))


def _per_transform(label: str, env: TransformedEnv, steps: int = 300) -> list[dict]:
    """Each transform's ``on_step`` timed after a raw step (ms per step, min over steps)."""
    env.set_seed(0)
    env.fast_reset()
    draws = env.base_env.action_spec.rand((steps,), generator=env._rng)  # what the base takes
    names = [type(t).__name__ for t in env.transform]
    names = [n if names.count(n) == 1 else f"{n} #{i}" for i, n in enumerate(names)]
    cost: dict[str, list[float]] = {"raw": [], **{name: [] for name in names}}
    try:
        for t in range(steps):
            start = time.perf_counter()
            env.base_env.fast_step(draws[t])
            cost["raw"].append(time.perf_counter() - start)
            for name, transform in zip(names, env.transform, strict=True):
                start = time.perf_counter()
                transform.on_step()  # a done sub-env: the base env has reset it already
                cost[name].append(time.perf_counter() - start)
    finally:
        env.close()
    raw = min(cost.pop("raw")) * 1e3
    rows = [
        {
            "figure": f"{label}: raw GymEnv step, ms per step",
            "value": raw,
            "unit": "ms",
            "limit": raw,
            "ratio": 1.0,
        }
    ]
    for name, times in cost.items():
        ms = min(times) * 1e3
        rows.append(
            {
                "figure": f"{label}: {name}.on_step, ms per step / raw",
                "value": ms,
                "unit": "ms",
                "limit": raw,
                "ratio": ms / raw,
            }
        )
    return rows


def bench_pixels() -> list[dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(PIXEL_THREADS)
    try:
        plain = gym.make_vec("ALE/Breakout-v5", num_envs=ALE_ENVS, vectorization_mode="sync")
        base = GymEnv("ALE/Breakout-v5", num_envs=ALE_ENVS, vectorization_mode="sync",
                      categorical_action_encoding=True)
        best = _side_by_side(plain, TransformedEnv(base, _pixel_pipeline()), PIXEL_STEPS)
        label = (
            f"(e) 8 single ALE envs + GrayScale/Resize/CatFrames x{ALE_ENVS}, "
            f"{PIXEL_THREADS} torch thread"
        )
        pixels = TransformedEnv(
            GymEnv("ALE/Breakout-v5", num_envs=ALE_ENVS, vectorization_mode="sync",
                   categorical_action_encoding=True),
            _pixel_pipeline(),
        )
        return _rows(label, best, 0.8, on="fast") + _per_transform(label, pixels)
    finally:
        torch.set_num_threads(threads)


def _hopper_example_env() -> TransformedEnv:
    """``examples/ppo_mujoco.py``'s own env (its ``make_env``, default ``Config``): one Hopper
    under the example's transforms."""
    path = Path(__file__).resolve().parents[1] / "examples" / "ppo_mujoco.py"
    spec = importlib.util.spec_from_file_location("_bench_envs_ppo_mujoco", path)
    example = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = example  # dataclasses reads the Config's annotations through it
    spec.loader.exec_module(example)
    return example.make_env(example.Config())


def bench_hopper_transforms() -> list[dict]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        plain = gym.make_vec("Hopper-v5", num_envs=1, vectorization_mode="sync")
        best = _side_by_side(plain, _hopper_example_env(), HOPPER_STEPS)
        label = "(f) MuJoCo Hopper x1 + ppo_mujoco's transforms"
        return _rows(label, best, None, on="fast") + _per_transform(label, _hopper_example_env())
    finally:
        torch.set_num_threads(threads)


def run() -> list[dict]:
    return (
        bench_small()
        + bench_big()
        + bench_ale_vector()
        + bench_mujoco()
        + bench_pixels()
        + bench_hopper_transforms()
    )


if __name__ == "__main__":
    rows = run()
    print(f"{'figure':<66} {'value':>12} {'unit':>8} {'limit':>12} {'ratio':>6}")
    for r in rows:
        print(
            f"{r['figure']:<66} {r['value']:>12,.0f} {r['unit']:>8} "
            f"{r['limit']:>12,.0f} {r['ratio']:>6.2f}"
        )
