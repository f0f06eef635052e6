"""``benchmarks/bench_gpu.py``'s offline rows on the CPU (its dry run): the ``--rows`` and
``--sections`` it takes, each row's entries, and the offline rows' plain-torch references
(the GPU run itself is ``tools/gpu/run_check.py``'s, on a lent machine)."""

from __future__ import annotations

import json

import pytest


def test_offline_rows_dry_run_writes_each_rows_entries(bench_script, tmp_path) -> None:
    bench = bench_script("bench_gpu")
    out = tmp_path / "gpu.json"
    bench.main(["--dry-run", "--sections", "updates", "--rows", "iql,td3bc,cql",
                "--out", str(out)])
    doc = json.loads(out.read_text())
    assert set(doc["sections"]) == {"updates"} and doc["errors"] == []
    entries = {(e["row"], e["mode"]): e for e in doc["sections"]["updates"]}
    assert set(entries) == {("iql", "eager"), ("td3bc", "eager"), ("cql", "eager"),
                            ("iql", "compile")}
    for (row, _), e in entries.items():
        assert e["ours_fps"] > 0
        if row == "cql":  # no plain-torch CQL is written: the entry says so, no ratio
            assert e["plain_fps"] is None and e["ours_over_plain"] is None
            assert "plain_spread" not in e and set(e["warmup_seconds"]) == {"ours"}
        else:
            assert e["plain_fps"] > 0
            # the ratio of the medians lies between the spreads' extremes (each figure is
            # rounded to 0.1: a loaded machine can run these at about one step a second)
            (o_lo, o_hi), (p_lo, p_hi) = e["ours_spread"], e["plain_spread"]
            assert (o_lo - 0.05) / (p_hi + 0.05) - 1e-3 <= e["ours_over_plain"]
            assert e["ours_over_plain"] <= (o_hi + 0.05) / max(p_lo - 0.05, 1e-9) + 1e-3
    skipped = {s["what"]: s["why"] for s in doc["skipped"]}
    assert skipped["updates iql cudagraphs"] == "CUDA graphs need a CUDA device"
    assert skipped["updates td3bc compile"] == "dry run: compiles ['iql'] only"


def test_unknown_rows_and_sections_are_named(bench_script, tmp_path, capsys) -> None:
    bench = bench_script("bench_gpu")
    for flag, bad in (("--rows", "iql,dqn"), ("--sections", "lstm,videos")):
        with pytest.raises(SystemExit):
            bench.main(["--dry-run", flag, bad, "--out", str(tmp_path / "g.json")])
        err = capsys.readouterr().err
        assert flag in err and repr(bad.split(",")[1]) in err and "expected some of" in err


def test_offline_rows_plain_updates_train_the_same_networks(bench_script) -> None:
    import torch

    rows = bench_script("update_rows")
    for name in ("iql", "td3bc"):
        row = rows.make_row(name, "cpu", "eager", {})
        batch = row.batch()
        assert batch["observation"].shape == (256, 17) and batch["action"].shape == (256, 6)
        ours, plain = row.ours(batch.copy()), row.plain(batch.copy())
        assert all(torch.isfinite(v).all() for v in plain)
        assert torch.isfinite(ours["loss_actor"]) and torch.isfinite(ours["loss_qvalue"])
