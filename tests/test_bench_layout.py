"""``benchmarks/bench_layout.py``'s copy count (issue 42): it traces one PPO CartPole
observation from the simulator's array to the minibatch the loss reads, through the real
env, collector, estimator and replay buffer."""

from __future__ import annotations


def test_copy_count_traces_the_observation_end_to_end(bench_script) -> None:
    result = bench_script("bench_layout").count_copies(num_envs=4, steps=8, minibatch=8)
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
