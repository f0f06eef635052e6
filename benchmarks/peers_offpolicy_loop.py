"""TD3's HalfCheetah loop without its gradient steps, ours against Stable-Baselines3's.

The TD3 race (``compare_peers.py --tasks td3-halfcheetah``) times whole runs, and
``peers_sac_step.py --algo td3`` times the gradient step alone (at parity). This script
times the rest of a frame: ``td3_mujoco.py``'s loop (collector with the exploring actor,
the replay write, run report, progress bar, checkpoint and logging checks) with
``--updates-per-frame 0``, against SB3's ``TD3.learn`` (``peers_sb3.td3``, the same
settings) with ``gradient_steps=0``: policy call, env step, buffer add and callbacks,
nothing trained. Both act with their actor (plus Gaussian noise) after
``--learning-starts`` random frames. ``--rounds`` rounds of ``--frames`` frames each,
the side order alternating, wall clock of the whole call (its setup included: a few ms
against the frames' seconds). Printed as one JSON line: the median microseconds a frame of
each side, their difference and ratio, our loop's phases (collect, replay, the rest)
from its run report, every round and the 1-minute load.

    uv run --group peers python benchmarks/peers_offpolicy_loop.py [--rounds 4]
        [--frames 5000]

Record it idle (the figure is wall time); loaded figures say so.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "benchmarks")]
import peers_sb3  # noqa: E402
import sac_pendulum  # noqa: E402
import td3_mujoco  # noqa: E402

PHASES = ("collect", "replay", "outside phases")


def ours(cfg: td3_mujoco.Config) -> tuple[float, dict[str, float]]:
    """Seconds of the example's run and its report's seconds per phase."""
    report = io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(report), contextlib.redirect_stderr(io.StringIO()):
        sac_pendulum.main(cfg, td3_mujoco.PARTS)
    seconds = time.perf_counter() - start
    phases = {}
    for name in PHASES:
        found = re.search(rf"^\s*{name}\s+([0-9.]+) s", report.getvalue(), re.MULTILINE)
        phases[name] = float(found.group(1)) if found else 0.0
    return seconds, phases


def sb3(cfg: td3_mujoco.Config) -> float:
    """Seconds of ``TD3.learn`` over the same frames, no gradient step."""
    start = time.perf_counter()
    model, _ = peers_sb3.td3(cfg.seed, dataclasses.asdict(cfg))
    model.gradient_steps = 0  # SB3's learn then skips train()
    model.learn(total_timesteps=cfg.total_frames)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--frames", type=int, default=5000)
    parser.add_argument("--learning-starts", type=int, default=100,
                        help="random frames first (the example's 10,000 would time no actor)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg = td3_mujoco.Config(total_frames=args.frames, learning_starts=args.learning_starts,
                            updates_per_frame=0.0)
    load = os.getloadavg()[0]
    rounds: dict[str, list[float]] = {"ours": [], "sb3": []}
    phases: dict[str, list[float]] = {name: [] for name in PHASES}
    for r in range(args.rounds):
        for side in ("ours", "sb3") if r % 2 == 0 else ("sb3", "ours"):
            if side == "sb3":
                rounds["sb3"].append(sb3(cfg) / args.frames * 1e6)
                continue
            seconds, split = ours(cfg)
            rounds["ours"].append(seconds / args.frames * 1e6)
            for name in PHASES:
                phases[name].append(split[name] / args.frames * 1e6)
    median = {side: round(statistics.median(v)) for side, v in rounds.items()}
    print(json.dumps({
        "task": "td3 HalfCheetah-v5 loop, no gradient step", "frames": args.frames,
        "median_us_a_frame": median, "ours-sb3_us": median["ours"] - median["sb3"],
        "ours/sb3": round(median["ours"] / median["sb3"], 3),
        "ours_phases_us": {name: round(statistics.median(v)) for name, v in phases.items()},
        "rounds_us": {side: [round(x) for x in v] for side, v in rounds.items()},
        "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
