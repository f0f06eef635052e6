"""Offline RL's results (issue 43): each loss of ``examples/iql_offline.py`` trained on the
recorded "medium" dataset, seeds 0..N-1, its final deterministic evaluation against the
dataset's own behaviour return.

    uv run python benchmarks/make_offline_dataset.py          # the dataset, once (see its doc)
    uv run python benchmarks/results_offline.py --seeds 3 --jobs 2            # every loss
    uv run python benchmarks/results_offline.py iql td3bc --seeds 3
    uv run python benchmarks/results_offline.py --render-only

Each run is ``python examples/iql_offline.py --loss L --total-frames N --eval-every N/20
--seed K --logdir <tmp>`` in a fresh process with one torch thread (``results_runs``, the
results page's runner: the load sampled while it goes, the logged series kept). ``N`` is
the loss's budget (``BUDGETS``): the issue's 100k gradient steps, or the number that fits
about an hour of this 2-core machine (CQL: its penalty evaluates the critics on 60 sampled
actions per state, ~10x IQL's step, at the floor of its matrix products:
``bench_cql_floor.py``). The example's last line gives the final evaluation
(10 deterministic episodes, ``mean_return``) and the dataset's ``behaviour_return``
(``make_offline_dataset.py``'s deterministic evaluation of the policy that recorded it).

Each finished run is kept at once in ``benchmarks/results/offline_runs.json`` (a record per
(loss, seed), with the example's code fingerprint: a record of other code or another budget
is dropped, never mixed), and ``docs/results.md`` is re-rendered: its "Offline RL" section
(``offline_section``) is written from that file by ``results_render.render``. Extra options
after the known ones go to every run (``--dataset-id``, ``--minari-root``, ...) and are
part of each record's ``args``. Two calls for different losses may run at once: each merges
its runs into the file as it finds it.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import statistics
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from results_records import code_fingerprint, dump_records  # noqa: E402
from results_render import LOADED, spread  # noqa: E402
from results_runs import LOAD_POLL, run_many  # noqa: E402

RUNS = ROOT / "benchmarks" / "results" / "offline_runs.json"
CQL_STEP = ROOT / "benchmarks" / "results" / "cql_step.json"  # bench_cql_floor.py --out
EXAMPLE = "iql_offline"
EXAMPLES_DIR = ROOT / "examples"

# loss -> gradient steps (the 100k, or what fits about an hour a run here)
BUDGETS = {"iql": 100_000, "td3bc": 100_000, "cql": 30_000, "bc": 100_000}
# loss -> target as a multiple of the behaviour return (BC has none: the reference row)
TARGETS = {"iql": 1.1, "td3bc": 1.1, "cql": 1.0, "bc": None}
NAMES = {"iql": "IQL", "td3bc": "TD3+BC", "cql": "CQL", "bc": "BC (behaviour cloning)"}
# the IQL paper's halfcheetah-medium-v2 scores (D4RL-normalised), quoted beside ours
PAPER = {"iql": "47.4", "td3bc": "48.3", "cql": "44.0", "bc": "42.6"}
EVALS = 20  # evaluations a run (every budget / EVALS steps, and the last)
# D4RL's reference returns (random, expert) by the env's name in the dataset id: its
# normalised score is 100 (R - random) / (expert - random), the paper column's unit
D4RL_REFERENCE = {"halfcheetah": (-280.178953, 12135.0)}


def normalised(dataset_id: str, value: float) -> float | None:
    """``value`` as a D4RL-normalised score, or ``None`` for an env D4RL has no reference for."""
    env = dataset_id.split("/")[1] if dataset_id.count("/") == 2 else ""
    if env not in D4RL_REFERENCE:
        return None
    random, expert = D4RL_REFERENCE[env]
    return 100.0 * (value - random) / (expert - random)


def run_args(loss: str, extra: list[str]) -> list[str]:
    """The example's options for ``loss`` (its budget, evaluations) then ``extra``."""
    steps = BUDGETS[loss]
    return ["--loss", loss, "--total-frames", str(steps),
            "--eval-every", str(max(steps // EVALS, 1)), *extra]


def load_runs(path: Path = RUNS) -> list[dict]:
    """The kept records (none without the file)."""
    return json.loads(path.read_text()) if path.exists() else []


def current(records: list[dict], extra: list[str], examples_dir: Path = EXAMPLES_DIR) -> list[dict]:
    """The records of the example's current code run with this call's options."""
    code = code_fingerprint(EXAMPLE, examples_dir)
    kept = [r for r in records
            if r.get("code") == code and r.get("args") == run_args(r["loss"], extra)]
    for r in records:
        if r not in kept:
            print(f"dropping the offline record of {r['loss']} seed {r['seed']} "
                  f"({r['started']}): code {r.get('code')} with {r.get('args')}, now {code}",
                  file=sys.stderr)
    return kept


def offline_rows(records: list[dict]) -> list[str]:
    """The results page's table of the offline runs: one row per loss."""
    if not records:
        return []
    lines = [
        "| Loss | Runs (seeds) | Gradient steps | Final evaluation | Behaviour return | "
        "Final / behaviour | Target | Seeds at target | Wall time (s) | Steps/s | "
        "Final, normalised | IQL paper (normalised) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for loss in BUDGETS:
        runs = sorted((r for r in records if r["loss"] == loss), key=lambda r: r["seed"])
        if not runs:
            continue
        finals = [r["mean_return"] for r in runs]
        behaviour = [r["behaviour_return"] for r in runs if r.get("behaviour_return") is not None]
        base = statistics.mean(behaviour) if behaviour else None
        ratio = "–" if not base else f"{statistics.mean(finals) / base:.2f}"
        target = TARGETS[loss]
        if target is None or base is None:
            target_cell, met = "– (reference)" if target is None else f"≥ {target:g}x", "–"
        else:
            target_cell = f"≥ {target:g}x ({target * base:,.1f})"
            met = f"{sum(f >= target * base for f in finals)}/{len(finals)}"
        scores = [normalised(r["dataset_id"], f) for r, f in zip(runs, finals, strict=True)]
        score = "–" if None in scores else _spread(scores, "{:.1f}")
        lines.append(
            f"| {NAMES[loss]} | {len(runs)} ({', '.join(str(r['seed']) for r in runs)}) | "
            f"{_spread([float(r['frames']) for r in runs], '{:,.0f}')} | "
            f"{_spread(finals, '{:,.1f}')} | {_spread(behaviour, '{:,.1f}')} | {ratio} | "
            f"{target_cell} | {met} | {_spread([r['seconds'] for r in runs], '{:,.0f}')} | "
            f"{_spread([r['fps'] for r in runs], '{:.1f}')} | {score} | {PAPER[loss]} |")
    return lines


def cql_budget_line(path: Path = CQL_STEP) -> list[str]:
    """What sets CQL's budget, from ``bench_cql_floor.py``'s figures (none without them)."""
    if not path.exists():
        return []
    m = json.loads(path.read_text())
    return [
        f"CQL's budget, {BUDGETS['cql']:,} steps: one gradient step took "
        f"{m['step_us'] / 1e3:,.0f} ms of CPU time here against {m['floor_gemms_us'] / 1e3:,.0f} "
        f"ms for the matrix products it cannot avoid, timed alone ({m['step/floor']:g}x; "
        f"`benchmarks/bench_cql_floor.py`, {m['time']}, 1-minute load {m['load_start']:g} to "
        f"{m['load_end']:g}): about {m['steps_an_hour']:,} steps an hour, and the issue's 100k "
        f"would take {m['hours_for_100k_steps']:g} hours a run. Why CQL stays below its target "
        "at this budget: [Offline RL](offline.md).",
        "",
    ]


def offline_section(path: Path = RUNS, step_path: Path = CQL_STEP) -> list[str]:
    """The results page's "Offline RL" section, from the kept records (none without them)."""
    records = load_runs(path)
    if not records:
        return []
    datasets = sorted({f"`{r['dataset_id']}` ({r['dataset_transitions']:,} transitions)"
                       for r in records})
    loaded = sum(r.get("load_avg_1min_max", 0) > LOADED for r in records)
    return [
        "## Offline RL",
        "",
        "`examples/iql_offline.py` trained on a dataset this toolkit recorded "
        f"({', '.join(datasets)}: `benchmarks/make_offline_dataset.py`, a SAC policy acting "
        "stochastically, D4RL's \"medium\" recipe), written by "
        "`benchmarks/results_offline.py`. *Final evaluation* is the mean return of 10 "
        "deterministic episodes in the real env after the last gradient step; *behaviour "
        "return* is the recording policy's own deterministic evaluation (the dataset's "
        "metadata); cells read `median [min, max]` over the seeds. CQL's budget is the "
        "number of steps that fits about an hour a run here (its step is ~10x IQL's and "
        "runs at the floor of its matrix products: `benchmarks/bench_cql_floor.py`), the "
        "others run the issue's 100k. *Final, normalised* is the final evaluation as a "
        "D4RL-normalised score (100 (R - random) / (expert - random), D4RL's HalfCheetah "
        "references -280.2 and 12,135.0), the unit of the paper's column, which is "
        "halfcheetah-medium-v2, a different dataset: it shows the losses' usual order and "
        "level, not a race. A policy cloned from the data recovers the recording policy's "
        "mean action, so BC lands near the behaviour return as defined here (the policy's "
        "deterministic evaluation, above its own noisy episodes). "
        f"{loaded} of the {len(records)} runs were loaded (1-minute load above "
        f"{LOADED:g} while they ran: wall times and steps/s slowed, returns not). "
        "[Offline RL](offline.md) says how to make and load the dataset.",
        "",
        *offline_rows(records),
        "",
        *cql_budget_line(step_path),
    ]


def _spread(values: list[float], fmt: str) -> str:
    """``results_render.spread``, one value written once when the seeds agree on it."""
    return fmt.format(values[0]) if values and min(values) == max(values) else spread(values, fmt)


def _render_page() -> None:
    """Re-render ``docs/results.md`` (the examples' page, its offline section included)."""
    import results_examples

    page = results_examples.PAGE
    records = results_examples.load_records(page)
    stale = results_examples.load_superseded(page)
    page.write_text(results_examples.render(records, ["--render-only"], page, stale))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path``'s folder: one read-merge-write at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _merge(path: Path, extra: list[str], examples_dir: Path, record: dict | None = None) -> None:
    """Rewrite ``path`` as it is now (another call, other losses, may share it): its current
    records, ``record`` in place of the one of the same loss and seed. Under the folder's
    lock, written whole (a reader never sees a half-written file)."""
    with _locked(path):
        records = current(load_runs(path), extra, examples_dir)
        if record is not None:
            key = (record["loss"], record["seed"])
            records = [r for r in records if (r["loss"], r["seed"]) != key] + [record]
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(dump_records(records) + "\n")
        os.replace(tmp, path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("losses", nargs="*", help=f"losses to run (default all): {list(BUDGETS)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of each loss")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once, one thread each")
    parser.add_argument("--rerun", action="store_true", help="run the kept pairs again")
    parser.add_argument("--render-only", action="store_true", help="re-render the page only")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one run may take")
    parser.add_argument("--out", type=Path, default=RUNS, help="the records' file")
    parser.add_argument("--examples-dir", type=Path, default=EXAMPLES_DIR)
    parser.add_argument("--no-page", action="store_true", help="do not re-render docs/results.md")
    args, extra = parser.parse_known_args(argv)
    losses = args.losses or list(BUDGETS)
    unknown = sorted(set(losses) - set(BUDGETS))
    if unknown:
        parser.error(f"losses: expected some of {list(BUDGETS)}, got {unknown}")
    if args.jobs < 1:
        parser.error(f"--jobs: expected a positive number of runs at once, got {args.jobs}")
    records = current(load_runs(args.out), extra, args.examples_dir)
    failures: list[str] = []
    if not args.render_only:
        done = {(r["loss"], r["seed"]) for r in records}
        pairs = [(EXAMPLE, seed, run_args(loss, extra)) for loss in losses
                 for seed in range(args.seeds) if args.rerun or (loss, seed) not in done]

        def keep(record: dict) -> None:
            print(json.dumps({k: v for k, v in record.items() if k != "series"}), flush=True)
            _merge(args.out, extra, args.examples_dir, record)  # after every run: nothing lost

        spec = {EXAMPLE: {"threshold": float("inf")}}  # no frames-to-target for these rows
        failures = run_many(pairs, [], args.timeout, args.jobs, keep, examples=spec,
                            examples_dir=args.examples_dir, load_poll=LOAD_POLL)
    if args.out.exists():  # the records of other code or settings dropped
        _merge(args.out, extra, args.examples_dir)
    if not args.no_page:
        _render_page()
    if failures:
        print("failed runs:\n" + "\n".join(failures), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
