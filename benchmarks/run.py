"""Run the side-by-side benchmarks and print one table of figures and ratios.

Usage::

    uv run python benchmarks/run.py                 # every bench_*.py with a run()
    uv run python benchmarks/run.py envs collectors  # bench_envs.py, bench_collectors.py
    uv run python benchmarks/run.py --merge replay   # re-run one, keep the others' rows

Each ``bench_<name>.py`` exposes ``run() -> list[dict]``; a row holds ``figure``,
``value``, ``unit``, ``limit`` (the reference measured in the same run, or the target)
and ``ratio`` (its direction is stated in the figure's name). The rows are printed as
one table and written to ``benchmarks/results/latest.json`` with the machine's details,
the versions of Python, torch, tensordict, gymnasium, numpy and each rl-* package, the
command line and the git commit; the docs quote that file through
``tools/mkdocs_hooks/bench_tables.py``. Without ``--merge`` the file holds exactly the
benches of this run; with it, the named benches' rows replace theirs in the existing file,
the other rows are kept, and each bench run this way records its own metadata under
``"benches"`` (the docs stamp its table with it).

A ``bench_<name>.py`` without ``run()`` is a script of its own (:data:`STANDALONE` says
why: whole training runs, a GPU, flags that size an hour-long record) that writes its own
results file; this runner lists those it leaves out and refuses them by name.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "latest.json"
THIRD_PARTY = ("torch", "tensordict", "gymnasium", "numpy")
OURS = (
    "rl_profiling",
    "rl_envs",
    "rl_collectors",
    "rl_replay",
    "rl_objectives",
    "rl_recurrent",
    "rl_modules",
)


STANDALONE = {
    "compile_runs": "whole training runs, eager against --compile, in fresh processes (hours "
    "at the examples' budgets); writes results/compile_runs.json",
    "cql_floor": "one CQL gradient step at HalfCheetah's sizes against the floor of its "
    "matrix products (a minute); prints one JSON object, --out writes it",
    "crossq": "one CrossQ gradient step at sb3-contrib's sizes, ours and plain torch, two "
    "critic widths (minutes); writes results/crossq_step.json",
    "finite_check": "ppo_cartpole runs with and without the NaN guard, in fresh processes; "
    "prints one JSON object",
    "gpu": "needs a CUDA GPU (tools/gpu/run_check.py runs it on a lent machine); writes "
    "results/gpu.json",
    "logging": "ppo_cartpole runs per logger, in fresh processes, plus W&B and MLflow "
    "start-ups; writes results/logging.json",
    "minari_load": "writes a 1M-transition dataset first (--transitions sizes it); prints "
    "one JSON object",
    "offpolicy_loop": "one-frame batches (collector + replay extend) against the plain "
    "gymnasium loop storing into numpy arrays, interleaved rounds (a minute); prints one JSON "
    "object",
    "rollout_ab": "two checkouts' ppo_cartpole runs, alternately, in fresh processes; needs "
    "the other checkout (--other, a git worktree)",
    "update": "compiles eight update steps (minutes; --rounds/--calls size the record); "
    "prints one JSON object",
}
"""The benches without ``run()``: name -> why ``run.py`` does not run them (run each
directly: ``uv run python benchmarks/bench_<name>.py --help``)."""


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # spawned workers can re-import it by name
    spec.loader.exec_module(module)
    return module


def _select(names: list[str]) -> list[Path]:
    """The benches to run: ``names``, or every bench with a ``run()`` when none is named.

    Raises:
        SystemExit: a name is not a bench with a ``run()`` (a standalone one says how to
            run it), or a bench without ``run()`` is missing from :data:`STANDALONE`.
    """
    every = {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}
    found = {n: p for n, p in every.items() if n not in STANDALONE}
    silent = [n for n, p in found.items() if not _has_run(p)]
    if silent:
        raise SystemExit(f"benchmarks {silent} have no run(): give them one, or list them "
                         "in run.py's STANDALONE with the reason")
    for name in names:
        if name in STANDALONE and name in every:
            raise SystemExit(f"{name}: not run by run.py ({STANDALONE[name]}); run it "
                             f"directly: uv run python benchmarks/bench_{name}.py --help")
    unknown = [n for n in names if n not in found]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; expected some of {sorted(found)}")
    return [found[n] for n in names] if names else list(found.values())


def _has_run(path: Path) -> bool:
    """Whether the script defines a module-level ``run()`` (read, not imported)."""
    return re.search(r"^def run\(", path.read_text(), re.MULTILINE) is not None


def _left_out() -> str:
    """The line that says which benches a full run leaves out, and why."""
    return "not run here (standalone scripts, each with its own flags and results file): " + (
        "; ".join(f"{name} ({why})" for name, why in sorted(STANDALONE.items()))
    )


def versions() -> dict[str, str]:
    """Python, the third-party libraries and each rl-* package's ``__version__`` (or why not)."""
    found = {"python": platform.python_version()}
    for name in THIRD_PARTY:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    for module in OURS:
        try:
            found[module.replace("_", "-")] = importlib.import_module(module).__version__
        except ImportError:
            found[module.replace("_", "-")] = "not installed"
    return found


