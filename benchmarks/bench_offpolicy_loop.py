"""The collection side of an off-policy loop, one frame a batch, against the plain loop.

SAC, TD3 and CrossQ examples step one env one frame at a time, store the frame in a
replay buffer and take a gradient step: per frame, what is not the gradient step is
the collector's batch (allocation, plan, policy call, env step, trajectory ids, the
finite check) and the replay write. This script times that side alone, by CPU time
per frame (``time.process_time``, one torch thread; the machine may be shared),
``--rounds`` interleaved rounds of ``--frames`` frames each:

- ``plain``: a gymnasium env, the same MLP actor called on ``torch.from_numpy(obs)``,
  the frame written into preallocated numpy arrays (observation, action, reward, next
  observation, terminated, truncated), reset by hand at an episode's end: the shape of
  SB3's ``collect_rollouts`` + ``ReplayBuffer.add``, without its callbacks.
- ``ours``: ``Collector(GymEnv(env_id), actor, frames_per_batch=1, check_finite=True)``
  and ``TensorDictReplayBuffer.extend(batch.reshape(-1))``, the examples' loop (with the
  examples' ``DoubleToFloat`` where the env returns float64 observations: MuJoCo).

    uv run python benchmarks/bench_offpolicy_loop.py [--env-id Pendulum-v1] [--frames 2000]

The last line is one JSON object: the medians (microseconds a frame), their ratio
(ours / plain: how many times the plain loop's cost ours is), every round and the
1-minute load at the start and the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import gymnasium as gym
import numpy as np
import torch
from rl_collectors import Collector
from rl_envs import DoubleToFloat, GymEnv, TransformedEnv
from rl_replay import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer
from tensordict.nn import TensorDictModule


def make_net(n_obs: int, n_act: int, high: float) -> torch.nn.Module:
    """A 64x64 tanh MLP squashed into the action bounds (the actor of both loops)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(n_obs, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, n_act), torch.nn.Tanh(), _Scale(high),
    )


class _Scale(torch.nn.Module):
    def __init__(self, high: float) -> None:
        super().__init__()
        self.high = high

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.high


def plain_loop(env_id: str, net: torch.nn.Module, capacity: int):
    """The plain loop: ``run(frames)`` steps and stores ``frames`` frames."""
    env = gym.make(env_id)
    obs, _ = env.reset(seed=0)
    n_obs, n_act = env.observation_space.shape[0], env.action_space.shape[0]
    store = {"obs": np.zeros((capacity, n_obs), np.float32),
             "next_obs": np.zeros((capacity, n_obs), np.float32),
             "action": np.zeros((capacity, n_act), np.float32),
             "reward": np.zeros(capacity, np.float32),
             "terminated": np.zeros(capacity, bool), "truncated": np.zeros(capacity, bool)}
    state = {"obs": obs, "pos": 0}

    def run(frames: int) -> None:
        for _ in range(frames):
            with torch.no_grad():
                action = net(torch.from_numpy(state["obs"]).float()).numpy()
            nxt, reward, term, trunc, _ = env.step(action)
            i = state["pos"] % capacity
            store["obs"][i], store["next_obs"][i], store["action"][i] = state["obs"], nxt, action
            store["reward"][i], store["terminated"][i], store["truncated"][i] = reward, term, trunc
            state["pos"] += 1
            state["obs"] = env.reset()[0] if term or trunc else nxt

    return run, env.close


def our_loop(env_id: str, net: torch.nn.Module, capacity: int):
    """The examples' loop: ``run(frames)`` collects and stores ``frames`` one-frame batches."""
    env = GymEnv(env_id)
    if env.observation_spec["observation"].dtype == torch.float64:  # MuJoCo: as the examples
        env = TransformedEnv(env, DoubleToFloat())  # (the plain loop calls .float())
    env.set_seed(0)
    actor = TensorDictModule(net, in_keys=["observation"], out_keys=["action"])
    collector = Collector(env, actor, frames_per_batch=1, total_frames=-1, check_finite=True)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(capacity), sampler=RandomSampler(),
                                    batch_size=256)
    batches = iter(collector)

    def run(frames: int) -> None:
        for _ in range(frames):
            buffer.extend(next(batches).reshape(-1))

    return run, collector.shutdown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env-id", default="Pendulum-v1")
    parser.add_argument("--frames", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    probe = gym.make(args.env_id)
    net = make_net(probe.observation_space.shape[0], probe.action_space.shape[0],
                   float(probe.action_space.high.max()))
    probe.close()
    capacity = args.frames * (args.rounds + 1)
    load = os.getloadavg()[0]
    sides = {"plain": plain_loop(args.env_id, net, capacity),
             "ours": our_loop(args.env_id, net, capacity)}
    rounds: dict[str, list[float]] = {name: [] for name in sides}
    try:
        for run, _ in sides.values():
            run(args.frames // 4)  # warm-up: first calls, the first batch's allocation
        for r in range(args.rounds):
            for name in list(sides) if r % 2 == 0 else list(sides)[::-1]:
                start = time.process_time()
                sides[name][0](args.frames)
                rounds[name].append((time.process_time() - start) / args.frames * 1e6)
    finally:
        for _, close in sides.values():
            close()
    median = {name: round(statistics.median(v), 1) for name, v in rounds.items()}
    print(f"{args.env_id}, one frame a batch: ours {median['ours']} us/frame, plain loop "
          f"{median['plain']} us/frame, ratio {median['ours'] / median['plain']:.2f}")
    print(json.dumps({
        "bench": "offpolicy_loop", "env_id": args.env_id, "frames": args.frames,
        "median_us": median, "ours/plain": round(median["ours"] / median["plain"], 3),
        "rounds_us": {k: [round(x, 1) for x in v] for k, v in rounds.items()},
        "load_avg_1min_start": round(load, 2), "load_avg_1min_end": round(os.getloadavg()[0], 2),
        "clock": "process CPU time (time.process_time), one torch thread",
    }))


if __name__ == "__main__":
    main()
