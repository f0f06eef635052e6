"""``benchmarks/results_examples.py`` on a tiny fake example directory: ``--jobs`` runs
overlap, each child gets one thread, the parent alone writes the page after each run, the
highest load seen during a run is recorded and marks the run *loaded*, a failed run does not
stop the others; and the new examples' fingerprints follow the loop they import."""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# a stand-in example: argparse like the real ones, TensorBoard scalars written without torch
# (fast to start), its start and end time and its thread setting in the JSON last line
FAKE = """
import argparse, json, os, sys, time
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int)
parser.add_argument("--logdir")
args = parser.parse_args()
start = time.time()
if args.seed == int(os.environ.get("FAKE_FAIL_SEED", "-1")):
    sys.exit("fake failure")
writer = EventFileWriter(args.logdir)
for step, value in ((10, 1.0), (20, 5.0 + args.seed)):
    tag = Summary.Value(tag="charts/episodic_return", simple_value=value)
    writer.add_event(Event(step=step, wall_time=start, summary=Summary(value=[tag])))
writer.close()
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
print("a progress line")
print(json.dumps({"frames": 20, "seconds": 0.1, "mean_return": 5.0 + args.seed, "fps": 200.0,
                  "t0": start, "t1": time.time(), "omp": os.environ.get("OMP_NUM_THREADS")}))
"""


@pytest.fixture
def script(bench_script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The script as a module, its examples a fake ``fake.py`` in ``tmp_path/examples``."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))  # its sibling imports (run, peers)
    module = bench_script("results_examples")
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "fake.py").write_text(FAKE)
    monkeypatch.setattr(module, "EXAMPLES", {"fake": {
        "task": "Fake-v0", "threshold": 6.0, "budget": 20, "published": "none"}})
    monkeypatch.setattr(module, "LOAD_POLL", 0.1)
    return module


def _main(module, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *args: str) -> list[dict]:
    page = tmp_path / "results.md"
    monkeypatch.setattr(sys, "argv", ["results_examples.py", "fake", "--page", str(page),
                                      "--examples-dir", str(tmp_path / "examples"), *args])
    module.main()
    return module.load_records(page)


