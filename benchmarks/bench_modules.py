"""rl-modules: per-step cost of the policy modules over the bare network, on one CPU thread.

What a collector's step pays: the policy called on the step's TensorDict (fresh
observations each call, from a pool larger than the caches), under ``no_grad`` with
exploration on. The limit is measured in the same run: the same network's forward plus
the sampling any implementation must do, written as plain torch on tensors:

- ``ProbabilisticActor(TanhNormal)``, spec-aware, with its log-prob: the limit is
  ``net(obs)`` -> ``loc, softplus scale`` -> ``u = loc + scale * eps`` -> ``a = tanh(u)``
  (the spec is [-1, 1]) and ``log N(u) - log(1 - tanh(u)^2)`` summed over the action, in
  the fewest torch ops we found (the same fused form ``TanhNormal`` uses).
- ``QValueActor`` + ``EGreedyModule``: the limit is ``net(obs).max(-1)`` and the
  epsilon-greedy replacement (a uniform draw per row, a random action, a ``where``).

Target: ours / limit <= 1.3 at batch 8 and 4096.

And the Nature CNN (``ppo_atari.py``'s trunk) on two threads, as the example runs it:
``ConvNet``'s channels-last input against the same network given its input NCHW, forward
and backward on a ``[256, 4, 84, 84]`` uint8 minibatch and the forward alone on a
collection step's ``[8, 4, 84, 84]``; fresh pixels every call. Informational (ours / NCHW;
below 1 is faster): the layout is a choice, not an overhead.

And ``OneDNNLinear`` against ``nn.Linear`` on one thread: TD3's HalfCheetah critic (an
``MLP`` 23-256-256-1, ReLU) forward and backward on a batch of 256 fresh rows, and one
256x256 layer's forward on 256 rows. Informational (oneDNN / MKL; below 1 is faster): which
kernel wins depends on the CPU (``docs/modules.md``).
"""

from __future__ import annotations

import math
import time

import torch
from rl_envs import Bounded, Categorical
from rl_modules import (
    MLP,
    EGreedyModule,
    ExplorationType,
    NatureCNN,
    OneDNNLinear,
    ProbabilisticActor,
    QValueActor,
    TanhNormal,
    set_exploration_type,
)
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor, TensorDictModule, TensorDictSequential
from torch import nn

BATCHES = (8, 4096)
N_OBS, N_ACT, N_DISCRETE = 17, 6, 4  # HalfCheetah's sizes; a 4-action discrete task
TARGET = 1.3
POOL_BYTES = 64 << 20  # distinct inputs cycled through: more than the caches hold


