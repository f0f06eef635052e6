"""TorchRL's PPO tutorial on both libraries: final deterministic returns and wall time.

    uv run python benchmarks/compare_torchrl_tutorial.py \\
        --script /path/to/rl/tutorials/sphinx-tutorials/coding_ppo.py \\
        --torchrl-path /tmp/trl-site --extra-path /tmp/mpl-site --seeds 10

The tutorial is read from ``--script`` (TorchRL's own file, never copied here) and run
unedited in its logic, one fresh process per run (``--one``): on our side its source is
first rewritten in memory by ``rl_migrate.rewrite_source`` (what ``rl-migrate --write``
writes); on TorchRL's side it runs as is with ``--torchrl-path`` (a ``pip install
--target`` folder holding ``torchrl``) prepended to ``PYTHONPATH``. Before the run the
driver seeds ``torch``, ``numpy`` and ``random`` with the run's seed, sets one thread
(``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=1``) and sets the module-level constant
``total_frames`` (``--frames``, 50,000 by default; the tutorial ships 10,000) by replacing
that one assignment's value in the parsed source. matplotlib's ``Agg`` backend keeps
``plt.show()`` silent (``--extra-path`` may hold matplotlib when the venv has none).

After the script ends, the driver evaluates the trained ``policy_module`` on the
tutorial's own ``env`` with the tutorial's own evaluation call (``env.rollout(1000,
policy_module)`` under ``set_exploration_type(ExplorationType.DETERMINISTIC)``, names
taken from the script's namespace, so each side uses its own library): the sum of
``("next", "reward")`` is the run's final return. Wall time is the script's execution
(imports included). Runs alternate sides seed by seed, one at a time; each result is
appended to ``--out`` as it arrives, with the load average. The summary is the median
of each side and the bootstrap 90% interval of the ratio of medians (ours / TorchRL,
seeds resampled within each side, 10,000 resamples); the target is [0.8, 1.25]. Beside it,
the comparison's resolution: the same interval when both sides are drawn from the pooled
returns (one library by construction), and how many seeds a side would make that fit. Wall
times are only comparable on an idle machine (``loaded`` marks runs that started with
a 1-minute load average above half the cores).

Imports are byte-compiled on both sides, as in any Python install (pip compiles at install
time; Python writes ``__pycache__`` on first import): the children run without
``PYTHONDONTWRITEBYTECODE``, and before a side's first timed run one untimed process
imports what the tutorial imports (``--warm``), so the caches exist. With the variable set
(this sandbox sets it; ``--no-bytecode`` keeps it), every run compiled torch's, tensordict's
and its library's sources again: a fixed cost on both sides, which hides the libraries'
own difference. Each row records ``bytecode``.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "torchrl_tutorial.json"
SIDES = ("ours", "torchrl")


def patched_source(path: str, side: str, frames: int) -> str:
    """The tutorial's text, migrated for ``side == "ours"``, with ``total_frames = frames``."""
    source = Path(path).read_text()
    if side == "ours":
        from rl_migrate import rewrite_source

        rewrite = rewrite_source(source, path)
        for finding in rewrite.findings:
            print(f"rl-migrate: {finding}", file=sys.stderr)
        source = rewrite.new_source
    tree = ast.parse(source, path)
    found = [
        node for node in tree.body
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["total_frames"]
    ]
    if len(found) != 1:
        raise SystemExit(f"{path}: expected one top-level 'total_frames = ...', found {len(found)}")
    lines = source.splitlines(keepends=True)
    node = found[0]
    if node.lineno != node.end_lineno:
        raise SystemExit(f"{path}:{node.lineno}: 'total_frames = ...' spans several lines")
    line = lines[node.lineno - 1]
    value = node.value
    lines[node.lineno - 1] = (
        line[: value.col_offset] + repr(frames) + line[value.end_col_offset :]
    )
    return "".join(lines)


def final_return(namespace: dict[str, Any]) -> float:
    """The tutorial's own deterministic evaluation, once more after training."""
    torch = namespace["torch"]
    with namespace["set_exploration_type"](
        namespace["ExplorationType"].DETERMINISTIC
    ), torch.no_grad():
        rollout = namespace["env"].rollout(1000, namespace["policy_module"])
    return float(rollout["next", "reward"].sum())


