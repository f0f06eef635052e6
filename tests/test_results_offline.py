"""``benchmarks/results_offline.py`` on a fake ``iql_offline.py``: each (loss, seed) runs once
with its loss's budget, the records are kept and re-read, a record of other code is dropped,
and the results page's offline rows say each loss's final return against the behaviour
return and its target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# a stand-in for examples/iql_offline.py: its options, TensorBoard scalars written without
# torch (fast to start) and its JSON last line; the final return depends on loss and seed
FAKE = """
import argparse, json, time
from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.summary.writer.event_file_writer import EventFileWriter

parser = argparse.ArgumentParser()
for flag in ("--seed", "--total-frames", "--eval-every"):
    parser.add_argument(flag, type=int)
parser.add_argument("--logdir")
parser.add_argument("--loss")
args = parser.parse_args()
final = {"iql": 120.0, "td3bc": 100.0, "cql": 99.0, "bc": 90.0}[args.loss] + args.seed
writer = EventFileWriter(args.logdir)
tag = Summary.Value(tag="charts/episodic_return", simple_value=final)
writer.add_event(Event(step=args.total_frames, wall_time=time.time(), summary=Summary(value=[tag])))
writer.close()
print(json.dumps({"frames": args.total_frames, "seconds": 1.0, "mean_return": final,
                  "fps": 10.0, "loss": args.loss, "dataset_id": "fake/medium-v0",
                  "dataset_transitions": 1000, "behaviour_return": 100.0,
                  "eval_every": args.eval_every}))
