"""One CrossQ gradient step at sb3-contrib's sizes: ours against the same math in plain torch.

    uv run python benchmarks/bench_crossq.py                      # critics 1024 and 2048 wide
    uv run python benchmarks/bench_crossq.py --widths 1024 --profile   # and the top ops

What ``examples/crossq_mujoco.py`` runs per frame on HalfCheetah-v5 (17 -> 6), batch 256:
``sac_pendulum.train_step`` (sample from a replay buffer, ``CrossQLoss``, one backward, one
Adam with beta1 0.5 over actor, two critics and the temperature), the actor and the
temperature in every third step (``policy_delay`` 3). The plain row is the same math
written out as a CleanRL-style script would: ``nn.Sequential`` networks, a batch
renormalisation written as tensor ops, the two critics as two modules, the loss by hand,
sampled from a tensor by index. Both rows run the same three-step cycle (two critic steps,
one critic + actor step); a figure is process CPU seconds per step (``time.process_time``:
the machine may be shared; one torch thread), the median over ``--rounds`` rounds of
``--cycles`` cycles. The JSON last line (also written to ``--out``) holds the figures, the
1-minute load at the start and the end, and the hour-a-seed budget each width gives:
``3600 / (step + env step)`` frames, one gradient step per frame.
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
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from crossq_mujoco import Config, make_crossq_agent, make_crossq_optimizer  # noqa: E402
from rl_objectives import CrossQLoss  # noqa: E402
from rl_profiling import RunReport  # noqa: E402
from rl_replay import LazyTensorStorage, RandomSampler, TensorDictReplayBuffer  # noqa: E402
from sac_pendulum import make_env, train_step  # noqa: E402
from tensordict import TensorDict  # noqa: E402

N_OBS, N_ACT, FILL = 17, 6, 4096  # HalfCheetah's sizes; transitions in the buffer


def synthetic(n: int) -> TensorDict:
    """``n`` transitions of HalfCheetah's shapes and dtypes (the learner does not care)."""
    return TensorDict({
        "observation": torch.randn(n, N_OBS), "action": torch.rand(n, N_ACT) * 2 - 1,
        "next": {"observation": torch.randn(n, N_OBS), "reward": torch.randn(n, 1),
                 "done": torch.zeros(n, 1, dtype=torch.bool),
                 "terminated": torch.zeros(n, 1, dtype=torch.bool)},
    }, [n])


def ours(width: int, batch: int):
    """``crossq_mujoco.py``'s step: ``train_step`` on its loss, optimiser and buffer."""
    cfg = Config(critic_hidden=width, batch_size=batch)
    env = make_env(cfg)
    actor, qvalue = make_crossq_agent(env, cfg)
    loss_fn = CrossQLoss(actor, qvalue, loss_function="l2", gamma=cfg.gamma,
                         action_spec=env.full_action_spec)
    env.close()
    optim = make_crossq_optimizer(loss_fn, cfg)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(FILL), sampler=RandomSampler(),
                                    batch_size=batch)
    buffer.extend(synthetic(FILL))
    timing = RunReport("bench")

    def step(actor_step: bool) -> None:
        train_step(buffer, loss_fn, optim, None, timing, actor_step=actor_step)

    return step


def plain_renorm(width: int) -> nn.Module:
    """Batch renormalisation in train mode, written out (warm-up: ``r = 1, d = 0``)."""

    class Renorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight, self.bias = nn.Parameter(torch.ones(width)), nn.Parameter(
                torch.zeros(width))
            self.register_buffer("mean", torch.zeros(width))
            self.register_buffer("var", torch.ones(width))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.training:
                return (x - self.mean) * torch.rsqrt(self.var + 1e-3) * self.weight + self.bias
            mean = x.mean(0)
            centred = x - mean
            var = (centred * centred).mean(0)
            with torch.no_grad():
                self.mean.lerp_(mean, 0.01)
                self.var.lerp_(var, 0.01)
            return centred * (torch.rsqrt(var + 1e-3) * self.weight) + self.bias

    return Renorm()


