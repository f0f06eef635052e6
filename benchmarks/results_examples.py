"""Run the example trainers for several seeds and write ``docs/results.md`` from what they print.

    uv run python benchmarks/results_examples.py                       # 3 seeds of every example
    uv run python benchmarks/results_examples.py --seeds 1 dqn_prioritized
    uv run python benchmarks/results_examples.py --render-only         # rewrite the page only

Each run is ``python examples/<name>.py --seed K --logdir <tmp>`` in a fresh process. The
last stdout line (one JSON object: frames, seconds, mean_return, fps) gives the final
return, the wall time and the frames per second; the TensorBoard scalar
``charts/episodic_return`` (mean of the last 20 episodes, logged after every batch) gives
the frames to threshold: the first logged frame count at which it reaches the example's
target. Every run's record is kept in the page itself (an HTML comment at its end), so a
later call adds the missing (example, seed) pairs and re-renders the table from all runs;
``--rerun`` runs them again. Each record carries the fingerprint of the example's code
(its syntax tree without docstrings and comments, so the ``Config`` defaults included):
records of an example whose code has changed since are dropped when the script runs, so
runs of old and new hyper-parameters are never mixed (the page then shows only what the
current code reaches, and lists the examples it has no run of). Only measured figures go
into the table; the published figures beside them are quoted from the cited pages.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
RUNS_MARK = "<!-- runs:"

# name -> task, target (threshold on the mean return of the last 20 episodes), budget
# (the example's default total frames) and the published figures quoted beside ours.
EXAMPLES: dict[str, dict] = {
    "ppo_cartpole": {
        "task": "CartPole-v1", "threshold": 475.0, "budget": 200_000,
        "published": "CleanRL `ppo.py`: 490.04 ± 6.12 after 500k steps "
                     "([CleanRL PPO docs](https://docs.cleanrl.dev/rl-algorithms/ppo/#experiment-results))",
    },
    "ppo_lstm_masked_cartpole": {
        "task": "CartPole-v1, velocities hidden", "threshold": 400.0, "budget": 1_000_000,
        "published": "SB3-Contrib `RecurrentPPO` on CartPoleNoVel-v1 (same POMDP): 500.00 ± 0.00 "
                     "([sb3/ppo_lstm-CartPoleNoVel-v1](https://huggingface.co/sb3/ppo_lstm-CartPoleNoVel-v1))",
    },
    "dqn_prioritized": {
        "task": "CartPole-v1", "threshold": 400.0, "budget": 300_000,
        "published": "CleanRL `dqn.py` (uniform replay): 488.69 ± 16.11 after 500k steps "
                     "([CleanRL DQN docs](https://docs.cleanrl.dev/rl-algorithms/dqn/#experiment-results_1))",
    },
    "sac_pendulum": {
        "task": "Pendulum-v1", "threshold": -250.0, "budget": 20_000,
        "published": "SB3 `SAC` (RL Zoo, 20k steps): -176.33 ± 101.55 "
                     "([sb3/sac-Pendulum-v1](https://huggingface.co/sb3/sac-Pendulum-v1))",
    },
    "ppo_mujoco": {
        "task": "Hopper-v5", "threshold": 1500.0, "budget": 1_000_000,
        "published": "CleanRL `ppo_continuous_action.py` has the same defaults; its Hopper curves: "
                     "[CleanRL PPO docs](https://docs.cleanrl.dev/rl-algorithms/ppo/)",
    },
    "sac_mujoco": {
        "task": "HalfCheetah-v5", "threshold": 3000.0, "budget": 100_000,
        "published": "CleanRL `sac_continuous_action.py` has nearly the same defaults; its HalfCheetah "
                     "curves: [CleanRL SAC docs](https://docs.cleanrl.dev/rl-algorithms/sac/)",
    },
    "ppo_atari": {
        "task": "ALE/Breakout-v5", "threshold": 10.0, "budget": 2_000_000,
        "published": "CleanRL `ppo_atari.py` has the same defaults; its Breakout curves (10M frames): "
                     "[CleanRL PPO docs](https://docs.cleanrl.dev/rl-algorithms/ppo/)",
    },
}


def frames_to_threshold(logdir: Path, threshold: float) -> int | None:
    """First logged frame count at which ``charts/episodic_return`` reaches ``threshold``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    if "charts/episodic_return" not in events.Tags()["scalars"]:
        return None
    for event in events.Scalars("charts/episodic_return"):
        if event.value >= threshold:
            return int(event.step)
    return None