"""


@pytest.fixture
def offline(bench_script, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    module = bench_script("results_offline")
    examples = tmp_path / "examples"
    examples.mkdir()
    (examples / "iql_offline.py").write_text(FAKE)
    return module, examples, tmp_path / "offline_runs.json"


def _main(module, examples: Path, out: Path, *args: str) -> int:
    return module.main([*args, "--out", str(out), "--examples-dir", str(examples), "--no-page"])


def test_each_loss_and_seed_runs_once_with_its_budget(offline) -> None:
    module, examples, out = offline
    assert _main(module, examples, out, "iql", "cql", "--seeds", "2", "--jobs", "2") == 0
    records = json.loads(out.read_text())
    assert sorted((r["loss"], r["seed"]) for r in records) == [
        ("cql", 0), ("cql", 1), ("iql", 0), ("iql", 1)]
    for r in records:
        budget = module.BUDGETS[r["loss"]]
        assert r["frames"] == budget and r["eval_every"] == budget // module.EVALS
        assert r["args"] == module.run_args(r["loss"], []) and r["example"] == "iql_offline"
        assert r["series"]["charts/episodic_return"][-1] == [budget, r["mean_return"]]
    started = {(r["loss"], r["seed"]): r["started"] for r in records}
    # kept pairs do not run again; a new loss adds its seeds beside them
    assert _main(module, examples, out, "iql", "bc", "--seeds", "2") == 0
    again = json.loads(out.read_text())
    assert len(again) == 6
    assert all(started[(r["loss"], r["seed"])] == r["started"] for r in again if r["loss"] != "bc")


def test_the_page_rows_compare_each_loss_with_the_behaviour_return(offline) -> None:
    module, examples, out = offline
    assert _main(module, examples, out, "--seeds", "2", "--jobs", "2") == 0
    text = "\n".join(module.offline_section(out))
    rows = {line.split(" | ")[0].lstrip("| "): line for line in text.splitlines()
            if line.startswith("| ") and "Loss" not in line}
    assert set(rows) == {"IQL", "TD3+BC", "CQL", "BC (behaviour cloning)"}
    assert "| 30,000 | 99.5 [99.0, 100.0] | 100.0 |" in rows["CQL"]  # one value once
    # IQL 120 / 121 against 100: 1.21x, both seeds at >= 1.1x; TD3+BC 100 / 101: 0 of 2
    assert "| 1.21 | ≥ 1.1x (110.0) | 2/2 |" in rows["IQL"]
    assert "| 1.00 | ≥ 1.1x (110.0) | 0/2 |" in rows["TD3+BC"]
    assert "| 0.99 | ≥ 1x (100.0) | 1/2 |" in rows["CQL"]  # 99 and 100
    assert "– (reference)" in rows["BC (behaviour cloning)"]
    assert "`fake/medium-v0` (1,000 transitions)" in text


def test_the_section_says_what_sets_cqls_budget(offline, tmp_path: Path) -> None:
    module, examples, out = offline
    assert _main(module, examples, out, "cql", "--seeds", "1") == 0
    step = tmp_path / "cql_step.json"
    assert not any(x.startswith("CQL's budget,") for x in module.offline_section(out, step))
    step.write_text(json.dumps({
        "step_us": 105400, "floor_gemms_us": 104900, "step/floor": 1.0, "steps_an_hour": 34155,
        "hours_for_100k_steps": 2.93, "load_start": 0.4, "load_end": 0.6,
        "time": "2026-11-28 14:20 UTC"}))
    line = next(x for x in module.offline_section(out, step) if x.startswith("CQL's budget"))
    assert line.startswith("CQL's budget, 30,000 steps: one gradient step took 105 ms of CPU "
                           "time here against 105 ms for the matrix products")
    assert "(1x; `benchmarks/bench_cql_floor.py`, 2026-11-28 14:20 UTC, 1-minute load 0.4 to " \
           "0.6)" in line
    assert "about 34,155 steps an hour, and the issue's 100k would take 2.93 hours" in line


def test_a_record_of_other_code_is_dropped(offline, capsys) -> None:
    module, examples, out = offline
    assert _main(module, examples, out, "bc", "--seeds", "1") == 0
    (examples / "iql_offline.py").write_text(FAKE.replace("+ args.seed", "+ 2 * args.seed"))
    assert _main(module, examples, out, "bc", "--seeds", "1", "--render-only") == 0
    assert json.loads(out.read_text()) == []
    assert "dropping the offline record of bc seed 0" in capsys.readouterr().err


def test_an_unknown_loss_is_named(offline, capsys) -> None:
    module, examples, out = offline
    with pytest.raises(SystemExit):
        _main(module, examples, out, "awac")
    assert "expected some of ['iql', 'td3bc', 'cql', 'bc'], got ['awac']" in capsys.readouterr().err


def test_two_calls_sharing_the_file_keep_each_others_runs(offline) -> None:
    """Two calls for different losses at once (one per core): each run is merged into the
    file as it is then, so neither call's writes drop the other's records."""
    import threading

    module, examples, out = offline
    # bc's runs finish between iql's: each call writes while the other holds records
    (examples / "iql_offline.py").write_text(
        FAKE.replace("writer.close()", "writer.close(); time.sleep(0.3 if args.loss == 'iql' "
                     "else 0.1 + 0.3 * args.seed)"))
    codes: list[int] = []
    calls = [threading.Thread(target=lambda loss=loss: codes.append(
        _main(module, examples, out, loss, "--seeds", "2"))) for loss in ("iql", "bc")]
    for call in calls:
        call.start()
    for call in calls:
        call.join(timeout=120)
    assert codes == [0, 0]
    assert sorted((r["loss"], r["seed"]) for r in json.loads(out.read_text())) == [
        ("bc", 0), ("bc", 1), ("iql", 0), ("iql", 1)]


def test_the_final_return_is_also_a_d4rl_normalised_score(bench_script, monkeypatch) -> None:
    """HalfCheetah's D4RL references (random -280.18, expert 12,135): 100 at the expert's
    return, 0 at the random one's; no score for an env without references."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    module = bench_script("results_offline")
    assert module.normalised("rl/halfcheetah/medium-v0", 12135.0) == pytest.approx(100.0)
    assert module.normalised("rl/halfcheetah/medium-v0", -280.178953) == pytest.approx(0.0)
    assert module.normalised("rl/halfcheetah/medium-v0", 5565.0) == pytest.approx(47.08, abs=0.01)
    assert module.normalised("fake/medium-v0", 100.0) is None
    record = {"loss": "iql", "seed": 0, "frames": 100_000, "mean_return": 5565.0,
              "behaviour_return": 5280.5, "seconds": 1.0, "fps": 1.0,
              "dataset_id": "rl/halfcheetah/medium-v0"}
    row = module.offline_rows([record])[-1]
    assert row.endswith("| 47.1 | 47.4 |")
