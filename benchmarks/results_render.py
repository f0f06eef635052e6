"""The results page's text, rendered from its recorded runs: the summary table (``median
[min, max]`` over the seeds), the load marking, the budgets' reasons, the learning curves
(``results_curves.py``), the peer race, each run as recorded, and the kept runs of earlier
code. The standard library alone.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from results_curves import RETURN_TAG, curves_section, value_at
from results_records import RUNS_MARK, SUPERSEDED_MARK, code_fingerprint, dump_records
from results_registry import LONG_EXAMPLES, ROOT

LOADED = 1.5  # a run whose highest 1-minute load exceeded this is marked "loaded" on the page


def spread(values: list[float], fmt: str) -> str:
    """``median [min, max]`` (the median alone for one value)."""
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def example_row(name: str, runs: list[dict], spec: dict) -> str:
    """The summary table's row of example ``name`` (its registry entry ``spec``)."""
    seeds = ", ".join(str(r["seed"]) for r in runs)
    known = [r for r in runs if "note" not in r]  # a note marks a figure not recorded
    reached = [r["frames_to_threshold"] for r in known if r["frames_to_threshold"] is not None]
    frames_cell = (spread([float(v) for v in reached], "{:,.0f}")
                   + f" ({len(reached)}/{len(known)} reached)")
    if not known:
        frames_cell = "not recorded (see below)"
    elif len(known) < len(runs):
        frames_cell += f"; not recorded for {len(runs) - len(known)} run(s), see below"
    final = spread([r["mean_return"] for r in runs], "{:.1f}")
    frames = spread([float(r["frames"]) for r in runs], "{:,.0f}")
    return (f"| `{name}.py` | {spec['task']} | "
            f"≥ {spec['threshold']:g} within {spec['budget']:,} | {len(runs)} ({seeds}) | "
            f"{frames} | {final} | {frames_cell} | "
            f"{spread([r['seconds'] for r in runs], '{:.0f}')} | "
            f"{spread([r['fps'] for r in runs], '{:,.0f}')} | {spec['published']} |")


def step_cost(file: str) -> dict | None:
    """The first row of a step-cost bench's results file (``benchmarks/results/<file>``),
    with its stamp, as the fields a ``"budget_why"`` text quotes; None without the file."""
    path = ROOT / "benchmarks" / "results" / file
    if not path.exists():
        return None
    bench = json.loads(path.read_text())
    row = bench["rows"][0]
    per_frame = row["ours_s"] + bench["env_step_s"]
    return {**row, "batch": bench["batch"], "started": bench["started"],
            "load_start": bench["load_avg_1min_start"], "load_end": bench["load_avg_1min_end"],
            "ours_ms": round(row["ours_s"] * 1e3), "plain_ms": round(row["plain_s"] * 1e3),
            "per_frame_s": per_frame, "hours_100k": f"{100_000 * per_frame / 3600:.1f}"}


def current_runs(mine: list[dict], name: str, examples_dir: Path) -> list[dict]:
    """The runs among ``mine`` (example ``name``'s) of its current code, read from
    ``examples_dir``, else all of them (its last runs of earlier code)."""
    return [r for r in mine if r.get("code") == code_fingerprint(name, examples_dir)] or mine


def rival_at(name: str, frames: int, runs: list[dict], examples_dir: Path) -> str:
    """What example ``name``'s recorded curves (its current runs, else its last runs of
    earlier code) show at ``frames``: one value per seed, with the code that ran (the current
    code read from ``examples_dir``)."""
    mine = [r for r in runs if r["example"] == name and RETURN_TAG in r.get("series", {})]
    current = current_runs(mine, name, examples_dir)
    values = [(r["seed"], value_at(r["series"][RETURN_TAG], frames), r["code"]) for r in current]
    shown = [f"seed {seed} {value:.1f} (code {code})" for seed, value, code in values
             if value is not None]
    return ", ".join(shown) or f"no recorded curve of `{name}.py`"


