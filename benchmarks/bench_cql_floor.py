"""CQL's gradient step on the CPU against the floor of its matrix products: the steps an hour
buys here.

    uv run python benchmarks/bench_cql_floor.py [--rounds 5] [--calls 10] [--batch 256]

What ``examples/iql_offline.py --loss cql`` runs per step at HalfCheetah's sizes (17 -> 6,
batch 256, 256x256 actor and two critics, ``num_random`` K = 10): its ``make_loss`` and
``make_optimizer`` and ``make_update_step`` over the CQL terms (loss, backward, Adam, target
lerp), on fresh random batches shaped as the dataset's (``update_rows``' SAC-shaped batch,
the GPU rows' too). The floor is the GEMMs the step cannot avoid, timed alone
(``bench_update.floor_us``): every critic forward (each of the two critics on the data
action, on the next state's action for the target, on K uniform, K current-policy and K
next-policy actions per state for the conservative term, and on the actor's action), the
actor on the state and on the next state, and in the backward the weight and input gradients
of the critics on the rows that train them, the input gradients through the frozen critics
to the actor's action, and the actor's own. CQL's conservative term alone puts ``3 K + 1``
rows per sample through each critic with a gradient: the step is matrix products, and the
floor says how close to them it runs.

Printed as one JSON line (also to ``--out``): microseconds a step (median over rounds), the
floor, their ratio, the 1-minute load at the start and the end, and what they give: gradient
steps an hour (``3600 / step``; the evaluations the example runs come on top) and hours for
the issue's 100k steps. Process CPU time (``time.process_time``, one torch thread): on a
shared machine other processes do not add to it.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "examples"), str(ROOT / "benchmarks")]
from bench_update import floor_us  # noqa: E402
from iql_offline import CQL_TERMS, Config, make_env, make_loss, make_optimizer  # noqa: E402
from rl_objectives import make_update_step  # noqa: E402
from update_rows import _sac_batch  # noqa: E402

OBS, ACT, HIDDEN = 17, 6, 256  # HalfCheetah-v5's sizes, the example's width


def cql_gemms(batch: int, k: int, hidden: int = HIDDEN) -> list[tuple[int, int, int]]:
    """``(m, k, n)`` of the GEMMs one CQL step cannot avoid (the module docstring's list)."""
    actor = [(OBS, hidden), (hidden, hidden), (hidden, 2 * ACT)]
    critic = [(OBS + ACT, hidden), (hidden, hidden), (hidden, 1)]
    trained = batch * (3 * k + 1)  # rows whose critic outputs train the critics
    rows = {"target": batch, "trained": trained, "actor_q": batch}

    def fwd(layers, m):
        return [(m, a, b) for a, b in layers]

    def grad_weight(layers, m):
        return [(a, m, b) for a, b in layers]

    def grad_input(layers, m):
        return [(m, b, a) for a, b in layers]

    out = fwd(actor, batch) * 2  # the actor on s (with a gradient) and on s'
    for _ in range(2):  # two critics
        for m in rows.values():
            out += fwd(critic, m)
        out += grad_weight(critic, trained) + grad_input(critic[1:], trained)
        out += grad_input(critic, batch)  # frozen critic -> the actor's action
    out += grad_weight(actor, batch) + grad_input(actor[1:], batch)
    return out


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    torch.distributions.Distribution.set_default_validate_args(False)
    load_start = os.getloadavg()[0]
    cfg = Config(loss="cql", batch_size=args.batch)
    env = make_env(cfg)
    try:
        loss_fn, actor, updater = make_loss(cfg, env)
    finally:
        env.close()
    k = loss_fn.num_random
    optim = make_optimizer(cfg, loss_fn, actor)
    update = make_update_step(loss_fn, optim, target_updater=updater, loss_keys=CQL_TERMS)
    for _ in range(3):
        update(_sac_batch(args.batch, "cpu", OBS, ACT))
    steps = []
    for _ in range(args.rounds):
        batches = [_sac_batch(args.batch, "cpu", OBS, ACT) for _ in range(args.calls)]
        t = time.process_time()
        for b in batches:
            update(b)
        steps.append((time.process_time() - t) / args.calls * 1e6)
    step = statistics.median(steps)
    floor = floor_us(cql_gemms(args.batch, k), reps=max(args.rounds * args.calls, 20),
                     now=time.process_time)
    row = {
        "task": "CQL gradient step, HalfCheetah sizes", "batch": args.batch,
        "num_random": k, "step_us": round(step), "floor_gemms_us": round(floor),
        "step/floor": round(step / floor, 2),
        "steps_an_hour": int(3600e6 / step), "hours_for_100k_steps": round(step * 1e5 / 3600e6, 2),
        "rounds_us": [round(s) for s in steps],
        "load_start": round(load_start, 2), "load_end": round(os.getloadavg()[0], 2),
        "clock": "process_time, one torch thread",
        "time": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    print(json.dumps(row))
    if args.out:
        Path(args.out).write_text(json.dumps(row, indent=1) + "\n")
    return row


if __name__ == "__main__":
    main()
