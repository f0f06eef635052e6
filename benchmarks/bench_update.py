"""The learner's update on the CPU: ours against plain torch, eager and compiled.

Two rows (``update_rows.py``): a PPO CartPole minibatch update (64x64 tanh actor and
critic, batch 256, clip, Adam; CleanRL-shaped plain torch) and a SAC update at
HalfCheetah's sizes (256x256, batch 256, twin critics, actor, alpha, target lerp). Each
has four variants, timed interleaved in one process on one thread, fresh batches every
call: plain eager, plain compiled (one ``torch.compile``d function), ours eager and ours
compiled (``make_update_step(compile=True)``). Printed: the median microseconds per
update, the spread over rounds, and the ratios the targets name (ours eager / plain
eager, ours compiled / plain eager, ours compiled / plain compiled), each target ratio
with its bound and whether it is met (``targets``); for SAC also the floor: the GEMMs
the step cannot avoid, alone, timed (``floor_gemms_us``, ``over_floor``). The last line
gives the whole run's seconds. Compiling takes tens of seconds per variant on a
loaded CPU; full figures need an idle machine.

    uv run python benchmarks/bench_update.py [--rounds 15] [--calls 50] [--backend inductor]
        [--clock wall|cpu]

``--clock cpu`` times each variant by this thread's CPU time instead of the wall clock:
on a machine other processes load, the wall clock counts the time the scheduler gave to
them; CPU time does not (cache contention still shows). Records are taken idle, wall.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import update_rows  # noqa: E402

VARIANTS = ("plain_eager", "plain_compiled", "ours_eager", "ours_compiled")
TARGETS = {  # issue 40's targets: the ratio, and the most it may be
    "ppo_cartpole": {"ours_eager/plain_eager": 1.15, "ours_compiled/plain_eager": 0.7},
    "sac": {"ours_compiled/plain_compiled": 1.05},
}


def _variants(name: str, compile_kwargs: dict) -> tuple[dict, callable]:
    torch._dynamo.reset()
    eager = update_rows.make_row(name, "cpu", "eager", compile_kwargs)
    compiled = update_rows.make_row(name, "cpu", "compile", compile_kwargs)
    fns = {"plain_eager": eager.plain, "plain_compiled": compiled.plain,
           "ours_eager": eager.ours, "ours_compiled": compiled.ours}
    return fns, eager.batch


def sac_gemms(batch: int = 256) -> list[tuple[int, int, int]]:
    """``(m, k, n)`` of the GEMMs one SAC step cannot avoid: the forwards, and in the
    backward a weight gradient per layer whose weights learn from that pass and an input
    gradient per layer that has something to pass it to (not the first layer on data)."""
    actor = [(17, 256), (256, 256), (256, 12)]
    critic = [(23, 256), (256, 256), (256, 1)]
    fwd = actor * 2 + critic * 6  # actor on obs and next obs; 2 critics x 3 inputs
    out = [(batch, k, n) for k, n in fwd]

    def grad_input(layers):
        return [(batch, n, k) for k, n in layers]

    def grad_weight(layers):
        return [(k, batch, n) for k, n in layers]

    out += grad_weight(actor) + grad_input(actor[1:])  # the actor, on obs
    out += (grad_weight(critic) + grad_input(critic[1:])) * 2  # 2 critics on data
    out += grad_input(critic) * 2  # 2 frozen critics on the actor's action
    return out


def floor_us(gemms: list[tuple[int, int, int]], reps: int = 200,
             now: callable = time.perf_counter) -> float:
    """Median microseconds of the GEMMs alone (``torch.mm`` on random operands)."""
    ops = [(torch.randn(m, k), torch.randn(k, n)) for m, k, n in gemms]
    times = []
    for _ in range(reps):
        t = now()
        for a, b in ops:
            torch.mm(a, b)
        times.append(now() - t)
    return statistics.median(times) * 1e6


CLOCKS = {"wall": time.perf_counter, "cpu": time.thread_time}


def bench(name: str, rounds: int, calls: int, compile_kwargs: dict,
          clock: str = "wall") -> dict:
    fns, make_batch = _variants(name, compile_kwargs)
    now = CLOCKS[clock]
    compile_s = {}
    for label, fn in fns.items():  # warm-up: the compiling calls are timed apart
        t = time.perf_counter()
        for _ in range(3):
            fn(make_batch())
        compile_s[label] = round(time.perf_counter() - t, 2)
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for label, fn in fns.items():  # interleaved: load drifts hit every variant
            batches = [make_batch() for _ in range(calls)]
            t = now()
            for b in batches:
                fn(b)
            times[label].append((now() - t) / calls * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    row = {"row": name, "clock": clock, "load_avg_1min": round(os.getloadavg()[0], 2),
           "us": {k: round(v, 1) for k, v in med.items()},
           "spread_us": {k: [round(min(v), 1), round(max(v), 1)] for k, v in times.items()},
           "warmup_seconds": compile_s, "rounds": rounds, "calls": calls,
           "ours_eager/plain_eager": round(med["ours_eager"] / med["plain_eager"], 3),
           "ours_compiled/plain_eager": round(med["ours_compiled"] / med["plain_eager"], 3),
           "ours_compiled/plain_compiled": round(
               med["ours_compiled"] / med["plain_compiled"], 3)}
    row["targets"] = {k: {"ratio": row[k], "at_most": v, "met": row[k] <= v}
                      for k, v in TARGETS.get(name, {}).items()}
    if name == "sac":
        floor = floor_us(sac_gemms(update_rows.SIZES["sac"][2]), now=now)
        row["floor_gemms_us"] = round(floor, 1)
        row["over_floor"] = {k: round(v / floor, 2) for k, v in med.items()}
    return row


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--backend", default="inductor", help="torch.compile backend")
    p.add_argument("--rows", default="ppo_cartpole,sac")
    p.add_argument("--clock", choices=sorted(CLOCKS), default="wall",
                   help="wall: perf_counter (the record, on an idle machine); cpu: this "
                        "thread's CPU time, steadier while other processes load the machine")
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(False)
    rows, start = [], time.perf_counter()
    for name in args.rows.split(","):
        row = bench(name, args.rounds, args.calls, {"backend": args.backend}, args.clock)
        print(json.dumps(row), flush=True)
        rows.append(row)
    print(json.dumps({"total_seconds": round(time.perf_counter() - start, 1),
                      "load_avg_1min_end": round(os.getloadavg()[0], 2)}), flush=True)
    return rows


if __name__ == "__main__":
    main()
