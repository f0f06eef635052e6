"""RSSMRollout over [16, 64]: loop eager, scan eager, scan compiled, compile_step.

Each mode runs one training step (forward of the whole rollout + backward). The first
call's extra time over the steady state is reported as the compile time; the steady
state is the median of the following calls. The limit is the plain loop in eager mode,
measured in the same run; ratio = mode time / loop eager time (lower is better).

    uv run --no-sync python benchmarks/bench_rssm.py
"""

from __future__ import annotations

import statistics
import time

import torch
from rl_recurrent import RSSMPosterior, RSSMPrior, RSSMRollout
from tensordict import TensorDict

B, T = 16, 64
ACTION, HIDDEN, BELIEF, STATE, EMBED = 6, 200, 200, 30, 256
REPEATS = 3
# aot_eager only captures graphs (no code generation): it shows the cost of tracing.
# "scan compiled (inductor)" is the default backend, which generates C++ for the step;
# its first call (tens of seconds on a 2-core CPU) is reported as the compile time.
# compile_step in loop mode is measured with aot_eager only: inductor's compilation of the
# step twice (see docs/rssm.md) would exceed this file's time budget.
COMPILE = {"compile_options": {"backend": "aot_eager"}}
MODES = {
    "loop eager": {},
    "scan eager": {"use_scan": True},
    "scan compiled (aot_eager)": {"use_scan": True, "compile_step": True, **COMPILE},
    "scan compiled (inductor)": {"use_scan": True, "compile_step": True},
    "compile_step (aot_eager)": {"compile_step": True, **COMPILE},
}


def _batch() -> TensorDict:
    g = torch.Generator().manual_seed(0)
    is_init = torch.zeros(B, T, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[::4, T // 2] = True
    return TensorDict(
        {
            "action": torch.randn(B, T, ACTION, generator=g),
            ("next", "encoded_latents"): torch.randn(B, T, EMBED, generator=g),
            "is_init": is_init,
        },
        [B, T],
    )


def _train_step(rollout: RSSMRollout, td: TensorDict) -> float:
    start = time.perf_counter()
    out = rollout(td.clone(), generator=torch.Generator().manual_seed(1))
    loss = out["next", "state"].square().mean() + out["next", "prior_std"].log().mean()
    loss.backward()
    return time.perf_counter() - start


def _measure(rollout: RSSMRollout, td: TensorDict) -> tuple[float, float]:
    """(first call, median steady-state call) in seconds."""
    first = _train_step(rollout, td)
    _train_step(rollout, td)  # warm-up (the compiled backward may settle here)
    steady = statistics.median(_train_step(rollout, td) for _ in range(REPEATS))
    return first, steady


def run() -> list[dict]:
    torch.manual_seed(0)
    prior = RSSMPrior(action_dim=ACTION, hidden_dim=HIDDEN, rnn_hidden_dim=BELIEF, state_dim=STATE)
    post = RSSMPosterior(HIDDEN, STATE, rnn_hidden_dim=BELIEF, obs_embedding_dim=EMBED)
    td = _batch()
    torch._dynamo.reset()
    results = {name: _measure(RSSMRollout(prior, post, **kw), td) for name, kw in MODES.items()}
    limit = results["loop eager"][1]
    rows = []
    for name, (first, steady) in results.items():
        ms = steady * 1e3
        rows.append(
            {
                "figure": f"rssm [{B},{T}] fwd+bwd {name}, steady "
                          "(ms; ratio = /loop eager, lower is better)",
                "value": ms,
                "unit": "ms",
                "limit": limit * 1e3,
                "ratio": steady / limit,
            }
        )
        rows.append(
            {
                "figure": f"rssm [{B},{T}] {name}, first-call overhead incl. compile "
                          "(s; ratio = /loop eager step)",
                "value": max(first - steady, 0.0),
                "unit": "s",
                "limit": limit,
                "ratio": max(first - steady, 0.0) / limit,
            }
        )
    return rows


if __name__ == "__main__":
    for row in run():
        print(
            f"{row['figure']:<95} {row['value']:>10.3f} {row['unit']:<3} ratio {row['ratio']:.3g}"
        )
