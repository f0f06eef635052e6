"""What logging costs the main job (issue 39): ``examples/ppo_cartpole.py`` run with no
logger, with the CSV logger and with the TensorBoard logger, each logging every batch
(the example logs 7 scalars a batch: ``charts/episodic_return``, ``charts/SPS`` and five
``losses/...``), runs interleaved round by round so that a change of load hits every
variant alike. Figures: each logger's median wall clock (the example's own ``seconds``,
training loop only) over the no-logger median; target <= 1.02. Beside them, apart: W&B's
start-up (``WandbLogger`` built offline and closed, in a fresh process, which starts and
stops W&B's service process) and MLflow's (the first run in a new SQLite store, which
creates the tables). And, robust to a loaded machine: the cost of one ``log_scalar`` call
of each logger (10,000 calls in this process, flushes included) times the example's 7
scalars a batch, over the no-logger seconds per batch.

    uv run benchmarks/bench_logging.py --rounds 5 --total-frames 200000   # the record
    uv run benchmarks/bench_logging.py --rounds 2 --total-frames 20480 --out ''  # a quick look

Prints, per logger, the wall-clock ratio (median of the logger's runs over the no-logger
median) with its spread (each round's own ratio, the logger's run over that round's
no-logger run: ``median [min, max]``) and the per-call estimate, then one JSON object (the
load average before and after, the per-run seconds, the ratios); writes that object with
the machine, versions, command and commit (``benchmarks/run.py``'s ``metadata()``) to
``--out`` (default ``benchmarks/results/logging.json``; empty: not written). A ratio
measured on a loaded machine is not a record: run it on an idle one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "logging.json"
LOGGERS = ("csv", "tensorboard")
VARIANTS = {"none": [], "csv": ["--logger", "csv"], "tensorboard": ["--logger", "tensorboard"]}


def run_example(args: list[str], logdir: str | None, total_frames: int) -> float:
    cmd = [sys.executable, str(ROOT / "examples/ppo_cartpole.py"),
           "--total-frames", str(total_frames), *args]
    if logdir is not None:
        cmd += ["--logdir", logdir]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=3600)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def startup(code: str) -> float:
    """Seconds of ``code`` in a fresh process, minus the same process doing nothing."""
    def timed(snippet: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", snippet], check=True, timeout=600,
                       env={**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"},
                       capture_output=True)
        return time.perf_counter() - start
    return timed(code) - timed("import rl_record")


def per_call_seconds(kind: str, tmp: str, calls: int = 10_000) -> float:
    """Seconds of one ``log_scalar`` (the logger's flushes and close included)."""
    from rl_record import get_logger

    logger = get_logger(kind, tmp, f"calls-{kind}")
    start = time.perf_counter()
    for i in range(calls):
        logger.log_scalar("losses/loss_critic", 0.5 + i, step=i)
    logger.close()
    return (time.perf_counter() - start) / calls


def spread(values: list[float]) -> str:
    """``median [min, max]``."""
    return f"{statistics.median(values):.4f} [{min(values):.4f}, {max(values):.4f}]"


def ratios(seconds: dict[str, list[float]], calls: dict[str, float], total_frames: int) -> dict:
    """Each logger's wall-clock ratio to the no-logger runs, its spread over the rounds and
    the per-call estimate (7 scalars a batch x the per-call cost over the no-logger time)."""
    base = statistics.median(seconds["none"])
    batches = total_frames / 512  # ppo_cartpole: 16 envs x 32 steps a batch
    out = {}
    for kind in LOGGERS:
        rounds = [a / b for a, b in zip(seconds[kind], seconds["none"], strict=True)]
        out[kind] = {
            "ratio": round(statistics.median(seconds[kind]) / base, 4),
            "round_ratios": [round(r, 4) for r in rounds],
            "round_ratio_median": round(statistics.median(rounds), 4),
            "round_ratio_min": round(min(rounds), 4),
            "round_ratio_max": round(max(rounds), 4),
            "per_call_us": round(calls[kind] * 1e6, 2),
            "estimated_fraction": round(7 * calls[kind] * batches / base, 5),
        }
    return out


def report(result: dict) -> None:
    """The figures, one line per logger, before the JSON line."""
    none = result["seconds"]["none"]
    print(f"no logger: {spread(none)} s over {result['rounds']} rounds, "
          f"{result['total_frames']:,} frames; load {result['load_avg_1min_before']} -> "
          f"{result['load_avg_1min_after']} on {result['cpus']} CPUs")
    for kind in LOGGERS:
        r = result["loggers"][kind]
        print(f"{kind}: wall-clock ratio {r['ratio']:.4f} (per round "
              f"{spread(r['round_ratios'])}; target <= 1.02), per call {r['per_call_us']} us, "
              f"estimated {100 * r['estimated_fraction']:.3f}% of the main job")
    print(f"W&B offline start-up {result['wandb_startup_seconds']} s, MLflow's first run "
          f"{result['mlflow_first_run_startup_seconds']} s")


def write(result: dict, out: str) -> None:
    """``result`` with ``benchmarks/run.py``'s metadata, to ``out`` (nothing when empty)."""
    if not out:
        return
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from run import metadata  # benchmarks/run.py, this script's sibling

    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**metadata(), "bench": "logging", **result}, indent=2) + "\n")
    print(f"wrote {path}", file=sys.stderr)


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--total-frames", type=int, default=200_000)
    parser.add_argument("--out", default=str(OUT), help="results JSON ('' : none)")
    parser.add_argument("--calls-only", action="store_true",
                        help="only the per-call cost (no example runs, no start-ups)")
    args = parser.parse_args()
    if args.calls_only:
        with tempfile.TemporaryDirectory() as tmp:
            calls = {k: per_call_seconds(k, tmp) for k in LOGGERS}
        result = {"per_call_us": {k: round(v * 1e6, 2) for k, v in calls.items()},
                  "load_avg_1min": round(os.getloadavg()[0], 2)}
        print(json.dumps(result))
        return result
    seconds: dict[str, list[float]] = {name: [] for name in VARIANTS}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name, flags in VARIANTS.items():
                logdir = None if name == "none" else f"{tmp}/{name}-{r}"
                seconds[name].append(run_example(flags, logdir, args.total_frames))
        wandb = startup(
            "from rl_record import WandbLogger\n"
            f"WandbLogger('startup', offline=True, save_dir={tmp!r}).close()")
        mlflow = startup(f"from rl_record import MLFlowLogger\nMLFlowLogger('startup', "
                         f"{tmp + '/mlflow'!r}).close()")
        calls = {k: per_call_seconds(k, tmp) for k in LOGGERS}
    result = {
        "total_frames": args.total_frames, "rounds": args.rounds,
        "load_avg_1min_before": round(load_before, 2),
        "load_avg_1min_after": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(), "seconds": seconds,
        "loggers": ratios(seconds, calls, args.total_frames),
        "wandb_startup_seconds": round(wandb, 2),
        "mlflow_first_run_startup_seconds": round(mlflow, 2),
    }
    report(result)
    print(json.dumps(result))
    write(result, args.out)
    return result


if __name__ == "__main__":
    main()
