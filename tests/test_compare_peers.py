"""``benchmarks/compare_peers.py --merge-alongside``: a race whose two sides ran at the same
time (``--sides ours --out A`` and ``--sides sb3 --out B``) is published as one record, its
runs marked, and the peers section says the sides shared the machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TASK = "crossq-halfcheetah"


def _side(module, side: str, budget: int, seeds: list[int], fps: float) -> dict:
    runs = [{"side": side, "seed": s, "started": "2026-11-28 03:27 UTC",
             "load_avg_1min_before": 0.3, "process_seconds": 100.0, "frames": budget,
             "seconds": 99.0, "fps": fps, "mean_return": 1000.0 + s, "episodes_in_mean": 20,
             "frames_to_target": None, "seconds_to_target": None, "code": "abc",
             **({"settings": {"learning_rate": 0.001}} if side == "sb3" else {})}
            for s in seeds]
    meta = {"time": "2026-11-28T03:27:07", "command": f"python compare_peers.py --sides {side}",
            "machine": {"cpu": "AMD EPYC", "cpus": 2}, "versions": {"torch": "2.15.0"},
            "git_commit": "b0f60df", "peer_versions": {"stable-baselines3": "2.9.2"}}
    return {"meta": meta, "tasks": {TASK: {"budget": budget, "runs": runs, "meta": meta}}}


@pytest.fixture
def peers(bench_script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    module = bench_script("compare_peers")
    pages: list[dict] = []
    monkeypatch.setattr(module, "RESULTS", tmp_path / "peers.json")
    monkeypatch.setattr(module, "update_page", pages.append)
    return module, tmp_path, pages


def test_the_two_sides_become_one_race_marked_alongside(peers) -> None:
    module, tmp, pages = peers
    budget = module.TASKS[TASK].frames
    a, b = tmp / "ours.json", tmp / "sb3.json"
    a.write_text(json.dumps(_side(module, "ours", budget, [0], 7.8)))
    b.write_text(json.dumps(_side(module, "sb3", budget, [0], 6.5)))
    assert module.merge_alongside(a, b) == 0
    record = json.loads((tmp / "peers.json").read_text())["tasks"][TASK]
    assert {r["side"] for r in record["runs"]} == {"ours", "sb3"}
    assert all(r["alongside"] for r in record["runs"])
    assert record["summary"]["ratios_ours_over_sb3"]["fps"] == round(7.8 / 6.5, 3)
    assert " & " in record["meta"]["command"] and pages  # the page re-rendered
    import peers_docs

    stamp = peers_docs._stamp(TASK, record)
    assert "The two sides ran at the same time, one process on each of the 2 CPUs" in stamp


def test_sides_of_other_budgets_or_seeds_are_refused(peers) -> None:
    module, tmp, _ = peers
    budget = module.TASKS[TASK].frames
    a, b = tmp / "ours.json", tmp / "sb3.json"
    a.write_text(json.dumps(_side(module, "ours", budget, [0, 1], 7.8)))
    b.write_text(json.dumps(_side(module, "sb3", budget, [0], 6.5)))
    with pytest.raises(SystemExit, match="the same seeds, got budgets"):
        module.merge_alongside(a, b)
    b.write_text(json.dumps(_side(module, "sb3", budget // 2, [0, 1], 6.5)))
    with pytest.raises(SystemExit, match=f"full budget \\({budget:,}\\)"):
        module.merge_alongside(a, b)
    assert not (tmp / "peers.json").exists()  # nothing published