@pytest.mark.timeout(120)
def test_jobs_run_at_once_one_thread_each_and_record_their_load(
    script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_SLEEP", "1.5")
    writes = []
    render = script.render
    monkeypatch.setattr(script, "render", lambda *a: writes.append(len(a[0])) or render(*a))
    records = _main(script, tmp_path, monkeypatch, "--seeds", "3", "--jobs", "2")
    assert sorted(r["seed"] for r in records) == [0, 1, 2]
    # the page written by the parent once per finished run, then once at the end
    assert writes == [1, 2, 3, 3]
    spans = sorted((r["t0"], r["t1"]) for r in records)
    assert spans[1][0] < spans[0][1], f"two jobs should have run at once: {spans}"
    for r in records:
        assert r["omp"] == "1"
        assert r["load_avg_1min_max"] >= r["load_avg_1min_before"] >= 0
        assert r["frames_to_threshold"] == (None if r["seed"] == 0 else 20)
        assert r["code"] == script.code_fingerprint("fake")
    assert not list(Path(tempfile.gettempdir()).glob("rl-results-fake-*"))


@pytest.mark.timeout(120)
def test_a_failed_run_leaves_the_others_recorded(script, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FAKE_FAIL_SEED", "1")
    with pytest.raises(SystemExit, match="(?s)fake seed 1 failed.*fake failure"):
        _main(script, tmp_path, monkeypatch, "--seeds", "3", "--jobs", "3")
    records = script.load_records(tmp_path / "results.md")
    assert sorted(r["seed"] for r in records) == [0, 2]


def test_jobs_must_be_positive(script, tmp_path, monkeypatch, capsys) -> None:
    with pytest.raises(SystemExit):
        _main(script, tmp_path, monkeypatch, "--jobs", "0")
    assert "--jobs: expected a positive number of runs at once, got 0" in capsys.readouterr().err


def test_the_page_marks_loaded_runs(script, tmp_path: Path) -> None:
    base = {"example": "fake", "code": "c", "started": "2026-11-27 00:00 UTC", "frames": 20,
            "mean_return": 5.0, "frames_to_threshold": None, "seconds": 1.0, "fps": 20.0}
    quiet = {**base, "seed": 0, "load_avg_1min_before": 0.2, "load_avg_1min_max": 1.1}
    busy = {**base, "seed": 1, "load_avg_1min_before": 0.4, "load_avg_1min_max": 3.4}
    old = {**base, "seed": 2, "load_avg_1min_before": 0.3}  # recorded before the max was kept
    assert script.load_cell(quiet) == "0.2 / 1.1"
    assert script.load_cell(busy) == "0.4 / 3.4 loaded"
    assert script.load_cell(old) == "0.3 / –"
    page = script.render([quiet, busy, old], ["fake"], tmp_path / "results.md")
    assert "| 0.4 / 3.4 loaded |" in page
    assert "recorded for 2 of the 3 runs): 1.1 to 3.4; 1 run(s) *loaded*" in page


def test_the_new_examples_are_fingerprinted_with_the_loop_they_run(bench_script) -> None:
    module = bench_script("results_examples")
    for name in ("td3_mujoco", "crossq_mujoco"):
        tree = module._code_dump(module.EXAMPLES_DIR / f"{name}.py")[1]
        assert module.sibling_imports(tree) == ["sac_pendulum"]
        assert name in module.EXAMPLES and name in module.LONG_EXAMPLES
    assert module.EXAMPLES["td3_mujoco"]["threshold"] == 3000.0
    assert module.EXAMPLES["td3_mujoco"]["budget"] == 100_000


def test_crossq_budget_is_one_figure_and_the_page_says_why(bench_script, tmp_path) -> None:
    """The budget in the results entry, the example's default and the peer race agree, and
    the page's note quotes the step cost from the bench's file and SAC's curves."""
    import ast

    module = bench_script("results_examples")
    spec = module.EXAMPLES["crossq_mujoco"]
    tree = ast.parse((ROOT / "examples" / "crossq_mujoco.py").read_text())
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config")
    default = next(ast.literal_eval(n.value) for n in config.body
                   if isinstance(n, ast.AnnAssign) and n.target.id == "total_frames")
    assert spec["budget"] == default
    peers = (ROOT / "benchmarks" / "compare_peers.py").read_text()
    assert f'"HalfCheetah-v5", {default:_}, None, "crossq_mujoco"' in peers
    sac = {"example": "sac_mujoco", "seed": 1, "code": "old",
           "series": {module.RETURN_TAG: [[10_000, -300.0], [29_000, 42.5], [31_000, 90.0]]}}
    notes = "\n".join(module.budget_notes([sac]))
    assert f"`crossq_mujoco.py`, {default:,} frames: about an hour a seed" in notes
    assert "seed 1 42.5 (code old)" in notes and "{" not in notes
    assert "sb3-contrib's `CrossQ` with the same settings and budget" in notes


def test_crossq_is_compared_with_sac_seed_by_seed_at_its_budget(bench_script) -> None:
    """Each seed's final CrossQ return against SAC's curve at CrossQ's budget, and the
    count of seeds where CrossQ is higher (a seed missing on one side is left out)."""
    render = bench_script("results_render")
    examples = render.ROOT / "examples"

    def run(example, seed, final, curve):
        return {"example": example, "seed": seed, "code": "old", "mean_return": final,
                "series": {render.RETURN_TAG: curve}}

    runs = [run("crossq_mujoco", 0, 3000.0, []), run("crossq_mujoco", 1, 50.0, []),
            run("crossq_mujoco", 2, 10.0, []),
            run("sac_mujoco", 0, 4000.0, [[10_000, -200.0], [30_000, 120.0], [40_000, 900.0]]),
            run("sac_mujoco", 1, 4000.0, [[29_000, 60.0], [31_000, 700.0]])]
    text = render.versus("crossq_mujoco", "sac_mujoco", 30_000, runs, examples)
    assert text == ("seed 0 3000.0 against 120.0, seed 1 50.0 against 60.0: "
                    "higher on 1 of 2 seeds")
    assert "no seed recorded" in render.versus("crossq_mujoco", "sac_mujoco", 30_000,
                                               runs[:3], examples)


def test_the_peers_return_at_the_budget_is_read_from_its_results_file(bench_script,
                                                                       tmp_path) -> None:
    """The CrossQ budget note quotes the peer's run at that budget from the file
    ``compare_peers.py --sides sb3 --out`` writes; other budgets and our side are not it."""
    render = bench_script("results_render")
    path = tmp_path / "peer.json"
    assert "not run yet" in render.peer_at(path, "crossq-halfcheetah", 30_000)

    def run(side, seed, frames, ret):
        return {"side": side, "seed": seed, "frames": frames, "mean_return": ret,
                "started": "2026-11-27 16:00 UTC", "load_avg_1min_before": 2.3}

    record = {"runs": [run("sb3", 1, 30_000, 2500.25), run("sb3", 0, 30_000, 4000.0),
                       run("sb3", 2, 10_000, 99.0), run("ours", 0, 30_000, 1.0)],
              "meta": {"peer_versions": {"stable-baselines3": "2.9.2", "sb3-contrib": "2.9.1"}}}
    path.write_text(json.dumps({"tasks": {"crossq-halfcheetah": record}}))
    text = render.peer_at(path, "crossq-halfcheetah", 30_000)
    assert text.startswith("seed 0 4000.0 (sb3-contrib 2.9.1, 2026-11-27 16:00 UTC, 1-minute")
    assert "seed 1 2500.2" in text and "99.0" not in text and " 1.0 " not in text
    assert "no run at 50,000 frames" in render.peer_at(path, "crossq-halfcheetah", 50_000)
