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
    uv run benchmarks/bench_logging.py --rounds 2 --total-frames 20480    # a quick look

Prints one JSON object (the load average before and after, the per-run seconds, the
ratios). A ratio measured on a loaded machine is not a record: run it on an idle one.
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


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--total-frames", type=int, default=200_000)
    parser.add_argument("--calls-only", action="store_true",
                        help="only the per-call cost (no example runs, no start-ups)")
    args = parser.parse_args()
    if args.calls_only:
        with tempfile.TemporaryDirectory() as tmp:
            calls = {k: per_call_seconds(k, tmp) for k in ("csv", "tensorboard")}
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
        calls = {k: per_call_seconds(k, tmp) for k in ("csv", "tensorboard")}
    base = statistics.median(seconds["none"])
    batches = args.total_frames / 512  # ppo_cartpole: 16 envs x 32 steps a batch
    result = {
        "total_frames": args.total_frames, "rounds": args.rounds,
        "load_avg_1min_before": round(load_before, 2),
        "load_avg_1min_after": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(), "seconds": seconds,
        "ratio_csv": round(statistics.median(seconds["csv"]) / base, 4),
        "ratio_tensorboard": round(statistics.median(seconds["tensorboard"]) / base, 4),
        "per_call_us": {k: round(v * 1e6, 2) for k, v in calls.items()},
        "estimated_fraction": {k: round(7 * v * batches / base, 5) for k, v in calls.items()},
        "wandb_startup_seconds": round(wandb, 2),
        "mlflow_first_run_startup_seconds": round(mlflow, 2),
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
