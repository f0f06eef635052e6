"""Whole training runs with ``--compile`` against eager: where does compiling pay back?

Runs each example twice per round in fresh processes, same seed, eager and ``--compile``
(the order alternates between rounds, so load drifts hit both), and reads each run's JSON
last line: ``seconds`` (the whole run, compilation included: what a race counts),
``steady_fps`` (frames/s after the first batch that trained, i.e. after compiling),
``compile_seconds`` and ``mean_return``. Per example it reports the total-time ratio, the
steady-state ratio, the returns side by side, and the break-even budget: the frames after
which the compiled run's faster steady state has paid for its compilation
(``compile_seconds / (1 / eager_fps - 1 / compiled_fps)`` frames, ``None`` when the
compiled steady state is not faster). Writes a results JSON the docs can quote (the
machine's load is stamped before and after each run, each row its own start time); the
rows of examples this run does not measure are kept from the file it writes over. The real
comparison needs an idle machine and the examples' own budgets; ``--total-frames`` shrinks
every run for a check.

    uv run python benchmarks/bench_compile_runs.py                    # the examples' budgets
    uv run python benchmarks/bench_compile_runs.py --total-frames 2048 --rounds 1 \\
        --out /tmp/compile_runs.json                                   # a quick check
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ("ppo_cartpole", "ppo_mujoco", "sac_mujoco")
OUT = ROOT / "benchmarks" / "results" / "compile_runs.json"
# what makes an example run eager where its default may compile (ppo_mujoco: --compile auto)
EAGER_ARGS = {"ppo_mujoco": ["--compile", "false"]}


def run_example(name: str, compile_: bool, seed: int, total_frames: int | None,
                timeout: float) -> dict:
    """One run in a fresh process; its JSON last line, the load stamped around it."""
    cmd = [sys.executable, str(ROOT / "examples" / f"{name}.py"), "--seed", str(seed),
           "--device", "cpu"]
    if total_frames is not None:
        cmd += ["--total-frames", str(total_frames)]
    if compile_:
        cmd.append("--compile")
    else:
        cmd += EAGER_ARGS.get(name, [])
    load_before, start = os.getloadavg()[0], time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                           f"{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    keep = ("frames", "seconds", "fps", "steady_fps", "compile_seconds", "mean_return")
    return {**{k: result.get(k) for k in keep}, "wall_seconds": round(
        time.perf_counter() - start, 2), "load_avg_1min_before": round(load_before, 2),
        "load_avg_1min_after": round(os.getloadavg()[0], 2)}


def break_even_frames(eager_fps: float | None, compiled_fps: float | None,
                      compile_seconds: float) -> float | None:
    """Frames after which a faster compiled steady state has paid for compiling."""
    if not eager_fps or not compiled_fps or compiled_fps <= eager_fps:
        return None
    return round(compile_seconds / (1 / eager_fps - 1 / compiled_fps))


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def compare(name: str, rounds: int, seed: int, total_frames: int | None,
            timeout: float) -> dict:
    """``rounds`` eager/compiled pairs of one example, interleaved; medians and ratios."""
    runs: dict[str, list[dict]] = {"eager": [], "compile": []}
    for r in range(rounds):
        order = ("eager", "compile") if r % 2 == 0 else ("compile", "eager")
        for mode in order:
            runs[mode].append(run_example(name, mode == "compile", seed, total_frames,
                                          timeout))
            print(f"{name} {mode}: {json.dumps(runs[mode][-1])}", flush=True)
    eager_s, comp_s = _median(runs["eager"], "seconds"), _median(runs["compile"], "seconds")
    eager_fps = _median(runs["eager"], "steady_fps")
    comp_fps = _median(runs["compile"], "steady_fps")
    compile_seconds = _median(runs["compile"], "compile_seconds") or 0.0
    return {
        "example": name, "seed": seed, "rounds": rounds,
        "frames": runs["eager"][0]["frames"], "runs": runs,
        "eager_seconds": eager_s, "compile_seconds_total": comp_s,
        "total_ratio_compile_over_eager": round(comp_s / eager_s, 3),
        "steady_ratio_compile_over_eager": (round(comp_fps / eager_fps, 3)
                                            if eager_fps and comp_fps else None),
        "compile_seconds": compile_seconds,
        "pays_back_within_run": comp_s < eager_s,
        "break_even_frames": break_even_frames(eager_fps, comp_fps, compile_seconds),
        "returns": {m: [r["mean_return"] for r in rs] for m, rs in runs.items()},
    }


def kept_rows(path: Path) -> list[dict]:
    """The rows already in ``path`` (none without it), each stamped with its own run's
    start time (an older file's rows take the file's)."""
    if not path.exists():
        return []
    old = json.loads(path.read_text())
    return [{"time": old["time"], "total_frames_override": old.get("total_frames_override"),
             **row} for row in old["rows"]]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--examples", default=",".join(EXAMPLES))
    p.add_argument("--rounds", type=int, default=2, help="eager/compiled pairs per example")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--total-frames", type=int, default=None,
                   help="override every example's budget (a quick check, not a record)")
    p.add_argument("--timeout", type=float, default=7200.0, help="seconds per run")
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    import torch

    names = args.examples.split(",")
    doc = {"benchmark": "bench_compile_runs", "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "torch": torch.__version__, "cpus": os.cpu_count(),
           "total_frames_override": args.total_frames,
           "rows": [r for r in kept_rows(args.out) if r["example"] not in names]}
    for name in names:
        started = time.strftime("%Y-%m-%dT%H:%M:%S")
        row = {**compare(name, args.rounds, args.seed, args.total_frames, args.timeout),
               "time": started, "total_frames_override": args.total_frames}
        doc["rows"].append(row)
        summary = {k: v for k, v in row.items() if k != "runs"}
        print(json.dumps(summary), flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")  # after each example
    return doc


if __name__ == "__main__":
    main()
