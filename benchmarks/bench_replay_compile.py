"""Does ``compilable=True`` + ``torch.compile`` speed up the replay buffer? (CPU, one thread)

Prioritized sample + priority update of 256 rows, and a uniform sample of 256 rows, from a
100k-row buffer of ``observation[4]``, ``action``, ``reward``, ``done`` rows, timed:

* ``default``: the buffer as built without ``compilable`` (numba tree on the CPU, lock,
  host-side checks), the reference of ``benchmarks/bench_replay.py``;
* ``default, torch tree``: the same with ``RL_REPLAY_TREE=torch``;
* ``compilable, eager``: ``compilable=True`` called without compiling (torch tree);
* ``compilable, inductor``: the same step under ``torch.compile(fullgraph=True)``.

Every ratio is to ``compilable, eager`` measured in the same run (lower is faster). The
inductor compile time (seconds, first call, with C++ toolchain set-up on a cold cache) is
reported too. Part of ``benchmarks/run.py``: the first compile on a machine takes about a minute
here. Times are the best over short blocks of calls, the variants measured in turn over
``ROUNDS`` rounds (a loaded machine is noisy: compare the ratios).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import torch
from rl_replay import LazyTensorStorage, TensorDictPrioritizedReplayBuffer, TensorDictReplayBuffer
from tensordict import TensorDict

CAPACITY, BATCH, ROUNDS = 100_000, 256, 5


def _best_us(fn: Callable[[], object], calls: int = 2000, block: int = 10) -> float:
    """Best mean time per call (us) over blocks of ``block`` calls, after a warm-up."""
    for _ in range(20):
        fn()
    best = float("inf")
    for _ in range(calls // block):
        start = time.perf_counter()
        for _ in range(block):
            fn()
        best = min(best, (time.perf_counter() - start) / block)
    return best * 1e6


def _rows(n: int) -> TensorDict:
    return TensorDict(
        {
            "observation": torch.randn(n, 4),
            "action": torch.randn(n),
            "reward": torch.randn(n),
            "done": torch.zeros(n, dtype=torch.bool),
        },
        [n],
    )


def _buffer(prioritized: bool, compilable: bool, tree: str | None = None) -> TensorDictReplayBuffer:
    old = os.environ.pop("RL_REPLAY_TREE", None)
    if tree is not None:
        os.environ["RL_REPLAY_TREE"] = tree
    try:
        storage = LazyTensorStorage(CAPACITY)
        if prioritized:
            rb = TensorDictPrioritizedReplayBuffer(
                alpha=0.7, beta=0.5, storage=storage, batch_size=BATCH, compilable=compilable
            )
        else:
            rb = TensorDictReplayBuffer(storage=storage, batch_size=BATCH, compilable=compilable)
        rb.extend(_rows(CAPACITY))
        if prioritized:
            rb.sample()  # the tree is built now, whatever the kind
    finally:
        os.environ.pop("RL_REPLAY_TREE", None)
        if old is not None:
            os.environ["RL_REPLAY_TREE"] = old
    return rb


def _prioritized_step(rb: TensorDictPrioritizedReplayBuffer) -> Callable[[], TensorDict]:
    def step() -> TensorDict:
        td = rb.sample()
        rb.update_priority(td["index"], td["reward"].abs())
        return td

    return step


def _uniform_step(rb: TensorDictReplayBuffer) -> Callable[[], TensorDict]:
    return rb.sample


def _case(name: str, make_step: Callable, prioritized: bool) -> list[dict]:
    timed = {
        "default": make_step(_buffer(prioritized, False)),
        "compilable, eager": make_step(_buffer(prioritized, True)),
    }
    if prioritized:
        timed["default, torch tree"] = make_step(_buffer(prioritized, False, "torch"))
    compiled = torch.compile(make_step(_buffer(prioritized, True)), fullgraph=True)
    start = time.perf_counter()
    compiled()
    compile_s = time.perf_counter() - start
    timed["compilable, inductor"] = compiled
    us = dict.fromkeys(timed, float("inf"))
    for _ in range(ROUNDS):  # alternate the variants, so that load hits them alike
        for label, fn in timed.items():
            us[label] = min(us[label], _best_us(fn, calls=400))
    ref = us["compilable, eager"]
    rows = [
        {
            "figure": f"{name}: {label} (ratio to compilable eager, lower is faster)",
            "value": value,
            "unit": "us",
            "limit": ref,
            "ratio": value / ref,
        }
        for label, value in us.items()
    ]
    rows.append(
        {
            "figure": f"{name}: inductor compile time, first call (target: none)",
            "value": compile_s,
            "unit": "s",
            "limit": compile_s,
            "ratio": 1.0,
        }
    )
    return rows


def run() -> list[dict]:
    """Eager vs inductor-compiled replay steps; see the module docstring."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    return [
        *_case(f"prioritized sample+update {BATCH} @100k", _prioritized_step, True),
        *_case(f"uniform sample {BATCH} @100k", _uniform_step, False),
    ]


if __name__ == "__main__":
    results = run()
    width = max(len(r["figure"]) for r in results)
    print(f"{'figure':<{width}}  {'value':>10}  {'limit':>10}  {'ratio':>6}")
    for r in results:
        print(
            f"{r['figure']:<{width}}  {r['value']:>8.1f}{r['unit']:>2}  "
            f"{r['limit']:>8.1f}{r['unit']:>2}  {r['ratio']:>6.2f}"
        )
