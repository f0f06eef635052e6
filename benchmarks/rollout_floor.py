"""The floor of PPO CartPole's ``collect`` + ``advantage`` phases: a plain torch loop.

``bench_rollout_ab.py --floor`` runs this file once per side and round, each side in its own
process (``--side plain`` or ``--side collector``, ``--checkout`` the checkout whose packages
and ``examples/ppo_cartpole.py`` the collector side imports), and prints its JSON line:
``{"collect": s, "advantage": s, "frames": n}`` for ``--frames`` frames after one warm-up
batch. Both sides build the example's env and agent from its ``Config`` (16 CartPoles,
T = 32, 64-64 tanh MLPs, gamma 0.98, lambda 0.8; fixed weights, no training).

The plain side is what a CleanRL script does with the same pieces: gymnasium's vector env
(CartPole's numpy ``vector_entry_point``, the env ``GymEnv`` picks), the same networks as
``nn.Sequential`` with the agent's weights, ``Categorical`` sampling and log-probs,
observations, next observations, actions, log-probs, rewards, flags, ``is_init``, step
counts and episode returns written into tensors preallocated ``[T, N]``, the finished
sub-envs reset at once (new states drawn as CartPole's own autoreset draws them, as
``GymWrapper`` does for this ``NEXT_STEP`` env, whose ``reset`` resets every sub-env; so every
transition is valid and none is spent on an autoreset), then GAE as CleanRL's reversed loop
with the critic run once on the observations and once on the next ones, the advantage
normalised (``average_gae=True``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _example(checkout: Path) -> Any:
    """``checkout``'s ``examples/ppo_cartpole.py``, loaded by path (``sys.path`` untouched)."""
    spec = importlib.util.spec_from_file_location(
        "_floor_ppo_cartpole", checkout / "examples" / "ppo_cartpole.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up while it is built
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def _setup(checkout: Path) -> tuple[Any, Any, Any, Any, Any]:
    """The example's config, env, actor and critic (seeded, one thread, no validation)."""
    import torch

    ex = _example(checkout)
    cfg = ex.Config()
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.threads)
    torch.distributions.Distribution.set_default_validate_args(False)
    env = ex.make_env(cfg)
    actor, critic = ex.make_agent(env, cfg)
    return ex, cfg, env, actor, critic


