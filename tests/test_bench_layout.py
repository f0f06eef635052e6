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
    # a view is memory an earlier hop holds, a copy is new memory
    for i, (where, kind, ptr) in enumerate(hops[1:], start=1):
        assert any(ptr == h[2] for h in hops[:i]) == (kind == "view"), where
    assert result["copies"] == kinds.count("copy")
    # issue 42's target: the env writes into the batch's slots (its two stores), the
    # replay buffer copies twice (extend, sample); the env's own buffers are not on the path
    assert result["copies"] <= 4
    places = [where for where, _, _ in hops]
    assert "GymEnv next buffer" not in places and "GymEnv root buffer" not in places
    assert "the Collector's batch, ('next', 'observation')" in places