def _git(*args: str) -> str:
    out = subprocess.run(
        ["git", *args], cwd=HERE, capture_output=True, text=True, timeout=10, check=True
    )
    return out.stdout.strip()


def _git_commit() -> str | None:
    """The checkout's commit, with ``-dirty`` when files differ from it; None without git."""
    try:
        return _git("rev-parse", "--short=12", "HEAD") + (
            "-dirty" if _git("status", "--porcelain") else ""
        )
    except (OSError, subprocess.SubprocessError):
        return None


def cpu_model() -> str:
    """The CPU's model name and generation (``/proc/cpuinfo``): the VM behind a machine
    name changes between runs, and a figure's absolute value changes with it."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or platform.machine()
    name = fields.get("model name") or platform.machine()
    generation = [f"{k} {fields[k]}" for k in ("cpu family", "model") if k in fields]
    return f"{name} ({', '.join(generation)})" if generation else name


def metadata() -> dict:
    """What the docs stamp beside the figures: time, machine, versions, command, commit."""
    return {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
        },
        "versions": versions(),
        # the interpreter's own path says little; "python" + the arguments it was given
        "command": shlex.join(["python", *sys.orig_argv[1:]]),
        "argv": sys.orig_argv,
        "git_commit": _git_commit(),
    }


def _fmt(x: object) -> str:
    if isinstance(x, float):
        return f"{x:.4g}" if abs(x) < 1e5 else f"{x:,.0f}"
    return str(x)


def print_table(rows: list[dict]) -> None:
    """Print rows as an aligned table (bench, figure, value, unit, limit, ratio)."""
    cols = ["bench", "figure", "value", "unit", "limit", "ratio"]
    cells = [[_fmt(r.get(c, "")) for c in cols] for r in rows]
    widths = [
        max(len(c), *(len(row[i]) for row in cells)) if cells else len(c)
        for i, c in enumerate(cols)
    ]
    line = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
    print(line)
    print("-" * len(line))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def _merged(rows: list[dict], names: list[str]) -> dict:
    """The existing results with the rows of ``names`` replaced by ``rows``.

    The file's own metadata stays that of its last full run; each merged bench gets its
    metadata under ``"benches"``.
    """
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else {**metadata(), "rows": []}
    meta = metadata()
    kept = [r for r in old.get("rows", []) if r.get("bench") not in names]
    benches = {**old.get("benches", {}), **{name: meta for name in names}}
    return {**old, "benches": benches, "rows": kept + rows}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names", nargs="*", help="benchmark names (bench_<name>.py); all by default"
    )
    parser.add_argument("--merge", action="store_true",
                        help="keep the other benches' rows of the existing results file")
    args = parser.parse_args(argv)
    if args.merge and not args.names:
        parser.error("--merge: name the benches to re-run")
    sys.path.insert(0, str(HERE))
    rows, failures = [], []
    if not args.names:
        print(_left_out(), file=sys.stderr, flush=True)
    for path in _select(args.names):
        name = path.stem.removeprefix("bench_")
        start = time.perf_counter()
        try:
            for row in _load(path).run():
                rows.append({"bench": name, **row})
        except Exception:  # a broken benchmark is reported, the others still run
            failures.append(name)
            traceback.print_exc()
        print(f"[{name}] done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    print_table(rows)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            _merged(rows, args.names) if args.merge else {**metadata(), "rows": rows}, indent=2
        )
    )
    print(f"\nwrote {RESULTS.relative_to(HERE.parent)}")
    if failures:
        print(f"failed: {failures}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