def collector_side(checkout: Path, frames: int) -> dict[str, float]:
    """The checkout's ``Collector`` and ``GAE`` as its PPO CartPole example wires them."""
    import torch
    from rl_collectors import Collector
    from rl_objectives import GAE

    _, cfg, env, actor, critic = _setup(checkout)
    per_batch = cfg.num_envs * cfg.steps_per_env
    collector = Collector(env, actor, frames_per_batch=per_batch, total_frames=-1,
                          check_finite=False)
    gae = GAE(gamma=cfg.gamma, lmbda=cfg.lmbda, value_network=critic, average_gae=True)
    batches = iter(collector)
    with torch.no_grad():
        gae(next(batches))  # warm-up
    collect = advantage = 0.0
    for _ in range(-(-frames // per_batch)):
        t0 = time.perf_counter()
        batch = next(batches)
        t1 = time.perf_counter()
        with torch.no_grad():
            gae(batch)
        collect, advantage = collect + t1 - t0, advantage + time.perf_counter() - t1
    collector.shutdown()
    return {"collect": collect, "advantage": advantage, "frames": frames}


def _plain_nets(actor: Any, critic: Any) -> tuple[Any, Any]:
    """The agent's two MLPs as plain ``nn.Sequential`` over the same layers (same weights)."""
    from torch import nn

    return tuple(nn.Sequential(*next(m for m in module.modules() if isinstance(m, nn.Sequential)))
                 for module in (actor, critic))


class PlainRollout:
    """CleanRL's rollout and GAE over preallocated ``[T, N]`` tensors (module docstring)."""

    def __init__(self, cfg: Any, actor_net: Any, critic_net: Any) -> None:
        import gymnasium as gym
        import torch

        self.cfg, self.actor, self.critic = cfg, actor_net, critic_net
        self.venv = gym.make_vec(cfg.env_id, num_envs=cfg.num_envs,
                                 vectorization_mode="vector_entry_point")
        obs, _ = self.venv.reset(seed=cfg.seed)
        t, n, d = cfg.steps_per_env, cfg.num_envs, obs.shape[-1]
        self.obs, self.next_obs = torch.zeros(t, n, d), torch.zeros(t, n, d)
        self.action = torch.zeros(t, n, dtype=torch.long)
        self.logp, self.reward = torch.zeros(t, n), torch.zeros(t, n)
        self.terminated = torch.zeros(t, n, dtype=torch.bool)
        self.truncated = torch.zeros(t, n, dtype=torch.bool)
        self.is_init, self.step_count = torch.zeros(t, n, dtype=torch.bool), torch.zeros(t, n)
        self.episode_return = torch.zeros(t, n)
        self.cur = torch.from_numpy(obs).float()
        self.first = torch.ones(n, dtype=torch.bool)
        self.count, self.ret = torch.zeros(n), torch.zeros(n)

    def collect(self) -> None:
        import torch

        for t in range(self.cfg.steps_per_env):
            self.obs[t], self.is_init[t] = self.cur, self.first
            with torch.no_grad():
                dist = torch.distributions.Categorical(logits=self.actor(self.obs[t]))
                action = dist.sample()
                self.logp[t] = dist.log_prob(action)
            self.action[t] = action
            obs, reward, term, trunc, _ = self.venv.step(action.numpy())
            self.next_obs[t] = torch.from_numpy(obs)
            self.reward[t] = torch.from_numpy(reward)
            self.terminated[t], self.truncated[t] = torch.from_numpy(term), torch.from_numpy(trunc)
            self.count += 1
            self.ret += self.reward[t]
            self.step_count[t], self.episode_return[t] = self.count, self.ret
            done = self.terminated[t] | self.truncated[t]
            self.cur, self.first = self.next_obs[t], done
            if bool(done.any()):
                self.cur = self.next_obs[t].clone()
                self.cur[done] = self._reset_done(done.numpy())
                self.count[done], self.ret[done] = 0, 0

    def _reset_done(self, mask: Any) -> Any:
        """New states for the finished sub-envs, drawn as CartPole's own autoreset draws
        them, its pending autoreset cleared (its ``reset`` resets every sub-env)."""
        import torch

        venv = self.venv
        new = venv.np_random.uniform(low=venv.low, high=venv.high, size=(4, int(mask.sum())))
        venv.state[:, mask] = new
        venv.steps[mask] = 0
        venv.prev_done[mask] = False
        return torch.from_numpy(new.T).float()

    def advantage(self) -> Any:
        import torch

        gamma, lmbda = self.cfg.gamma, self.cfg.lmbda
        with torch.no_grad():
            value = self.critic(self.obs).squeeze(-1)
            next_value = self.critic(self.next_obs).squeeze(-1)
            delta = self.reward + gamma * next_value * (~self.terminated) - value
            not_done = (~(self.terminated | self.truncated)).float()
            adv, last = torch.zeros_like(delta), torch.zeros_like(delta[0])
            for t in reversed(range(self.cfg.steps_per_env)):
                last = delta[t] + gamma * lmbda * not_done[t] * last
                adv[t] = last
            returns = adv + value
            adv = (adv - adv.mean()) / adv.std().clamp_min(1e-6)
        return adv, returns


def plain_side(checkout: Path, frames: int) -> dict[str, float]:
    _, cfg, env, actor, critic = _setup(checkout)
    env.close()
    loop = PlainRollout(cfg, *_plain_nets(actor, critic))
    loop.collect()  # warm-up
    loop.advantage()
    collect = advantage = 0.0
    for _ in range(-(-frames // (cfg.num_envs * cfg.steps_per_env))):
        t0 = time.perf_counter()
        loop.collect()
        t1 = time.perf_counter()
        loop.advantage()
        collect, advantage = collect + t1 - t0, advantage + time.perf_counter() - t1
    loop.venv.close()
    return {"collect": collect, "advantage": advantage, "frames": frames}


def _run_side(side: str, checkout: Path, frames: int) -> dict[str, float]:
    env = dict(os.environ)
    if checkout != ROOT:
        env["PYTHONPATH"] = os.pathsep.join(
            sorted(str(p) for p in (checkout / "packages").glob("*/src")))
    cmd = [sys.executable, __file__, "--side", side, "--checkout", str(checkout),
           "--frames", str(frames)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                         check=True, cwd=checkout).stdout
    return json.loads(out.strip().splitlines()[-1])


def compare(this: Path, other: Path | None, rounds: int, frames: int) -> None:
    """Alternate the sides ``rounds`` times; print each round and the medians."""
    sides = [("plain floor", "plain", this), ("collector", "collector", this)]
    if other is not None:
        sides.append(("other collector", "collector", other))
    totals: dict[str, list[float]] = {name: [] for name, _, _ in sides}
    for r in range(rounds):
        for name, side, checkout in sides[:: 1 if r % 2 == 0 else -1]:
            got = _run_side(side, checkout, frames)
            totals[name].append(got["collect"] + got["advantage"])
            print(f"round {r}: {name:15s} collect {got['collect']:.3f} s advantage "
                  f"{got['advantage']:.3f} s ({frames} frames)", flush=True)
    med = {name: statistics.median(v) for name, v in totals.items()}
    line = (f"collect+advantage, median of {rounds}: collector {med['collector']:.3f} s, "
            f"plain floor {med['plain floor']:.3f} s "
            f"(floor/collector {med['plain floor'] / med['collector']:.3f})")
    if other is not None:
        line += (f"; other collector {med['other collector']:.3f} s (floor/other "
                 f"{med['plain floor'] / med['other collector']:.3f}, target <= 0.75)")
    print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--side", choices=("plain", "collector"), required=True)
    parser.add_argument("--checkout", type=Path, default=ROOT)
    parser.add_argument("--frames", type=int, default=50_000)
    args = parser.parse_args()
    run = plain_side if args.side == "plain" else collector_side
    print(json.dumps(run(args.checkout.resolve(), args.frames)))


if __name__ == "__main__":
    main()