def plain(width: int, batch: int):
    """The same step as a plain script: ``nn.Sequential`` networks, the losses by hand."""
    actor = nn.Sequential(nn.Linear(N_OBS, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 2 * N_ACT))
    n_in = N_OBS + N_ACT
    critics = nn.ModuleList(nn.Sequential(
        plain_renorm(n_in), nn.Linear(n_in, width), nn.ReLU(), plain_renorm(width),
        nn.Linear(width, width), nn.ReLU(), plain_renorm(width), nn.Linear(width, 1),
    ) for _ in range(2))
    log_alpha = nn.Parameter(torch.zeros(()))
    params = [*actor.parameters(), *critics.parameters(), log_alpha]
    optim = torch.optim.Adam(params, lr=1e-3, betas=(0.5, 0.999), fused=True)
    data = synthetic(FILL)

    def sample(obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loc, log_std = actor(obs).chunk(2, -1)
        std = nn.functional.softplus(log_std) + 1e-4
        u = loc + std * torch.randn_like(loc)
        act = torch.tanh(u)
        log_prob = (-0.5 * ((u - loc) / std) ** 2 - std.log() - 0.9189385332046727
                    - torch.log1p(-act.pow(2) + 1e-6)).sum(-1)
        return act, log_prob

    def step(actor_step: bool) -> None:
        idx = torch.randint(FILL, (batch,))
        obs, act = data["observation"][idx], data["action"][idx]
        nobs, rew = data["next", "observation"][idx], data["next", "reward"][idx, 0]
        alpha = log_alpha.detach().exp()
        with torch.no_grad():
            nact, nlogp = sample(nobs)
        joint = torch.cat([torch.cat([obs, act], -1), torch.cat([nobs, nact], -1)])
        q = torch.stack([c(joint).squeeze(-1) for c in critics])
        pred, nq = q[:, :batch], q[:, batch:].detach()
        target = rew + 0.99 * (nq.amin(0) - alpha * nlogp)
        loss = ((pred - target) ** 2).mean(-1).sum()
        if actor_step:
            a, logp = sample(obs)
            for c in critics:
                c.eval()
            with torch.no_grad():  # the critics' parameters detached, as CrossQLoss does
                frozen = [{k: v.detach() for k, v in c.named_parameters()} for c in critics]
            qa = torch.stack([torch.func.functional_call(c, f, (torch.cat([obs, a], -1),))
                              for c, f in zip(critics, frozen, strict=True)]).amin(0)
            for c in critics:
                c.train()
            loss = loss + (alpha * logp - qa.squeeze(-1)).mean()
            loss = loss - (log_alpha * (logp.detach() - N_ACT)).mean()
        optim.zero_grad(set_to_none=True)
        loss.backward()
        optim.step()

    return step


def seconds_per_step(step, cycles: int, rounds: int, delay: int = 3) -> float:
    """Median over ``rounds`` of the process CPU seconds per step of ``cycles`` cycles."""
    for i in range(delay):  # warm-up
        step(i == 0)
    figures = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(cycles):
            for i in range(delay):
                step(i == 0)
        figures.append((time.process_time() - start) / (cycles * delay))
    return statistics.median(figures)


def env_step_seconds(frames: int = 2000) -> float:
    """Process CPU seconds per HalfCheetah-v5 step through our env (random actions)."""
    env = make_env(Config())
    td = env.reset()
    start = time.process_time()
    for _ in range(frames):
        td = env.rand_step(td)
        td = td["next"] if not td["next", "done"].any() else env.reset()
    env.close()
    return (time.process_time() - start) / frames


def profile(step, steps: int = 6) -> str:
    """The top ops by self CPU time over ``steps`` steps of one cycle length."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            step(i % 3 == 0)
    return prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--cycles", type=int, default=4, help="three-step cycles per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print ours' top ops too")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" /
                        "crossq_step.json")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    load_start, rows = os.getloadavg()[0], []
    env_s = env_step_seconds()
    for width in args.widths:
        ours_step, plain_step = ours(width, args.batch), plain(width, args.batch)
        o = seconds_per_step(ours_step, args.cycles, args.rounds)
        p = seconds_per_step(plain_step, args.cycles, args.rounds)
        rows.append({"critic_width": width, "ours_s": round(o, 4), "plain_s": round(p, 4),
                     "ratio": round(o / p, 3),
                     "frames_per_hour": int(3600 / (o + env_s))})
        print(f"critics {width} wide: ours {o * 1e3:.1f} ms/step, plain {p * 1e3:.1f} ms/step, "
              f"ratio {o / p:.2f}; an hour is {rows[-1]['frames_per_hour']:,} frames",
              flush=True)
        if args.profile:
            print(profile(ours_step))
    result = {"bench": "crossq_step", "batch": args.batch, "threads": 1,
              "env_step_s": round(env_s, 6), "rows": rows,
              "load_avg_1min_start": round(load_start, 2),
              "load_avg_1min_end": round(os.getloadavg()[0], 2),
              "started": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "clock": "process CPU time (time.process_time), one torch thread"}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
