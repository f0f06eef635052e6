"""Running the example trainers for ``results_examples.py``: each (example, seed) run in a
fresh process with one torch thread, ``jobs`` at a time, the 1-minute load sampled while they
go, and each finished run turned into its record (final line, frames to target, the logged
series thinned, the machine). The standard library alone at import (TensorBoard's reader is
imported when a run is read).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from results_records import CURVE_POINTS, code_fingerprint, dump_records
from results_registry import HEALTH_RUNS, HEALTH_VARIANTS

LOAD_POLL = 5.0  # seconds between two samples of the load while runs are going


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


def thin(points: list[tuple[int, float]], keep: int = CURVE_POINTS) -> list[list[float]]:
    """``keep`` points of a series spread evenly over it, the first and the last included."""
    if len(points) <= keep:
        chosen = points
    else:
        chosen = [points[round(i * (len(points) - 1) / (keep - 1))] for i in range(keep)]
    return [[int(step), round(float(value), 6)] for step, value in chosen]


def logged_series(logdir: Path) -> dict[str, list[list[float]]]:
    """Every scalar the example logged (``charts/*``, ``losses/*``), thinned:
    ``tag -> [[frames, value], ...]``.

    ``charts/episodic_return`` is the learning curve the results page draws; the ``losses/*``
    series are the diagnostics the "Is my run healthy?" page quotes.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: thin([(e.step, e.value) for e in events.Scalars(tag)])
            for tag in sorted(events.Tags()["scalars"]) if tag != "charts/SPS"}


class Run:
    """One example run under way: its child process, scratch directory and load samples
    (a plain class: the docs test loads the script without registering it as a module)."""

    def __init__(self, name: str, seed: int, extra: list[str], timeout: float,
                 examples_dir: Path, threshold: float) -> None:
        self.name, self.seed, self.extra = name, seed, extra
        self.script, self.threshold = examples_dir / f"{name}.py", threshold
        self.deadline = time.monotonic() + timeout
        # the fingerprint of the code started (an edit while it runs does not count)
        self.code = code_fingerprint(name, examples_dir)
        self.tmp = tempfile.TemporaryDirectory(prefix=f"rl-results-{name}-")
        self.started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        self.load_before = self.load_max = os.getloadavg()[0]
        self.proc: subprocess.Popen | None = None

    @property
    def logdir(self) -> Path:
        return Path(self.tmp.name) / "tb"


def start_run(name: str, seed: int, extra: list[str], timeout: float, *, examples_dir: Path,
              threshold: float) -> Run:
    """Start ``<examples_dir>/<name>.py --seed K`` in a fresh process with one torch thread (its
    output to files in its scratch directory: no pipe to drain while others run); its record
    will say whether it reached ``threshold``."""
    run = Run(name, seed, extra, timeout, examples_dir, threshold)
    cmd = [sys.executable, str(run.script), "--seed", str(seed),
           "--logdir", str(run.logdir), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    where = Path(run.tmp.name)
    with open(where / "stdout", "w") as out, open(where / "stderr", "w") as err:
        run.proc = subprocess.Popen(cmd, cwd=where, stdout=out, stderr=err, text=True, env=env)
    return run


def finish_run(run: Run) -> dict:
    """The finished run's record for the page (its scratch directory removed).

    Raises:
        RuntimeError: the run exited with an error or ran past its timeout.
    """
    try:
        if run.proc.returncode != 0:
            err = (Path(run.tmp.name) / "stderr").read_text()
            raise RuntimeError(f"{run.name} seed {run.seed} failed "
                               f"({run.proc.returncode}):\n{err[-3000:]}")
        stdout = (Path(run.tmp.name) / "stdout").read_text()
        result = json.loads(stdout.strip().splitlines()[-1])
        reached = frames_to_threshold(run.logdir, run.threshold)
        series = logged_series(run.logdir)
    finally:
        run.tmp.cleanup()
    shown = ["python", f"examples/{run.name}.py", "--seed", str(run.seed), *run.extra]
    return {"example": run.name, "seed": run.seed, "code": run.code,
            "args": run.extra, "command": " ".join(shown), "started": run.started,
            "load_avg_1min_before": round(run.load_before, 2),
            "load_avg_1min_max": round(run.load_max, 2), "frames_to_threshold": reached,
            "machine": machine(), **result, "series": series}


def run_many(pairs: list[tuple], extra: list[str], timeout: float, jobs: int,
             on_record: Callable[[dict], None], *, examples: dict[str, dict],
             examples_dir: Path, load_poll: float = LOAD_POLL) -> list[str]:
    """Run the (example, seed) pairs, ``jobs`` at a time; ``on_record`` gets each finished
    run's record, in this process only (one writer of the page). While waiting, the
    1-minute load is sampled every ``load_poll`` s into each running run's highest load.
    ``examples`` gives each example's target, ``examples_dir`` its script. A pair may carry
    a third element, its own options (after ``extra``): ``results_offline.py``'s losses.

    Returns:
        The failures (one message per failed run); the other runs go on regardless.
    """
    todo, running, failures = list(pairs), [], []
    try:
        while todo or running:
            while todo and len(running) < jobs:
                name, seed, *own = todo.pop(0)
                args = [*extra, *(own[0] if own else [])]
                print(f"running {name} seed {seed} {' '.join(args)}...", flush=True)
                running.append(start_run(name, seed, args, timeout, examples_dir=examples_dir,
                                         threshold=examples[name]["threshold"]))
            time.sleep(min(load_poll, max(0.05, min(r.deadline for r in running)
                                          - time.monotonic())))
            load = os.getloadavg()[0]
            for run in list(running):
                run.load_max = max(run.load_max, load)
                if run.proc.poll() is None and time.monotonic() > run.deadline:
                    run.proc.kill()
                    run.proc.wait()
                    running.remove(run)
                    run.tmp.cleanup()
                    failures.append(f"{run.name} seed {run.seed}: over its {timeout:g} s timeout")
                elif run.proc.poll() is not None:
                    running.remove(run)
                    try:
                        on_record(finish_run(run))
                    except (RuntimeError, ValueError, IndexError) as exc:
                        failures.append(str(exc))
    finally:
        for run in running:  # interrupted: no child outlives the script
            run.proc.kill()
            run.proc.wait()
            run.tmp.cleanup()
    return failures


def run_one(name: str, seed: int, extra: list[str], timeout: float, *,
            examples: dict[str, dict], examples_dir: Path) -> dict:
    """One example run in a fresh process; its record for the page (``run_many``'s arguments).

    Raises:
        RuntimeError: the run failed or ran past ``timeout``.
    """
    records: list[dict] = []
    failures = run_many([(name, seed)], extra, timeout, 1, records.append, examples=examples,
                        examples_dir=examples_dir)
    if failures:
        raise RuntimeError(failures[0])
    return records[0]


def run_health_variants(names: list[str], timeout: float, *, examples: dict[str, dict],
                        examples_dir: Path) -> None:
    """Run the ``HEALTH_VARIANTS`` (seed 0) and keep their records in ``HEALTH_RUNS``."""
    records = json.loads(HEALTH_RUNS.read_text()) if HEALTH_RUNS.exists() else []
    for name in names:
        example, extra = HEALTH_VARIANTS[name]
        print(f"running {name} ({example} {' '.join(extra)}) ...", flush=True)
        record = {**run_one(example, 0, extra, timeout, examples=examples,
                            examples_dir=examples_dir),
                  "example": name, "variant_of": example}
        records = [r for r in records if r["example"] != name] + [record]
        HEALTH_RUNS.write_text(dump_records(records) + "\n")  # after every run: nothing lost


def machine() -> str:
    """The CPU, its count, the system and Python a run's record names."""
    from run import cpu_model  # benchmarks/run.py, this module's sibling

    return (f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")