def versus(name: str, rival: str, frames: int, runs: list[dict], examples_dir: Path) -> str:
    """Example ``name``'s final return against ``rival``'s recorded curve at ``frames``, seed
    by seed (the current runs of each, else their last runs of earlier code), and on how
    many seeds it is higher."""
    def current(example: str) -> dict[int, dict]:
        mine = [r for r in runs if r["example"] == example]
        return {r["seed"]: r for r in current_runs(mine, example, examples_dir)}

    ours, theirs = current(name), current(rival)
    pairs = []
    for seed in sorted(set(ours) & set(theirs)):
        value = value_at(theirs[seed].get("series", {}).get(RETURN_TAG, []), frames)
        if value is not None:
            pairs.append((seed, ours[seed]["mean_return"], value))
    if not pairs:
        return f"no seed recorded for both `{name}.py` and `{rival}.py`"
    higher = sum(mine > other for _, mine, other in pairs)
    shown = ", ".join(f"seed {seed} {mine:.1f} against {other:.1f}" for seed, mine, other in pairs)
    return f"{shown}: higher on {higher} of {len(pairs)} seeds"


def peer_at(path: Path, task: str, frames: int) -> str:
    """The peer's runs of ``task`` at ``frames`` in ``path`` (a results file of
    ``compare_peers.py --sides sb3 --out``): one return per seed, with when it ran, its load
    and the peer's version."""
    file = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    if not path.exists():
        return f"not run yet (`{file}` is missing)"
    record = json.loads(path.read_text())["tasks"].get(task)
    runs = [r for r in (record or {}).get("runs", [])
            if r["side"] == "sb3" and r["frames"] == frames]
    if not runs:
        return f"no run at {frames:,} frames in `{file}`"
    versions = record["meta"].get("peer_versions", {})
    peer = next((f"{name} {versions[name]}" for name in ("sb3-contrib", "stable-baselines3")
                 if name in versions), "version not recorded")
    shown = [f"seed {r['seed']} {r['mean_return']:.1f} ({peer}, "
             f"{r['started']}, 1-minute load {r['load_avg_1min_before']} at its start)"
             for r in sorted(runs, key=lambda r: r["seed"])]
    return ", ".join(shown)


def budget_notes(runs: list[dict], examples: dict[str, dict],
                 examples_dir: Path) -> list[str]:
    """Why an example's budget is what it is, where its spec says (``"budget_why"``, its
    figures read from the bench file ``"budget_from"`` names, and from the curves of the
    ``"rival"`` example among ``runs`` at that budget), for each of ``examples``."""
    notes = []
    for name, spec in examples.items():
        if "budget_why" not in spec:
            continue
        figures = step_cost(spec["budget_from"]) if "budget_from" in spec else {}
        if figures is not None and "per_frame_s" in figures:
            figures["hours_budget"] = f"{spec['budget'] * figures['per_frame_s'] / 3600:.1f}"
        if figures is not None and "rival" in spec:
            figures["rival"] = rival_at(spec["rival"], spec["budget"], runs, examples_dir)
            figures["versus"] = versus(name, spec["rival"], spec["budget"], runs, examples_dir)
        if figures is not None and "peer_from" in spec:
            figures["peer"] = peer_at(ROOT / "benchmarks" / "results" / spec["peer_from"],
                                      spec["peer_task"], spec["budget"])
        why = (spec["budget_why"].format(**figures) if figures is not None
               else f"not measured yet (`benchmarks/results/{spec['budget_from']}` is missing)")
        notes.append(f"- `{name}.py`, {spec['budget']:,} frames: {why}")
    return ["Budgets set by what a run costs here:", "", *notes, ""] if notes else []


def load_cell(record: dict) -> str:
    """``start / max`` 1-minute load of a run, *loaded* when the max exceeds ``LOADED``."""
    peak = record.get("load_avg_1min_max")
    if peak is None:  # recorded before the script sampled the load during a run
        return f"{record['load_avg_1min_before']} / –"
    return f"{record['load_avg_1min_before']} / {peak}" + (" loaded" if peak > LOADED else "")


def _frames_to_target(record: dict) -> str:
    """A run's frames to target as its row shows it."""
    if "note" in record:
        return "not recorded"
    return ("not reached" if record["frames_to_threshold"] is None
            else f"{record['frames_to_threshold']:,}")


