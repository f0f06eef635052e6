"""The PPO CartPole run's ``collect`` + ``advantage`` phases: this checkout against another.

Issue 42's target: the two phases of ``examples/ppo_cartpole.py`` (the run report's phase
table) 25% cheaper than at the commit before the rollout-core rework. Both checkouts run
their own ``examples/ppo_cartpole.py`` over their own packages (``PYTHONPATH`` puts the
other checkout's ``packages/*/src`` ahead of this venv's editable installs), alternately,
``--rounds`` times each; the ratio is ours over theirs, per round (median) and summed.
Make the other checkout with ``git worktree add /tmp/base42 <sha>``::

    uv run python benchmarks/bench_rollout_ab.py --other /tmp/base42 --rounds 5

Prints the seconds of each phase per run and ``collect+advantage ratio: R`` (below 1: this
checkout is faster; the target is <= 0.75), then ``whole-process ratio``: the runs' wall
clock with imports and construction, where a side may pay what the phases do not show (the
commit before issue 42 loaded numba's GAE kernel in ``GAE(...)``: 1.2 s, outside both
phases). Run it on an idle machine: the phases are a few
seconds each and a busy core shows up in them.

``--floor`` times the same two phases against their floor instead: the plain loop a CleanRL
script would write (``rollout_floor.py``: the same gymnasium vector env, the same actor and
critic networks and sampling, tensors preallocated ``[T, N]`` and written in place, a partial
reset of the finished sub-envs, GAE as a reversed loop), beside this checkout's
``Collector`` + ``GAE`` and, with ``--other``, the other checkout's. Each side runs in its own
process, the sides alternate, ``--rounds`` times; a side builds the example's env and agent
(fixed weights, no training) and times ``--frames`` frames after one warm-up batch::

    uv run python benchmarks/bench_rollout_ab.py --floor --other /tmp/base42 --rounds 5

Prints ``collector X s, plain floor Y s`` per round and the medians.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import rollout_floor

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("collect", "advantage")
ROW = re.compile(r"^\s+(\w+)\s+([0-9.]+) s\s")


def run_once(checkout: Path, frames: int) -> dict[str, float]:
    """One run of ``checkout``'s PPO CartPole example: its phase seconds, and under
    ``"process"`` the wall clock of the whole process (imports and construction included:
    a side that loads a kernel while building its estimator pays it there, not in a
    phase)."""
    env = dict(os.environ)
    if checkout != ROOT:
        srcs = sorted(str(p) for p in (checkout / "packages").glob("*/src"))
        env["PYTHONPATH"] = os.pathsep.join(srcs)
    cmd = [sys.executable, str(checkout / "examples" / "ppo_cartpole.py"),
           "--total-frames", str(frames), "--no-check-finite"]
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600,
                         check=True, cwd=checkout).stdout
    phases = {"process": time.perf_counter() - start}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            phases[m.group(1)] = float(m.group(2))
    missing = [p for p in PHASES if p not in phases]
    if missing:
        raise RuntimeError(f"{checkout}: no {missing} row in the run report:\n{out[-2000:]}")
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--other", type=Path, help="the other checkout")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--frames", type=int, default=50_000, help="frames per run")
    parser.add_argument("--floor", action="store_true",
                        help="time the collector against the plain loop (rollout_floor.py)")
    args = parser.parse_args()
    other = None if args.other is None else args.other.resolve()
    if other is not None and not (other / "examples" / "ppo_cartpole.py").is_file():
        raise SystemExit(f"--other: expected a checkout of this repository, got {other}")
    if args.floor:
        rollout_floor.compare(ROOT, other, args.rounds, args.frames)
        return
    if other is None:
        raise SystemExit("--other: required without --floor (the checkout to compare with)")
    ours_total, theirs_total, ratios, process_ratios = 0.0, 0.0, [], []
    for r in range(args.rounds):
        pair, process = {}, {}
        for name, checkout in (("this", ROOT), ("other", other))[:: 1 if r % 2 == 0 else -1]:
            phases = run_once(checkout, args.frames)
            pair[name] = sum(phases[p] for p in PHASES)
            process[name] = phases["process"]
            shown = " ".join(f"{p} {phases[p]:.3f} s" for p in (*PHASES, "process"))
            print(f"round {r}: {name:5s} {shown}", flush=True)
        ours_total += pair["this"]
        theirs_total += pair["other"]
        ratios.append(pair["this"] / pair["other"])
        process_ratios.append(process["this"] / process["other"])
    print(f"per-round ratios: {' '.join(f'{x:.3f}' for x in ratios)}")
    print(f"collect+advantage ratio: {statistics.median(ratios):.3f} (median of rounds; "
          f"summed {ours_total / theirs_total:.3f}; target <= 0.75)")
    print(f"whole-process ratio: {statistics.median(process_ratios):.3f} (median of rounds; "
          "imports and construction included)")


if __name__ == "__main__":
    main()
