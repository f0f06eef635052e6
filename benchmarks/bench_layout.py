"""Rollout storage layout (issue 24): time-major ``[T, *B]`` writes vs time-last ``[*B, T]``.

The data model hands a rollout out as ``[*B, T]`` (time last). Two ways to fill it step by
step, each timed per rollout of ``T`` steps with numpy slice assignments (what both
rollout writers do on the CPU), into storage allocated fresh for every rollout (a training
loop's new batch: first-touch page faults included):

* **time-major**: allocate ``[T, *B, *event]`` and copy the env's ``[*B, *event]`` buffer
  into ``storage[t]``, one contiguous block a step; hand out a ``permute`` view (no copy).
  A consumer that needs the ``[*B, T]`` rows contiguous (``reshape(-1)`` into a replay
  buffer, say) pays one more copy: timed as **time-major + copy**;
* **time-last**: allocate ``[*B, T, *event]`` and copy into ``storage[:, t]``: ``B`` blocks
  of one event each, ``T`` events apart.

Ratios are time-last over time-major (above 1: time-major is cheaper) and time-last over
time-major + copy (above 1: time-major stays cheaper even when the consumer wants
contiguous time-last rows). Cases: the shapes of the examples (CartPole x16, Atari x8
frames, one MuJoCo env) and a numpy-vectorised CartPole of 4096 envs. Medians over
``REPEAT`` rollouts, interleaved; ``uv run python benchmarks/bench_layout.py`` takes
under a minute.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

REPEAT = 15

# name -> (envs B, event shape, dtype, steps T)
CASES = {
    "CartPole x16 (float32 [4], T=32)": (16, (4,), np.float32, 32),
    "CartPole x4096 (float32 [4], T=32)": (4096, (4,), np.float32, 32),
    "Atari x8 (uint8 [4, 84, 84], T=128)": (8, (4, 84, 84), np.uint8, 128),
    "MuJoCo x1 (float32 [17], T=2048)": (1, (17,), np.float32, 2048),
}


def _time_major(src: np.ndarray, steps: int, copy: bool) -> float:
    start = time.perf_counter()
    storage = np.empty((steps, *src.shape), src.dtype)
    for t in range(steps):
        storage[t] = src
    if copy:
        np.ascontiguousarray(np.moveaxis(storage, 0, 1))
    return time.perf_counter() - start


def _time_last(src: np.ndarray, steps: int) -> float:
    start = time.perf_counter()
    storage = np.empty((src.shape[0], steps, *src.shape[1:]), src.dtype)
    for t in range(steps):
        storage[:, t] = src
    return time.perf_counter() - start


def _row(figure: str, value: float, limit: float) -> dict:
    return {"figure": figure, "value": value, "unit": "s", "limit": limit, "ratio": value / limit}


def run() -> list[dict]:
    rows = []
    for name, (envs, event, dtype, steps) in CASES.items():
        src = (np.arange(envs * int(np.prod(event))) % 251).astype(dtype).reshape(envs, *event)
        times: dict[str, list[float]] = {"major": [], "major_copy": [], "last": []}
        for _ in range(REPEAT + 1):  # the first round warms up, the rest count
            times["major"].append(_time_major(src, steps, copy=False))
            times["major_copy"].append(_time_major(src, steps, copy=True))
            times["last"].append(_time_last(src, steps))
        med = {k: statistics.median(v[1:]) for k, v in times.items()}
        rows.append(_row(f"{name}: time-last writes / time-major writes (fresh storage)",
                         med["last"], med["major"]))
        rows.append(_row(f"{name}: time-last writes / time-major writes + one copy to [B, T]",
                         med["last"], med["major_copy"]))
    return rows


if __name__ == "__main__":
    print(f"{'figure':92s} {'value':>10s} {'limit':>10s} {'ratio':>7s}")
    for r in run():
        print(f"{r['figure']:92s} {r['value']:10.6f} {r['limit']:10.6f} {r['ratio']:7.3f}")