def warm_imports(script: str, side: str) -> None:
    """Run only the tutorial's top-level imports (its migrated ones on our side), so that
    their byte-compiled caches exist before a timed run."""
    tree = ast.parse(patched_source(script, side, 1), script)
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    exec(compile(ast.Module(imports, []), script, "exec"), {"__name__": "__warm__"})  # noqa: S102


def run_one(script: str, side: str, seed: int, frames: int) -> dict[str, Any]:
    """One run of the tutorial in this process; returns its result row."""
    import numpy as np
    import torch

    os.environ.setdefault("MPLBACKEND", "Agg")
    torch.set_num_threads(1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    code = compile(patched_source(script, side, frames), script, "exec")
    namespace: dict[str, Any] = {"__name__": "__main__", "__file__": script}
    start = time.perf_counter()
    exec(code, namespace)  # noqa: S102 - the tutorial is the benchmark
    seconds = time.perf_counter() - start
    evals = namespace.get("logs", {}).get("eval reward (sum)", [])
    return {
        "side": side, "seed": seed, "frames": frames,
        "final_return": round(final_return(namespace), 3),
        "tutorial_last_eval": round(float(evals[-1]), 3) if evals else None,
        "seconds": round(seconds, 2), "threads": torch.get_num_threads(),
    }


def child_env(side: str, args: argparse.Namespace) -> dict[str, str]:
    """The environment of one run's process: one thread, the side's import path."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    if args.bytecode:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    paths = [p for p in (args.extra_path,) if p]
    if side == "torchrl":
        if not args.torchrl_path:
            raise SystemExit("--torchrl-path: expected the folder holding torchrl, got none")
        paths.insert(0, args.torchrl_path)
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def spawn(side: str, seed: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run one side and seed in a fresh process (under ``nice``); its last stdout line."""
    cmd = [
        "nice", "-n", str(args.nice), sys.executable, __file__, "--one", "--side", side,
        "--seed", str(seed), "--script", args.script, "--frames", str(args.frames),
    ]
    load = os.getloadavg()[0]
    log = Path(args.log_dir) / f"{side}-{seed}.log" if args.log_dir else None
    with open(log, "w") if log else open(os.devnull, "w") as err:
        out = subprocess.run(cmd, env=child_env(side, args), stdout=subprocess.PIPE,
                             stderr=err, text=True, timeout=args.timeout, check=False)
    if out.returncode:
        raise SystemExit(f"{side} seed {seed}: exit {out.returncode} (log: {log})")
    row = json.loads(out.stdout.strip().splitlines()[-1])
    row["load_avg_1min_before"] = round(load, 2)
    row["bytecode"] = args.bytecode
    row["loaded"] = load > (os.cpu_count() or 1) / 2
    return row


def warm(side: str, args: argparse.Namespace) -> None:
    """One untimed process importing what the tutorial imports (writes the bytecode)."""
    cmd = [sys.executable, __file__, "--warm", "--side", side, "--script", args.script]
    subprocess.run(cmd, env=child_env(side, args), stdout=subprocess.DEVNULL,
                   timeout=args.timeout, check=True)


def bootstrap_ratio(ours: list[float], theirs: list[float], n: int = 10_000,
                    seed: int = 0) -> tuple[float, float, float]:
    """Ratio of medians (ours / theirs) and its bootstrap 90% percentile interval."""
    import numpy as np

    rng = np.random.default_rng(seed)
    a, b = np.asarray(ours, dtype=float), np.asarray(theirs, dtype=float)
    ra = np.median(a[rng.integers(0, len(a), (n, len(a)))], axis=1)
    rb = np.median(b[rng.integers(0, len(b), (n, len(b)))], axis=1)
    ratios = ra / rb
    low, high = np.percentile(ratios, [5, 95])
    return float(np.median(a) / np.median(b)), float(low), float(high)


def resolution(ours: list[float], theirs: list[float], n: int = 4_000,
               seed: int = 0) -> dict[str, Any]:
    """What a comparison of this size can tell apart: both sides drawn from the pooled returns
    (one library, by construction), the 90% interval of their ratio of medians at this many
    seeds a side, and the fewest seeds a side (of 10, 20, 40, ... 640) whose interval fits the
    target. An interval this wide at equal libraries is the task's seed variance, not a gap."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pool = np.asarray(list(ours) + list(theirs), dtype=float)

    def interval(k: int) -> tuple[float, float]:
        ra = np.median(pool[rng.integers(0, len(pool), (n, k))], axis=1)
        rb = np.median(pool[rng.integers(0, len(pool), (n, k))], axis=1)
        low, high = np.percentile(ra / rb, [5, 95])
        return float(low), float(high)

    low, high = interval(min(len(ours), len(theirs)))
    needed = None
    for k in (10, 20, 40, 80, 160, 320, 640):
        k_low, k_high = interval(k)
        if k_low >= 0.8 and k_high <= 1.25:
            needed = k
            break
    return {"same_library_ci90": [round(low, 3), round(high, 3)],
            "seeds_a_side_to_fit_target": needed}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-side medians and the ratio's interval (when both sides have two runs or more)."""
    import numpy as np

    by = {s: [r for r in rows if r["side"] == s] for s in SIDES}
    out: dict[str, Any] = {}
    for side, rs in by.items():
        if rs:
            out[side] = {
                "runs": len(rs),
                "median_final_return": round(float(np.median([r["final_return"] for r in rs])), 2),
                "median_seconds": round(float(np.median([r["seconds"] for r in rs])), 2),
                "any_loaded": any(r["loaded"] for r in rs),
            }
    if all(len(by[s]) >= 2 for s in SIDES):
        ratio, low, high = bootstrap_ratio(
            [r["final_return"] for r in by["ours"]], [r["final_return"] for r in by["torchrl"]]
        )
        out["return_ratio"] = {"median_ratio": round(ratio, 3), "ci90": [round(low, 3),
                               round(high, 3)], "target": [0.8, 1.25],
                               "within_target": low >= 0.8 and high <= 1.25}
        out["resolution"] = resolution(
            [r["final_return"] for r in by["ours"]], [r["final_return"] for r in by["torchrl"]]
        )
        out["speed_ours_over_torchrl"] = round(
            out["torchrl"]["median_seconds"] / out["ours"]["median_seconds"], 3)
    return out


def write(rows: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Rows, summary and ``benchmarks/run.py``'s metadata to ``--out``."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from run import metadata  # benchmarks/run.py, this script's sibling

    result = {**metadata(), "bench": "torchrl_tutorial", "script": Path(args.script).name,
              "torchrl_version": args.torchrl_version, "frames": args.frames,
              "cpus": os.cpu_count(), "runs": rows, "summary": summary(rows)}
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    return result


def torchrl_version(path: str) -> str | None:
    """``torchrl``'s version in ``path`` (from its dist-info), without importing it."""
    found = sorted(Path(path).glob("torchrl-*.dist-info")) if path else []
    return found[0].name.split("-")[1].removesuffix(".dist") if found else None


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--script", required=True, help="TorchRL's coding_ppo.py")
    parser.add_argument("--torchrl-path", default="", help="folder holding torchrl")
    parser.add_argument("--extra-path", default="", help="added to PYTHONPATH on both sides")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--sides", default=",".join(SIDES))
    parser.add_argument("--frames", type=int, default=50_000)
    parser.add_argument("--nice", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per run")
    parser.add_argument("--log-dir", default="", help="each run's stderr, one file a run")
    parser.add_argument("--out", default=str(OUT))
    parser.add_argument("--resume", action="store_true", help="keep --out's rows, skip them")
    parser.add_argument("--no-bytecode", dest="bytecode", action="store_false",
                        help="keep PYTHONDONTWRITEBYTECODE (every run compiles its imports)")
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    return parser.parse_args()


def main() -> None:
    args = parse()
    if args.one:
        print(json.dumps(run_one(args.script, args.side, args.seed, args.frames)))
        return
    if args.warm:
        warm_imports(args.script, args.side)
        return
    args.torchrl_version = torchrl_version(args.torchrl_path)
    if args.log_dir:
        Path(args.log_dir).mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    if args.resume and Path(args.out).exists():
        rows = json.loads(Path(args.out).read_text())["runs"]
    done = {(r["side"], r["seed"]) for r in rows}
    warmed: set[str] = set()
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for side in args.sides.split(","):
            if (side, seed) in done:
                continue
            if args.bytecode and side not in warmed:
                warm(side, args)
                warmed.add(side)
            rows.append(spawn(side, seed, args))
            write(rows, args)
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps(write(rows, args)["summary"], indent=2))


if __name__ == "__main__":
    main()
