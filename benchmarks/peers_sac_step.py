"""SAC's (or TD3's) gradient step, ours against Stable-Baselines3's, in one process, interleaved.

The peer race (``compare_peers.py --tasks sac-pendulum``) times whole runs, one process a
side: collection, replay and logging included, and on a loaded machine each side meets
another load. This script isolates the learner: ours is ``examples/sac_pendulum.py``'s
update step (``make_update_step`` over its ``SACLoss``, ``SoftUpdate`` and Adam, a fresh
``buffer.sample()`` per step), SB3's is ``SAC.train`` (``peers_sb3.sac``: the same
example's settings), both after the example's random frames, one torch thread. With
``--algo td3`` the example is ``td3_mujoco.py`` (HalfCheetah-v5, policy delay 2): ours is
its ``sac_pendulum.train_step`` (the critics alone on every second step) with its
``PARTS`` (oneDNN linears, fused Adam), SB3's ``TD3.train`` (``peers_sb3.td3``). Blocks
of ``--calls`` steps alternate side and order for ``--rounds`` rounds; printed as one JSON
line: the median microseconds a step of each side, their ratio (ours / SB3: below 1 is
ours faster), every round's figure and the load.

    uv run --group peers python benchmarks/peers_sac_step.py [--rounds 8] [--calls 60]
        [--clock cpu|wall] [--hidden 128] [--algo td3] [--fill 100000]

``--clock cpu`` (the default) counts this thread's CPU time, which other processes on a
loaded machine do not add to (cache contention still shows); record idle with ``wall``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
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
from rl_collectors import Collector  # noqa: E402
from rl_objectives import make_update_step  # noqa: E402
from rl_profiling import RunReport  # noqa: E402
from rl_replay import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer  # noqa: E402

# the parts each example hands sac_pendulum's loop (td3_mujoco.py: oneDNN linears, fused Adam)
PARTS = {"td3": td3_mujoco.PARTS}


def ours_step(cfg: sac_pendulum.Config, fill: int):
    """The example's update step and a buffer holding ``fill`` random frames."""
    env = sac_pendulum.make_env(cfg)
    parts = PARTS.get(cfg.algo, sac_pendulum.Parts())
    actor, qvalue = parts.agent(env, cfg)
    loss_fn, target_updater = parts.loss(actor, qvalue, env, cfg)
    optim = parts.optimizer(loss_fn, cfg)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(cfg.buffer_size),
                                    sampler=RandomSampler(), batch_size=cfg.batch_size)
    collector = Collector(env, actor, frames_per_batch=cfg.num_envs, total_frames=fill,
                          init_random_frames=fill)
    for batch in collector:
        buffer.extend(batch.reshape(-1))
    collector.shutdown()
    if cfg.policy_delay != 1:  # the example's loop: train_step, the actor every d-th step
        timing, done = RunReport(cfg.algo), [0]

        def steps(n: int) -> None:
            for _ in range(n):
                sac_pendulum.train_step(buffer, loss_fn, optim, target_updater, timing,
                                        actor_step=done[0] % cfg.policy_delay == 0)
                done[0] += 1

        return steps
    update = make_update_step(loss_fn, optim, target_updater=target_updater)

    def steps(n: int) -> None:
        for _ in range(n):
            update(buffer.sample())

    return steps


def sb3_step(cfg: sac_pendulum.Config, fill: int):
    """SB3's ``SAC.train`` (or ``TD3.train``) after as many random frames (its own buffer)."""
    make = peers_sb3.td3 if cfg.algo == "td3" else peers_sb3.sac
    model, _ = make(cfg.seed, dataclasses.asdict(cfg))
    model.learning_starts = fill
    model.learn(total_timesteps=fill + cfg.num_envs)

    def steps(n: int) -> None:
        model.train(gradient_steps=n, batch_size=cfg.batch_size)

    return steps


def measure(sides: dict, rounds: int, calls: int, clock) -> dict[str, list[float]]:
    """Microseconds a step, per round and side; the order alternates each round."""
    for steps in sides.values():
        steps(calls // 2)  # warm-up: first calls, Adam state, caches
    out: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for r in range(rounds):
        for name in names if r % 2 == 0 else names[::-1]:
            start = clock()
            sides[name](calls)
            out[name].append((clock() - start) / calls * 1e6)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    parser.add_argument("--hidden", type=int, default=None,
                        help="the networks' width (default: the example's)")
    parser.add_argument("--algo", choices=("sac", "td3"), default="sac",
                        help="sac: sac_pendulum.py's step; td3: td3_mujoco.py's")
    parser.add_argument("--fill", type=int, default=None,
                        help="random frames in each buffer before timing (default: the "
                             "example's learning_starts; a late step samples from ~100,000)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.distributions.Distribution.set_default_validate_args(False)  # as the example
    config = td3_mujoco.Config if args.algo == "td3" else sac_pendulum.Config
    cfg = config() if args.hidden is None else config(hidden=args.hidden)
    torch.manual_seed(cfg.seed)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    load = os.getloadavg()[0]
    fill = cfg.learning_starts if args.fill is None else args.fill
    rows = measure({"ours": ours_step(cfg, fill), "sb3": sb3_step(cfg, fill)}, args.rounds,
                   args.calls, clock)
    median = {name: round(statistics.median(v)) for name, v in rows.items()}
    print(json.dumps({
        "task": f"{cfg.algo} {cfg.env_id} update step", "clock": args.clock, "hidden": cfg.hidden,
        "buffer_frames": fill,
        "median_us": median, "ours/sb3": round(median["ours"] / median["sb3"], 3),
        "rounds_us": {name: [round(x) for x in v] for name, v in rows.items()},
        "load_start": round(load, 2), "load_end": round(os.getloadavg()[0], 2),
    }))


if __name__ == "__main__":
    main()