def offline_section() -> list[str]:
    """Offline RL's runs (``results_offline.py``), from its records' file."""
    from results_offline import offline_section as section  # this module's sibling

    return section()


def peers_section() -> list[str]:
    """The race against Stable-Baselines3 (``compare_peers.py``), quoted from its results file."""
    from peers_docs import section_from_file  # benchmarks/peers_docs.py, this module's sibling

    section = section_from_file()
    return [section, ""] if section else []


def render(records: list[dict], argv: list[str], page: Path, superseded: list[dict] | None,
           *, examples: dict[str, dict], examples_dir: Path, load_poll: float) -> str:
    """The page for ``records`` (the current runs) and ``superseded`` (kept runs of earlier
    code), its curves written beside ``page``; ``argv`` is the command line it names,
    ``examples`` the registry, ``examples_dir`` where their code is read, ``load_poll`` the
    load's sampling period the page states."""
    by_name = {name: sorted((r for r in records if r["example"] == name), key=lambda r: r["seed"])
               for name in examples}
    header = ("| Example | Task | Target (mean of last 20 episodes) | Runs (seeds) | Frames | "
              "Final return | Frames to target | Wall time (s) | Frames/s | Published |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    rows = [example_row(name, runs, examples[name]) for name, runs in by_name.items() if runs]
    missing = [f"`{name}.py`" for name, runs in by_name.items() if not runs]
    lines = [
        *_about(records, argv, load_poll),
        "",
        "Cells with a spread read `median [min, max]` over the runs. *Final return* is the mean "
        "return of the last 20 training episodes at the end of the run (the `mean_return` of the "
        "example's last line). *Frames to target* is the first logged frame count at which that "
        "running mean reached the target (`charts/episodic_return`).",
        "",
        *([header, *rows] if rows else []),
        "",
        *budget_notes(records + (superseded or []), examples, examples_dir),
        *_missing_note(missing),
        *curves_section(by_name, page, examples),
        "The published figures are those projects' own reports (different budgets, hardware and "
        "evaluation protocols); they show what a correct implementation reaches, not a "
        "like-for-like race.",
        "",
        *_runs_table(records),
        "",
        *gpu_section(page),
        *offline_section(),
        *peers_section(),
        *superseded_section(superseded or []),
        f"{RUNS_MARK}\n{dump_records(records)}\n-->",
        "",
    ]
    return "\n".join(lines)


def _about(records: list[dict], argv: list[str], load_poll: float) -> list[str]:
    """The page's title and what its runs were: command, dates, machine, load."""
    dates = sorted(r["started"] for r in records)
    loads = [r["load_avg_1min_before"] for r in records]
    peaks = [r["load_avg_1min_max"] for r in records if "load_avg_1min_max" in r]
    machines = sorted({r["machine"] for r in records if "machine" in r})
    unrecorded = sum("machine" not in r for r in records)
    machine_line = "; ".join(machines) or "not recorded"
    if machines and unrecorded:
        machine_line += (f" ({unrecorded} earlier run(s) did not record theirs: the same 2-CPU AMD "
                         "EPYC development VM, whose CPU generation changed between sessions)")
    return [
        "# Results of the examples",
        "",
        "What the example trainers in `examples/` reach on this project's reference machine, "
        "measured by `benchmarks/results_examples.py` (each run a fresh process; this page is "
        "written by that script, not by hand).",
        "",
        "- Full table (3 seeds of every example): `uv run python benchmarks/results_examples.py "
        "--seeds 3`; this page was last written by `uv run python benchmarks/results_examples.py "
        f"{' '.join(argv)}`".rstrip(),
        f"- Runs started between {dates[0]} and {dates[-1]}" if dates else "- No runs yet",
        f"- Machine: {machine_line}",
        f"- 1-minute load average when each run started: {min(loads):.1f} to {max(loads):.1f} "
        "(the machine was shared: wall times and frames/s are upper and lower bounds of what an "
        "idle machine gives)" if loads else "",
        *([f"- Highest 1-minute load while a run went on (sampled every {load_poll:g} s; recorded "
           f"for {len(peaks)} of the {len(records)} runs): {min(peaks):.1f} to {max(peaks):.1f}; "
           f"{sum(p > LOADED for p in peaks)} run(s) *loaded* (above {LOADED:g} on this "
           "machine: their wall times and frames/s are slowed by other work, their returns "
           "are not, each run being seeded and on one thread)"] if peaks else []),
    ]


def _missing_note(missing: list[str]) -> list[str]:
    """The examples (``missing``, as shown) with no run of their current code, and why."""
    if not missing:
        return []
    long = [f"`{name}.py`" for name in LONG_EXAMPLES if f"`{name}.py`" in missing]
    these = "it has" if len(missing) == 1 else "these have"
    return [f"No run of the current code of {', '.join(missing)}: a record is dropped when "
            f"its example's code changes, and {these} not been run since (or ever). "
            + (f"{', '.join(long)} {'takes' if len(long) == 1 else 'take'} about an hour or "
               "more per seed on the 2-core "
               f"development machine, so {'it is' if len(long) == 1 else 'they are'} "
               "re-recorded only when it has the time. "
               if long else "")
            + ("Run the script with its name to add it." if len(missing) == 1
               else "Run the script with their names to add them."), ""]


def _runs_table(records: list[dict]) -> list[str]:
    """Each run as recorded, one row per (example, seed)."""
    return [
        "Each run, as recorded (the script reads this back to add seeds without re-running the "
        "others; *Code* is the fingerprint of the example's code that ran, and a record whose "
        "example has changed since is dropped, never mixed with runs of the new code):",
        "",
        "| Example | Code | Seed | Started | Load (start / max) | Frames | Final return | "
        "Frames to target | Seconds | Frames/s | Note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *[f"| `{r['example']}` | `{r['code']}` | {r['seed']} | {r['started']} | "
          f"{load_cell(r)} | {r['frames']:,} | {r['mean_return']} | "
          f"{_frames_to_target(r)} | {r['seconds']} | {r['fps']} | {r.get('note', '')} |"
          for r in sorted(records, key=lambda r: (r['example'], r['seed']))],
    ]


