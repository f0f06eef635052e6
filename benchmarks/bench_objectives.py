"""rl-objectives: GAE and TD(lambda) scan vs the reference loop, on one CPU thread.

Figures: ours (ms), the loop measured in the same run (ratio ours/loop), the
memory-bound limit (bytes read + written over a measured copy rate), the absolute target
``[256, 1000]`` GAE <= 1.5 ms, the PPO loss forward+backward in eager mode, and the SAC
loss forward+backward against the same losses written in plain torch.

The target is held on *fresh* inputs: in training every call gets a new batch (new
tensors, just written by the collector) and returns new tensors, so each call is timed on
inputs built right before it, outside the timer, the previous call's outputs freed. The
figure on the same tensors every call (warm caches, the allocator's blocks reused) is
printed beside it, for comparison only. Both are medians over calls taken in turns.
"""

from __future__ import annotations

import statistics
import time
from functools import partial

import torch
from rl_objectives.value import functional as F

SHAPES = [(256, 1000), (8, 2048), (2048, 128)]
TARGET_MS = 1.5


def _best_ms(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def _inputs(b: int, t: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    v, nv, r = (torch.randn(b, t, 1, generator=g) for _ in range(3))
    done = torch.rand(b, t, 1, generator=g) < 0.01
    term = done & (torch.rand(b, t, 1, generator=g) < 0.5)
    return v, nv, r, done, term


def _copy_limit_ms(b: int, t: int) -> float:
    # GAE reads 3 float32 + 2 bool leaves and writes 2 float32 leaves
    n_bytes = b * t * (3 * 4 + 2 + 2 * 4)
    src = torch.randn(b * t * 4)
    dst = torch.empty_like(src)
    ms = _best_ms(lambda: dst.copy_(src), 20)
    rate = 2 * src.numel() * 4 / (ms / 1e3)  # bytes moved per second by a copy
    return n_bytes / rate * 1e3


def _interleaved_best_ms(fns: dict, repeats: dict, rounds: int = 3) -> dict:
    """Best time of each callable, the callables taking turns: a shared machine's load
    then weighs on all of them alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], _best_ms(fn, repeats[name]))
    return best


def _fresh_vs_warm_ms(b: int, t: int, calls: int = 40, rounds: int = 3) -> tuple[float, float]:
    """Median ms of GAE on new inputs each call, and on the same inputs each call, the two
    taking turns (``rounds`` blocks of ``calls`` each) so that the machine's load weighs on
    both alike."""
    fresh, warm = [], []
    same = _inputs(b, t)
    gae = partial(F.vec_generalized_advantage_estimate, 0.99, 0.95)
    gae(*same)
    for r in range(rounds):
        for i in range(calls):
            args = _inputs(b, t, seed=1 + r * calls + i)  # a new batch, as in training
            start = time.perf_counter()
            out = gae(*args)
            fresh.append(time.perf_counter() - start)
            del out, args
        for _ in range(calls):
            start = time.perf_counter()
            out = gae(*same)
            warm.append(time.perf_counter() - start)
            del out
    return statistics.median(fresh) * 1e3, statistics.median(warm) * 1e3


def _estimators(rows: list[dict]) -> None:
    for b, t in SHAPES:
        args = _inputs(b, t)
        v, nv, r, done, term = args
        fns = {
            "gae": partial(F.vec_generalized_advantage_estimate, 0.99, 0.95, *args),
            "gae_loop": partial(F.generalized_advantage_estimate, 0.99, 0.95, *args),
            "tdl": partial(F.vec_td_lambda_return_estimate, 0.99, 0.95, nv, r, done, term),
            "tdl_loop": partial(F.td_lambda_return_estimate, 0.99, 0.95, nv, r, done, term),
        }
        ms = _interleaved_best_ms(fns, {"gae": 50, "gae_loop": 1, "tdl": 50, "tdl_loop": 1})
        gae, gae_loop, tdl, tdl_loop = ms["gae"], ms["gae_loop"], ms["tdl"], ms["tdl_loop"]
        limit = _copy_limit_ms(b, t)
        rows.append(dict(figure=f"GAE [{b}, {t}] ours/loop", value=gae, unit="ms", limit=gae_loop,
                         ratio=gae / gae_loop))
        rows.append(dict(figure=f"GAE [{b}, {t}] ours/memory-bound limit", value=gae, unit="ms",
                         limit=limit, ratio=gae / limit))
        rows.append(dict(figure=f"TD(lambda) [{b}, {t}] ours/loop", value=tdl, unit="ms",
                         limit=tdl_loop, ratio=tdl / tdl_loop))
        rows.append(dict(figure=f"TD(lambda) [{b}, {t}] ours/GAE ours (target <= 1.1)", value=tdl,
                         unit="ms", limit=gae, ratio=tdl / gae))
        if (b, t) == (256, 1000):
            fresh, warm = _fresh_vs_warm_ms(b, t)
            rows.append(dict(figure="GAE [256, 1000] fresh inputs each call, median: ours/target "
                             "1.5 ms (target <= 1)", value=fresh, unit="ms", limit=TARGET_MS,
                             ratio=fresh / TARGET_MS))
            rows.append(dict(figure="GAE [256, 1000] same inputs each call, median (info): "
                             "ours/target 1.5 ms", value=warm, unit="ms", limit=TARGET_MS,
                             ratio=warm / TARGET_MS))


def _ppo(rows: list[dict]) -> None:
    from rl_objectives import ClipPPOLoss
    from tensordict import TensorDict
    from tensordict.nn import (
        NormalParamExtractor,
        ProbabilisticTensorDictModule,
        ProbabilisticTensorDictSequential,
        TensorDictModule,
    )

    net = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Tanh(), torch.nn.Linear(64, 4),
                              NormalParamExtractor())
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=torch.distributions.Normal))
    critic = TensorDictModule(torch.nn.Linear(8, 1), ["observation"], ["state_value"])
    loss = ClipPPOLoss(actor, critic)
    td = TensorDict({"observation": torch.randn(64, 32, 8), "action": torch.randn(64, 32, 2),
                     "sample_log_prob": torch.randn(64, 32), "advantage": torch.randn(64, 32, 1),
                     "value_target": torch.randn(64, 32, 1)}, [64, 32])

    def step():
        out = loss(td)
        (out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]).backward()

    fwd_bwd = _best_ms(step, 10)
    plain = _best_ms(lambda: net(td["observation"]).__getitem__(0).sum().backward(), 10)
    rows.append(dict(figure="ClipPPOLoss fwd+bwd [64, 32] eager / actor-net fwd+bwd", value=fwd_bwd,
                     unit="ms", limit=plain, ratio=fwd_bwd / plain))


def _sac_nets(hidden: int = 256):
    from tensordict.nn import NormalParamExtractor

    obs, act = 3, 1  # Pendulum-v1

    def mlp(n_in, n_out):
        return torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
                                   torch.nn.Linear(hidden, n_out))

    class Q(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = mlp(obs + act, 1)

        def forward(self, observation, action):
            return self.net(torch.cat([observation, action], -1))

    actor_net = torch.nn.Sequential(mlp(obs, 2 * act), NormalParamExtractor())
    return obs, act, actor_net, Q


def _tanh_normal(loc, scale):
    dist = torch.distributions
    return dist.TransformedDistribution(dist.Independent(dist.Normal(loc, scale), 1),
                                        [dist.TanhTransform(cache_size=1)])


def _plain_sac_step(actor_net, q_nets, q_targets, log_alpha, td, gamma=0.99):
    """The same SAC v2 losses written with plain torch: the reference."""
    obs, act, nxt = td["observation"], td["action"], td["next"]
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_dist = _tanh_normal(*actor_net(nxt["observation"]))
        next_act = next_dist.rsample()
        next_q = torch.stack([q(nxt["observation"], next_act) for q in q_targets]).amin(0)
        soft = next_q.squeeze(-1) - alpha * next_dist.log_prob(next_act)
        target = nxt["reward"].squeeze(-1) + gamma * (~nxt["terminated"].squeeze(-1)) * soft
    pred = torch.stack([q(obs, act).squeeze(-1) for q in q_nets])
    loss_q = torch.nn.functional.smooth_l1_loss(pred, target.expand_as(pred),
                                                reduction="none").sum(0).mean()
    dist = _tanh_normal(*actor_net(obs))
    new_act = dist.rsample()
    log_prob = dist.log_prob(new_act)
    q_new = torch.stack([torch.func.functional_call(q, {k: v.detach() for k, v in
                         q.named_parameters()}, (obs, new_act)) for q in q_nets]).amin(0)
    loss_actor = (alpha * log_prob - q_new.squeeze(-1)).mean()
    loss_alpha = -(log_alpha * (log_prob.detach() - 1.0)).mean()
    (loss_q + loss_actor + loss_alpha).backward()


def _sac(rows: list[dict]) -> None:
    import copy

    from rl_objectives import SACLoss
    from tensordict import TensorDict
    from tensordict.nn import (
        ProbabilisticTensorDictModule,
        ProbabilisticTensorDictSequential,
        TensorDictModule,
    )

    torch.manual_seed(0)
    obs, act, actor_net, Q = _sac_nets()
    actor = ProbabilisticTensorDictSequential(
        TensorDictModule(actor_net, ["observation"], ["loc", "scale"]),
        ProbabilisticTensorDictModule(["loc", "scale"], ["action"],
                                      distribution_class=_tanh_normal))
    loss = SACLoss(actor, TensorDictModule(Q(), ["observation", "action"],
                                           ["state_action_value"]))
    n = 256
    done = torch.rand(n, 1) < 0.01
    td = TensorDict({"observation": torch.randn(n, obs), "action": torch.rand(n, act) * 2 - 1,
                     "next": {"observation": torch.randn(n, obs), "reward": torch.randn(n, 1),
                              "done": done, "terminated": done}}, [n])

    def step():
        out = loss(td)
        (out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]).backward()

    q_nets = [Q(), Q()]
    q_targets = copy.deepcopy(q_nets)
    log_alpha = torch.zeros((), requires_grad=True)
    ours = _best_ms(step, 10)
    plain = _best_ms(lambda: _plain_sac_step(actor_net, q_nets, q_targets, log_alpha, td), 10)
    rows.append(dict(figure="SACLoss fwd+bwd [256] eager / plain-torch SAC step", value=ours,
                     unit="ms", limit=plain, ratio=ours / plain))


def run() -> list[dict]:
    """Run every figure on one thread and return the rows."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows: list[dict] = []
        _estimators(rows)
        _ppo(rows)
        _sac(rows)
        return rows
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    for row in run():
        print(f"{row['figure']:<60} {row['value']:9.3f} {row['unit']:<3} "
              f"limit {row['limit']:9.3f}  ratio {row['ratio']:.3f}")