def code_fingerprint(name: str) -> str:
    """Hash of ``examples/<name>.py``'s syntax tree without docstrings (comments never reach it).

    Any change to what the example runs (a ``Config`` default, a network, the loop) changes
    it; editing a docstring or a comment does not.
    """
    tree = ast.parse((ROOT / "examples" / f"{name}.py").read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:12]


def drop_stale(records: list[dict], extra: list[str]) -> list[dict]:
    """The records of the current code run with the same extra options (``extra``).

    A record without a code fingerprint (written before there were any) is stale too.
    """
    current = {name: code_fingerprint(name) for name in EXAMPLES}
    kept = [r for r in records if r.get("code") == current.get(r["example"]) and r.get("args", []) == extra]
    for r in records:
        if r not in kept:
            print(f"dropping the record of {r['example']} seed {r['seed']} ({r['started']}): code "
                  f"{r.get('code', 'unknown')} with options {r.get('args', [])}, now {current.get(r['example'])} "
                  f"with {extra}", file=sys.stderr)
    return kept


def run_one(name: str, seed: int, extra: list[str], timeout: float) -> dict:
    """One example run in a fresh process; its record for the page."""
    script = ROOT / "examples" / f"{name}.py"
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix=f"rl-results-{name}-") as tmp:
        cmd = [sys.executable, str(script), "--seed", str(seed), "--logdir", str(Path(tmp) / "tb"), *extra]
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        proc = subprocess.run(cmd, cwd=tmp, capture_output=True, text=True, timeout=timeout, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"{name} seed {seed} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        result = json.loads(proc.stdout.strip().splitlines()[-1])
        reached = frames_to_threshold(Path(tmp) / "tb", EXAMPLES[name]["threshold"])
    shown = ["python", f"examples/{name}.py", "--seed", str(seed), *extra]
    return {"example": name, "seed": seed, "code": code_fingerprint(name), "args": extra, "command": " ".join(shown),
            "started": started, "load_avg_1min_before": round(load_before, 2), "frames_to_threshold": reached, **result}


def machine() -> str:
    from run import cpu_model  # benchmarks/run.py, this script's sibling

    return f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} {platform.release()}, Python {platform.python_version()}"


def load_records(page: Path) -> list[dict]:
    if not page.exists():
        return []
    text = page.read_text()
    if RUNS_MARK not in text:
        return []
    block = text.split(RUNS_MARK, 1)[1].rsplit("-->", 1)[0]
    return json.loads(block)


def spread(values: list[float], fmt: str) -> str:
    """``median [min, max]`` (the median alone for one value)."""
    if not values:
        return "–"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} [{fmt.format(min(values))}, {fmt.format(max(values))}]"


def example_row(name: str, runs: list[dict]) -> str:
    spec = EXAMPLES[name]
    seeds = ", ".join(str(r["seed"]) for r in runs)
    known = [r for r in runs if "note" not in r]  # a note marks a figure not recorded
    reached = [r["frames_to_threshold"] for r in known if r["frames_to_threshold"] is not None]
    frames_cell = spread([float(v) for v in reached], "{:,.0f}") + f" ({len(reached)}/{len(known)} reached)"
    if not known:
        frames_cell = "not recorded (see below)"
    elif len(known) < len(runs):
        frames_cell += f"; not recorded for {len(runs) - len(known)} run(s), see below"
    final = spread([r["mean_return"] for r in runs], "{:.1f}")
    frames = spread([float(r["frames"]) for r in runs], "{:,.0f}")
    return (f"| `{name}.py` | {spec['task']} | ≥ {spec['threshold']:g} within {spec['budget']:,} | "
            f"{len(runs)} ({seeds}) | {frames} | {final} | {frames_cell} | "
            f"{spread([r['seconds'] for r in runs], '{:.0f}')} | {spread([r['fps'] for r in runs], '{:,.0f}')} | "
            f"{spec['published']} |")


def _frames_to_target(record: dict) -> str:
    if "note" in record:
        return "not recorded"
    return "not reached" if record["frames_to_threshold"] is None else f"{record['frames_to_threshold']:,}"


def peers_section() -> list[str]:
    """The race against Stable-Baselines3 (``compare_peers.py``), quoted from its results file."""
    from peers_docs import section_from_file  # benchmarks/peers_docs.py, this script's sibling

    section = section_from_file()
    return [section, ""] if section else []