def gpu_section(page: Path) -> list[str]:
    """The learner on a GPU, quoted at build time from ``benchmarks/results/gpu.json`` (the
    prepared check's record; ``tools/mkdocs_hooks/gpu_tables.py``), when one exists."""
    if not (Path(__file__).resolve().parent / "results" / "gpu.json").exists():
        return []
    return [
        "## The learner on a GPU",
        "",
        "The examples above ran on CPUs. Their update steps, compiled and captured in CUDA "
        "graphs (`--compile --cudagraphs`), were timed once on a lent GPU by the prepared "
        "check (`tools/gpu/`): update-side frames/s of LeanRL's four rows, synthetic batches "
        "of the real shapes, no environment. The whole record, with the replay and recurrent "
        "kernels: [Running on a GPU](gpu.md#measured-on-a-gpu).",
        "",
        "<!-- gpu: stamp -->",
        "",
        "<!-- gpu: speedups -->",
        "",
    ]


def superseded_section(runs: list[dict]) -> list[str]:
    """The kept runs of earlier code: a table apart, and their block for the hook."""
    if not runs:
        return []
    return [
        "## Last runs of an earlier version of the code",
        "",
        "Examples with no run of their current code keep their last runs here, apart from the "
        "table above and never mixed with new runs: other pages quote them, saying they ran an "
        "earlier version of the example (*Code*). They go when the example is run again.",
        "",
        "| Example | Code | Seed | Started | Load | Frames | Final return | Seconds | Frames/s |",
        "|---|---|---|---|---|---|---|---|---|",
        *[f"| `{r['example']}` | `{r['code']}` | {r['seed']} | {r['started']} | "
          f"{r['load_avg_1min_before']} | {r['frames']:,} | {r['mean_return']} | {r['seconds']} | "
          f"{r['fps']} |" for r in runs],
        "",
        f"{SUPERSEDED_MARK}\n{dump_records(runs)}\n-->",
        "",
    ]
