"""Where a ``ParallelEnv(2)`` step's time goes: a timeline of main and worker timestamps.

The same ``BusyEnv`` as ``bench_parallel_envs.py`` (0.5 ms of CPU per step), with each
worker recording when its step starts and ends and the main process recording when it
sends the step and when every answer is in (``time.perf_counter`` is the same clock in
every process). Prints the medians over the last 1400 of 1500 steps:

* send -> worker start: the hop to a worker (pipe write, the worker noticing it);
* worker step: the env's ``fast_step`` in the worker (0.5 ms of CPU + the step's own work);
* last worker end -> main done: the answer hop back (pipe write, the main process waking);
* main done -> next send: the main process's own work between two steps;
* period: one batched step.

Not a ``bench_*`` file (``run.py`` does not run it): a diagnostic, printed, not recorded.

Usage::

    uv run --no-sync python benchmarks/parallel_envs_timeline.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_parallel_envs as bench  # noqa: E402  (the workers import BusyEnv from it)
from rl_envs import ParallelEnv  # noqa: E402

STEPS, KEEP = 1500, 1400
LOG_DIR = Path(os.environ.get("TIMELINE_DIR", tempfile.gettempdir()))


class TimedEnv(bench.BusyEnv):
    """``BusyEnv`` that saves its step start/end times after ``STEPS`` steps."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[tuple[float, float]] = []

    def fast_step(self, action: Any) -> Any:
        start = time.perf_counter()
        out = super().fast_step(action)
        self.times.append((start, time.perf_counter()))
        if len(self.times) == STEPS:
            np.save(LOG_DIR / f"timeline_{os.getpid()}.npy", np.array(self.times))
        return out


def main() -> None:
    env = ParallelEnv(2, TimedEnv)
    sent: list[tuple[float, float]] = []
    run = env._run

    def timed_run(indices: list[int], cmd: str, args: Any = None) -> None:
        start = time.perf_counter()
        run(indices, cmd, args)
        sent.append((start, time.perf_counter()))

    env._run = timed_run
    try:
        env.rollout(STEPS, break_when_any_done=False)
        pids = env.worker_pids
    finally:
        env.close()
    main_t = np.array(sent[-KEEP:])
    files = [LOG_DIR / f"timeline_{pid}.npy" for pid in pids]
    workers = [np.load(f)[-KEEP:] for f in files]
    for f in files:
        f.unlink()
    last_end = np.maximum(workers[0][:, 1], workers[1][:, 1])
    us = lambda x: f"{np.median(x) * 1e6:.0f}"  # noqa: E731
    print("medians over", KEEP, "steps (us)")
    print("  send -> worker start:", ", ".join(us(w[:, 0] - main_t[:, 0]) for w in workers))
    print("  worker step:", ", ".join(us(w[:, 1] - w[:, 0]) for w in workers))
    print("  last worker end -> main done:", us(main_t[:, 1] - last_end))
    print("  main done -> next send:", us(main_t[1:, 0] - main_t[:-1, 1]))
    print("  period:", us(np.diff(main_t[:, 0])))


if __name__ == "__main__":
    sys.modules.setdefault("bench_parallel_envs", bench)
    main()
