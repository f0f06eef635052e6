"""``benchmarks/bench_cql_floor.py``: CQL's step against the GEMMs it cannot avoid."""

from __future__ import annotations

import json

import pytest
import torch


def test_the_floor_counts_every_critic_row_of_the_conservative_term(bench_script) -> None:
    bench = bench_script("bench_cql_floor")
    batch, k, h = 256, 10, 256
    gemms = bench.cql_gemms(batch, k, h)
    macs = sum(m * kk * n for m, kk, n in gemms)
    critic = (17 + 6) * h + h * h + h  # one row through one critic
    actor = 17 * h + h * h + h * 12
    rows = batch * (1 + 3 * k + 1 + 1)  # target, trained (data + 3K sampled), actor's action
    expected = (
        2 * rows * critic  # two critics forward
        + 2 * batch * (3 * k + 1) * (critic + (h * h + h))  # weight + input grads (not layer 1)
        + 2 * batch * critic  # input grads through the frozen critics to the action
        + 2 * batch * actor  # the actor forward on s and s'
        + batch * actor + batch * (h * h + h * 12)  # the actor's weight and input grads
    )
    assert macs == expected
    assert 6e9 < 2 * macs < 8e9  # ~7 GFLOP a step: why CQL costs ~10x IQL here


@pytest.mark.timeout(120)
def test_the_bench_times_the_examples_step_and_prints_its_figures(bench_script, capsys) -> None:
    bench = bench_script("bench_cql_floor")
    threads = torch.get_num_threads()
    try:
        row = bench.main(["--rounds", "1", "--calls", "1", "--batch", "16"])
    finally:
        torch.set_num_threads(threads)  # the bench sets its own
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed == row and row["num_random"] == 10 and row["batch"] == 16
    assert row["step_us"] > 0 and row["floor_gemms_us"] > 0
    assert row["step/floor"] == pytest.approx(row["step_us"] / row["floor_gemms_us"], abs=0.01)
    assert row["hours_for_100k_steps"] == pytest.approx(row["step_us"] / 36e3, abs=0.01)
