"""``benchmarks/bench_layout.py``'s copy count (issue 42): it traces one PPO CartPole
observation from the simulator's array to the minibatch the loss reads, through the real
env, collector, estimator and replay buffer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    path = ROOT / "benchmarks" / "bench_layout.py"
    spec = importlib.util.spec_from_file_location("bench_layout_under_test", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_copy_count_traces_the_observation_end_to_end() -> None:
    result = _bench().count_copies(num_envs=4, steps=8, minibatch=8)
    hops = result["hops"]
    assert hops[0][:2] == ("simulator's array (the vector env's step return)", "start")
    assert hops[-1][0] == "the minibatch ClipPPOLoss reads (buffer.sample)"
    kinds = [kind for _, kind, _ in hops[1:]]
    assert set(kinds) <= {"copy", "view"}
    # a view is the same memory as the hop before it, a copy is new memory
    for (_, _, before), (where, kind, ptr) in zip(hops, hops[1:], strict=False):
        assert (ptr == before) == (kind == "view"), where
    assert result["copies"] == kinds.count("copy") + len(result["duplicates"])
    # the replay buffer's two copies (extend, sample) are always there; the rest is ours
    assert 2 <= result["copies"] <= 7