def render(records: list[dict], argv: list[str]) -> str:
    by_name = {name: sorted((r for r in records if r["example"] == name), key=lambda r: r["seed"])
               for name in EXAMPLES}
    header = ("| Example | Task | Target (mean of last 20 episodes) | Runs (seeds) | Frames | Final return | "
              "Frames to target | Wall time (s) | Frames/s | Published |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    rows = [example_row(name, runs) for name, runs in by_name.items() if runs]
    missing = [f"`{name}.py`" for name, runs in by_name.items() if not runs]
    dates = sorted(r["started"] for r in records)
    loads = [r["load_avg_1min_before"] for r in records]
    lines = [
        "# Results of the examples",
        "",
        "What the example trainers in `examples/` reach on this project's reference machine, "
        "measured by `benchmarks/results_examples.py` (each run a fresh process; this page is "
        "written by that script, not by hand).",
        "",
        "- Full table (3 seeds of every example): `uv run python benchmarks/results_examples.py --seeds 3`; "
        f"this page was last written by `uv run python benchmarks/results_examples.py {' '.join(argv)}`".rstrip(),
        f"- Runs started between {dates[0]} and {dates[-1]}" if dates else "- No runs yet",
        f"- Machine: {machine()}",
        f"- 1-minute load average when each run started: {min(loads):.1f} to {max(loads):.1f} "
        "(the machine was shared: wall times and frames/s are upper and lower bounds of what an "
        "idle machine gives)" if loads else "",
        "",
        "Cells with a spread read `median [min, max]` over the runs. *Final return* is the mean "
        "return of the last 20 training episodes at the end of the run (the `mean_return` of the "
        "example's last line). *Frames to target* is the first logged frame count at which that "
        "running mean reached the target (`charts/episodic_return`).",
        "",
        *([header, *rows] if rows else []),
        "",
    ]
    if missing:
        lines += [f"Not run yet (no record): {', '.join(missing)}. Run the script with their names "
                  "to add them.", ""]
    lines += [
        "The published figures are those projects' own reports (different budgets, hardware and "
        "evaluation protocols); they show what a correct implementation reaches, not a "
        "like-for-like race.",
        "",
        "Each run, as recorded (the script reads this back to add seeds without re-running the others; "
        "*Code* is the fingerprint of the example's code that ran, and a record whose example has "
        "changed since is dropped, never mixed with runs of the new code):",
        "",
        "| Example | Code | Seed | Started | Load | Frames | Final return | Frames to target | Seconds | Frames/s | Note |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *[f"| `{r['example']}` | `{r['code']}` | {r['seed']} | {r['started']} | {r['load_avg_1min_before']} | {r['frames']:,} | "
          f"{r['mean_return']} | {_frames_to_target(r)} | "
          f"{r['seconds']} | {r['fps']} | {r.get('note', '')} |" for r in sorted(records, key=lambda r: (r['example'], r['seed']))],
        "",
        *peers_section(),
        f"{RUNS_MARK}\n{json.dumps(records, indent=1)}\n-->",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"examples to run (default all): {', '.join(EXAMPLES)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of each example")
    parser.add_argument("--rerun", action="store_true", help="run again the (example, seed) pairs already on the page")
    parser.add_argument("--render-only", action="store_true", help="re-render the page from its recorded runs")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one run may take")
    parser.add_argument("--page", type=Path, default=PAGE)
    args, extra = parser.parse_known_args()
    names = args.names or list(EXAMPLES)
    unknown = sorted(set(names) - set(EXAMPLES))
    if unknown:
        parser.error(f"unknown examples {unknown}; expected some of {list(EXAMPLES)}")
    records = drop_stale(load_records(args.page), extra)
    if not args.render_only:
        for name in names:
            for seed in range(args.seeds):
                done = any(r["example"] == name and r["seed"] == seed for r in records)
                if done and not args.rerun:
                    continue
                print(f"running {name} seed {seed} ...", flush=True)
                record = run_one(name, seed, extra, args.timeout)
                records = [r for r in records if not (r["example"] == name and r["seed"] == seed)] + [record]
                args.page.write_text(render(records, sys.argv[1:]))  # after every run: nothing lost
                print(json.dumps(record), flush=True)
    args.page.write_text(render(records, sys.argv[1:]))
    print(f"wrote {args.page}")


if __name__ == "__main__":
    main()