def _pool(batch: int, n_obs: int) -> list[torch.Tensor]:
    count = max(8, min(4096, POOL_BYTES // (batch * n_obs * 4)))
    return [torch.randn(batch, n_obs) for _ in range(count)]


def _per_call_us(fn, inputs: list, calls: int) -> float:
    n = len(inputs)
    start = time.perf_counter()
    for i in range(calls):
        fn(inputs[i % n])
    return (time.perf_counter() - start) / calls * 1e6


def _interleaved(fns: dict, inputs: dict, calls: int, rounds: int = 7) -> dict:
    """Best per-call time of each callable over rounds in which they take turns."""
    best = dict.fromkeys(fns, float("inf"))
    for name, fn in fns.items():  # warm-up
        _per_call_us(fn, inputs[name], max(calls // 10, 5))
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], _per_call_us(fn, inputs[name], calls))
    return best


def _tanh_case(batch: int) -> tuple:
    net = nn.Sequential(MLP(N_OBS, 2 * N_ACT, num_cells=256, depth=2), NormalParamExtractor())
    spec = Bounded(-1.0, 1.0, shape=(batch, N_ACT))
    actor = ProbabilisticActor(
        TensorDictModule(net, ["observation"], ["loc", "scale"]),
        ["loc", "scale"],
        spec=spec,
        distribution_class=TanhNormal,
        return_log_prob=True,
    )
    const = 0.5 * math.log(2 * math.pi) + 2 * math.log(2.0)  # the spec is [-1, 1]: log h = 0

    def bare(obs: torch.Tensor):
        loc, scale = net(obs)
        eps = torch.randn_like(loc)
        u = torch.addcmul(loc, scale, eps)
        a = torch.tanh(u)
        # log N(u) - log(1 - tanh(u)^2) = 2 (u + softplus(-2u)) - eps^2 / 2 - log scale - const
        quad = torch.addcmul(scale.log(), eps, eps, value=0.5)
        log_prob = nn.functional.softplus(-2.0 * u).add_(u).mul_(2.0).sub_(quad).sub_(const).sum(-1)
        return a, log_prob

    return actor, bare, N_OBS


def _qvalue_case(batch: int) -> tuple:
    net = MLP(N_OBS, N_DISCRETE, num_cells=256, depth=2)
    spec = Categorical(N_DISCRETE, shape=(batch,))
    explore = EGreedyModule(spec, eps_init=0.1, eps_end=0.1, annealing_num_steps=1)
    policy = TensorDictSequential(QValueActor(net, spec=spec), explore)
    eps = explore.eps

    def bare(obs: torch.Tensor):
        values = net(obs)
        chosen, greedy = values.max(-1)
        random = torch.randint(0, N_DISCRETE, greedy.shape)
        return torch.where(torch.rand(greedy.shape) < eps, random, greedy), chosen

    return policy, bare, N_OBS


def _rows_for(name: str, make, batch: int) -> dict:
    module, bare, n_obs = make(batch)
    tensors = _pool(batch, n_obs)
    tds = [TensorDict(observation=t, batch_size=[batch]) for t in tensors]
    calls = 2000 if batch <= 64 else 100
    # as in a collector: no autograd, exploration on (a sample, not the deterministic action)
    with torch.no_grad(), set_exploration_type(ExplorationType.RANDOM):
        best = _interleaved({"ours": module, "bare": bare}, {"ours": tds, "bare": tensors}, calls)
    return dict(
        figure=f"{name} [{batch}] per step / bare net + sampling (target <= {TARGET})",
        value=best["ours"],
        unit="us",
        limit=best["bare"],
        ratio=best["ours"] / best["bare"],
    )


def _call(model, x: torch.Tensor, grad: bool) -> None:
    """One forward, then a backward of its sum (``grad``) or under ``no_grad``."""
    if grad:
        model(x).sum().backward()
    else:
        with torch.no_grad():
            model(x)


def _cnn_rows() -> list[dict]:
    """``NatureCNN`` (ours: input reordered channels-last) vs its layers on the NCHW input."""
    net = NatureCNN(in_channels=4)

    def plain(x: torch.Tensor) -> torch.Tensor:  # ConvNet.forward without the reordering
        return net.head(net.convs.layers(x.float().div_(255.0)))

    rows = []
    for batch, grad, calls in ((256, True, 2), (8, False, 50)):
        pixels = [torch.randint(0, 256, (batch, 4, 84, 84), dtype=torch.uint8)
                  for _ in range(max(4, POOL_BYTES // (batch * 4 * 84 * 84)))]

        def step(model, x, grad=grad):
            _call(model, x, grad)

        best = _interleaved({"ours": lambda x: step(net, x), "nchw": lambda x: step(plain, x)},
                            {"ours": pixels, "nchw": pixels}, calls, rounds=5)
        what = "fwd+bwd" if grad else "fwd no_grad"
        rows.append(dict(
            figure=f"NatureCNN {what} [{batch}, 4, 84, 84] uint8, 2 threads: channels-last / "
                   "NCHW (info)",
            value=best["ours"] / 1e3, unit="ms", limit=best["nchw"] / 1e3,
            ratio=best["ours"] / best["nchw"],
        ))
    return rows


def _onednn_rows() -> list[dict]:
    """``OneDNNLinear`` / ``nn.Linear``: TD3's critic trained one batch, one layer's forward."""
    rows = []
    for what, n_in, depth, n_out, grad in (("MLP 23-256-256-1 fwd+bwd", 23, 2, 1, True),
                                           ("Linear 256x256 fwd no_grad", 256, 0, 256, False)):
        nets = {}
        for name, layer in (("onednn", OneDNNLinear), ("mkl", nn.Linear)):
            torch.manual_seed(0)
            nets[name] = (MLP(n_in, n_out, num_cells=256, depth=depth, activation_class=nn.ReLU,
                              layer_class=layer) if depth else layer(n_in, n_out))
        rows_in = _pool(256, n_in)

        best = _interleaved({k: (lambda x, n=n, g=grad: _call(n, x, g)) for k, n in nets.items()},
                            {k: rows_in for k in nets}, 200 if grad else 500)
        rows.append(dict(
            figure=f"OneDNNLinear {what} [256, {n_in}], 1 thread: oneDNN / nn.Linear (info)",
            value=best["onednn"], unit="us", limit=best["mkl"],
            ratio=best["onednn"] / best["mkl"],
        ))
    return rows


def run() -> list[dict]:
    """Every figure on one thread; returns the rows."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    try:
        rows = []
        for batch in BATCHES:
            rows.append(_rows_for("ProbabilisticActor(TanhNormal)", _tanh_case, batch))
            rows.append(_rows_for("QValueActor + EGreedyModule", _qvalue_case, batch))
        rows += _onednn_rows()
        torch.set_num_threads(2)
        rows += _cnn_rows()
        return rows
    finally:
        torch.set_num_threads(threads)


if __name__ == "__main__":
    for row in run():
        print(f"{row['figure']:<78} {row['value']:9.1f} {row['unit']:<3} "
              f"limit {row['limit']:9.1f}  ratio {row['ratio']:.3f}")
