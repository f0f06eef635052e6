"""Cost of the collector's NaN/inf guard (``check_finite=True``) on the main job.

Two measurements, printed as one JSON object with the load average before and after:

1. End to end: ``examples/ppo_cartpole.py`` (the README's main job) run with and without
   ``--no-check-finite``, interleaved (on, off, on, off, ...), each in its own process;
   the ratio of the median ``seconds`` each run reports (its training loop) is the cost.
2. In process: the guard alone on a batch collected as the example collects it (16
   CartPole envs x 32 steps, the example's transforms), timed with ``timeit``, over the
   example's own time per batch from (1): the share of the loop the guard takes, which is
   steadier than (1) on a busy machine.

    uv run benchmarks/bench_finite_check.py --frames 50000 --pairs 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(frames: int, check: bool) -> float:
    cmd = [sys.executable, str(ROOT / "examples/ppo_cartpole.py"), "--total-frames", str(frames)]
    if not check:
        cmd.append("--no-check-finite")
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=3600).stdout
    return float(json.loads(out.strip().splitlines()[-1])["seconds"])


def _guard_seconds(repeat: int = 2000) -> float:
    """Seconds the guard takes on one batch of the example's shape."""
    sys.path.insert(0, str(ROOT / "examples"))
    import ppo_cartpole as example
    from rl_collectors import Collector

    cfg = example.Config()
    collector = Collector(example.make_env(cfg), None, check_finite=True,
                          frames_per_batch=cfg.num_envs * cfg.steps_per_env, total_frames=-1)
    try:
        batch = collector.rollout()
        check = collector._finite  # noqa: SLF001 (the benchmark times the guard alone)
        return min(timeit.repeat(lambda: check(batch, 0), number=repeat, repeat=5)) / repeat
    finally:
        collector.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    load_before = os.getloadavg()
    on, off = [], []
    for _ in range(args.pairs):
        on.append(_run(args.frames, True))
        off.append(_run(args.frames, False))
    guard = _guard_seconds()
    per_batch = statistics.median(off) / (args.frames / (16 * 32))
    print(json.dumps({
        "frames": args.frames, "pairs": args.pairs,
        "seconds_on": on, "seconds_off": off,
        "end_to_end_ratio": round(statistics.median(on) / statistics.median(off), 4),
        "guard_us_per_batch": round(guard * 1e6, 1),
        "guard_share_of_batch": round(guard / per_batch, 5),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
    }))


if __name__ == "__main__":
    main()
