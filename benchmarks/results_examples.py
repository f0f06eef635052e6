"""Run the example trainers for several seeds and write ``docs/results.md`` from what they print.

    uv run python benchmarks/results_examples.py                      # 3 seeds of every example
    uv run python benchmarks/results_examples.py --seeds 1 dqn_prioritized
    uv run python benchmarks/results_examples.py --render-only        # rewrite the page only
    uv run python benchmarks/results_examples.py --health             # the health page's short runs

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
current code reaches, and lists the examples it has no run of). The last runs of an example
with no run of its current code are kept apart (``SUPERSEDED_MARK``), in their own table,
because other pages quote them through the hook, which says they ran earlier code. Only
measured figures go into the table; the published figures beside them are quoted from the
cited pages.

Each record also keeps every scalar series the run logged (``charts/episodic_return`` and
the ``losses/*`` diagnostics), thinned to ``CURVE_POINTS`` points. From the returns the
page's learning curves are drawn, one hand-written SVG per example under
``docs/assets/curves/`` (median and [min, max] over the seeds, no plotting dependency);
the diagnostics are quoted by ``docs/health.md`` through the build hook
``tools/mkdocs_hooks/example_results.py``. ``--health`` runs ``HEALTH_VARIANTS`` instead:
short runs with one setting made wrong on purpose (and the same examples' short runs with
their defaults), kept in ``benchmarks/results/health_runs.json``.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "results.md"
# where the example scripts are read from; --examples-dir points elsewhere, e.g. at
# `git archive HEAD examples | tar -x -C DIR`, to run the committed examples while the
# working tree holds someone's unfinished edit of them (the fingerprint follows the file run)
EXAMPLES_DIR = ROOT / "examples"
RUNS_MARK = "<!-- runs:"
# the last runs of an example whose code has changed since, kept (apart, marked) while the
# example has no run of its current code, because other pages quote them through the hook
SUPERSEDED_MARK = "<!-- superseded runs:"

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
        "published": "CleanRL `sac_continuous_action.py` has nearly the same defaults; its "
                     "HalfCheetah curves: "
                     "[CleanRL SAC docs](https://docs.cleanrl.dev/rl-algorithms/sac/)",
    },
    "td3_mujoco": {
        "task": "HalfCheetah-v5", "threshold": 3000.0, "budget": 100_000,
        "published": "RL-Zoo's `TD3` (the same settings but 400x300 networks), 1M steps: "
                     "[sb3/td3-HalfCheetah-v3](https://huggingface.co/sb3/td3-HalfCheetah-v3)",
    },
    "crossq_mujoco": {
        "task": "HalfCheetah-v5", "threshold": 100.0, "budget": 30_000,
        # the budget and the target, said on the page (figures from the bench's file)
        "budget_from": "crossq_step.json",
        "budget_why": "about an hour a seed. One gradient step per frame at sb3-contrib's "
                      "sizes (critics {critic_width} wide, batch {batch}) took {ours_ms} ms "
                      "of CPU time here (`benchmarks/bench_crossq.py`, {started}, 1-minute "
                      "load {load_start} to {load_end} on 2 CPUs; the same math in plain torch "
                      "{plain_ms} ms), so 30,000 frames take {hours_budget} hours at that load, "
                      "less on an idle machine; 100,000 (SAC's and TD3's budget) would take "
                      "{hours_100k} hours. The target, 100, is above "
                      "what our SAC's recorded runs reached at 30,000 frames: {rival}; the "
                      "issue asks CrossQ to beat SAC at CrossQ's budget.",
        "rival": "sac_mujoco",
        "published": "sb3-contrib's `CrossQ` on six MuJoCo tasks (its docs' results plot): "
                     "[sb3-contrib CrossQ docs](https://sb3-contrib.readthedocs.io/en/master/"
                     "modules/crossq.html#results)",
    },
    "ppo_atari": {
        "task": "ALE/Breakout-v5", "threshold": 10.0, "budget": 2_000_000,
        "published": "CleanRL `ppo_atari.py` has the same defaults; its Breakout curves (10M "
                     "frames): [CleanRL PPO docs](https://docs.cleanrl.dev/rl-algorithms/ppo/)",
    },
}


# the examples that take about an hour or more per seed on the 2-core development machine
# (its MuJoCo seeds took 867-1,825 s for PPO Hopper and 1,595-3,555 s for SAC HalfCheetah,
# one core each; ppo_atari ran at 74 frames/s there, so its 2M frames would take hours):
# they are re-recorded only when that machine has the time, and the page says so when
# they lack a run of the current code
LONG_EXAMPLES = ("ppo_mujoco", "sac_mujoco", "td3_mujoco", "crossq_mujoco", "ppo_atari")


# Short runs with one setting made wrong on purpose, beside a short run of the same example
# with its defaults, for the "Is my run healthy?" page (docs/health.md): name -> (example,
# extra options). One seed each (ppo_cartpole: 51,200 frames, 100 batches; dqn_prioritized:
# 100,000 frames, its schedules compressed to that budget; sac_pendulum: 10,000 frames, its
# SAC diagnostics), recorded in HEALTH_RUNS by
# ``--health``; the page quotes their logged series through ``<!-- example-series: NAME TAG -->``.
HEALTH_RUNS = ROOT / "benchmarks" / "results" / "health_runs.json"
HEALTH_VARIANTS: dict[str, tuple[str, list[str]]] = {
    "ppo_cartpole_short": ("ppo_cartpole", ["--total-frames", "51200"]),
    "ppo_cartpole_lr_high": ("ppo_cartpole", ["--total-frames", "51200", "--lr", "0.03"]),
    "ppo_cartpole_critic_swamp": ("ppo_cartpole",
                                  ["--total-frames", "51200", "--critic-coef", "500"]),
    "ppo_cartpole_lr_extreme": ("ppo_cartpole", ["--total-frames", "51200", "--lr", "0.3"]),
    "dqn_prioritized_short": ("dqn_prioritized", ["--total-frames", "100000"]),
    "dqn_prioritized_alpha_high": ("dqn_prioritized", ["--total-frames", "100000", "--alpha", "3"]),
    "sac_pendulum_short": ("sac_pendulum", ["--total-frames", "10000"]),
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


CURVE_POINTS = 60  # a record keeps at most this many points of each logged series


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


def _code_dump(path: Path) -> tuple[str, ast.Module]:
    """``path``'s syntax tree without docstrings, dumped (and the tree)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree), tree


def sibling_imports(tree: ast.Module) -> list[str]:
    """Example modules beside this one that ``tree`` imports (``from sac_pendulum import``)."""
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    return sorted({m for m in names if (EXAMPLES_DIR / f"{m}.py").is_file()})


def code_fingerprint(name: str) -> str:
    """Hash of ``examples/<name>.py``'s syntax tree without docstrings (comments never reach it),
    and of the sibling example modules it imports, recursively (``sac_mujoco.py`` runs
    ``sac_pendulum.py``).

    Any change to what the example runs (a ``Config`` default, a network, the loop, an
    imported sibling) changes it; editing a docstring or a comment does not. An example
    that imports no sibling keeps the hash of its own tree alone.
    """
    dumps, todo, seen = [], [name], set()
    while todo:
        module = todo.pop(0)
        if module in seen:
            continue
        seen.add(module)
        dump, tree = _code_dump(EXAMPLES_DIR / f"{module}.py")
        dumps.append(dump)
        todo += sibling_imports(tree)
    return hashlib.sha256("\n".join(dumps).encode()).hexdigest()[:12]


def drop_stale(records: list[dict], extra: list[str]) -> list[dict]:
    """The records of the current code run with the same extra options (``extra``).

    A record without a code fingerprint (written before there were any) is stale too.
    """
    current = {name: code_fingerprint(name) for name in EXAMPLES}
    kept = [r for r in records
            if r.get("code") == current.get(r["example"]) and r.get("args", []) == extra]
    for r in records:
        if r not in kept:
            print(f"dropping the record of {r['example']} seed {r['seed']} ({r['started']}): code "
                  f"{r.get('code', 'unknown')} with options {r.get('args', [])}, now "
                  f"{current.get(r['example'])} with {extra}", file=sys.stderr)
    return kept


LOADED = 1.5  # a run whose highest 1-minute load exceeded this is marked "loaded" on the page
LOAD_POLL = 5.0  # seconds between two samples of the load while runs are going


class Run:
    """One example run under way: its child process, scratch directory and load samples
    (a plain class: the docs test loads this script without registering it as a module)."""

    def __init__(self, name: str, seed: int, extra: list[str], timeout: float) -> None:
        self.name, self.seed, self.extra = name, seed, extra
        self.deadline = time.monotonic() + timeout
        # the fingerprint of the code started (an edit while it runs does not count)
        self.code = code_fingerprint(name)
        self.tmp = tempfile.TemporaryDirectory(prefix=f"rl-results-{name}-")
        self.started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        self.load_before = self.load_max = os.getloadavg()[0]
        self.proc: subprocess.Popen | None = None

    @property
    def logdir(self) -> Path:
        return Path(self.tmp.name) / "tb"


def start_run(name: str, seed: int, extra: list[str], timeout: float) -> Run:
    """Start ``examples/<name>.py --seed K`` in a fresh process with one torch thread (its
    output to files in its scratch directory: no pipe to drain while others run)."""
    run = Run(name, seed, extra, timeout)
    cmd = [sys.executable, str(EXAMPLES_DIR / f"{name}.py"), "--seed", str(seed),
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
        reached = frames_to_threshold(run.logdir, EXAMPLES[run.name]["threshold"])
        series = logged_series(run.logdir)
    finally:
        run.tmp.cleanup()
    shown = ["python", f"examples/{run.name}.py", "--seed", str(run.seed), *run.extra]
    return {"example": run.name, "seed": run.seed, "code": run.code,
            "args": run.extra, "command": " ".join(shown), "started": run.started,
            "load_avg_1min_before": round(run.load_before, 2),
            "load_avg_1min_max": round(run.load_max, 2), "frames_to_threshold": reached,
            "machine": machine(), **result, "series": series}


def run_many(pairs: list[tuple[str, int]], extra: list[str], timeout: float, jobs: int,
             on_record: Callable[[dict], None]) -> list[str]:
    """Run the (example, seed) pairs, ``jobs`` at a time; ``on_record`` gets each finished
    run's record, in this process only (one writer of the page). While waiting, the
    1-minute load is sampled every ``LOAD_POLL`` s into each running run's highest load.

    Returns:
        The failures (one message per failed run); the other runs go on regardless.
    """
    todo, running, failures = list(pairs), [], []
    try:
        while todo or running:
            while todo and len(running) < jobs:
                name, seed = todo.pop(0)
                print(f"running {name} seed {seed} ...", flush=True)
                running.append(start_run(name, seed, extra, timeout))
            time.sleep(min(LOAD_POLL, max(0.05, min(r.deadline for r in running)
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


def run_one(name: str, seed: int, extra: list[str], timeout: float) -> dict:
    """One example run in a fresh process; its record for the page.

    Raises:
        RuntimeError: the run failed or ran past ``timeout``.
    """
    records: list[dict] = []
    failures = run_many([(name, seed)], extra, timeout, 1, records.append)
    if failures:
        raise RuntimeError(failures[0])
    return records[0]


def dump_records(records: list[dict]) -> str:
    """The records as JSON, one line per logged series (not one per number)."""
    texts = []
    for record in records:
        series = record.get("series")
        text = json.dumps({k: v for k, v in record.items() if k != "series"}, indent=1)
        if series is not None:
            rows = ",\n".join(f"  {json.dumps(tag)}: {json.dumps(points, separators=(',', ':'))}"
                              for tag, points in series.items())
            text = text[: -len("\n}")] + ',\n "series": {\n' + rows + "\n }\n}"
        texts.append(text)
    return "[\n" + ",\n".join(texts) + "\n]"


def run_health_variants(names: list[str], timeout: float) -> None:
    """Run the ``HEALTH_VARIANTS`` (seed 0) and keep their records in ``HEALTH_RUNS``."""
    records = json.loads(HEALTH_RUNS.read_text()) if HEALTH_RUNS.exists() else []
    for name in names:
        example, extra = HEALTH_VARIANTS[name]
        print(f"running {name} ({example} {' '.join(extra)}) ...", flush=True)
        record = {**run_one(example, 0, extra, timeout), "example": name, "variant_of": example}
        records = [r for r in records if r["example"] != name] + [record]
        HEALTH_RUNS.write_text(dump_records(records) + "\n")  # after every run: nothing lost


def machine() -> str:
    from run import cpu_model  # benchmarks/run.py, this script's sibling

    return (f"{cpu_model()}, {os.cpu_count()} logical CPUs, {platform.system()} "
            f"{platform.release()}, Python {platform.python_version()}")


def load_records(page: Path) -> list[dict]:
    if not page.exists():
        return []
    text = page.read_text()
    if RUNS_MARK not in text:
        return []
    block = text.split(RUNS_MARK, 1)[1].rsplit("-->", 1)[0]
    return json.loads(block)


def load_superseded(page: Path) -> list[dict]:
    """The runs of earlier code kept on ``page`` (see ``SUPERSEDED_MARK``)."""
    text = page.read_text() if page.exists() else ""
    if SUPERSEDED_MARK not in text:
        return []
    return json.loads(text.split(SUPERSEDED_MARK, 1)[1].split("-->", 1)[0])


def superseded_runs(stale: list[dict], current: list[dict]) -> list[dict]:
    """The newest stale run of each (example, seed) whose example has no current run."""
    covered = {r["example"] for r in current}
    newest: dict[tuple[str, int], dict] = {}
    for r in sorted(stale, key=lambda r: r["started"]):
        if r["example"] not in covered:
            newest[(r["example"], r["seed"])] = r
    return sorted(newest.values(), key=lambda r: (r["example"], r["seed"]))


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
    frames_cell = (spread([float(v) for v in reached], "{:,.0f}")
                   + f" ({len(reached)}/{len(known)} reached)")
    if not known:
        frames_cell = "not recorded (see below)"
    elif len(known) < len(runs):
        frames_cell += f"; not recorded for {len(runs) - len(known)} run(s), see below"
    final = spread([r["mean_return"] for r in runs], "{:.1f}")
    frames = spread([float(r["frames"]) for r in runs], "{:,.0f}")
    return (f"| `{name}.py` | {spec['task']} | ≥ {spec['threshold']:g} within {spec['budget']:,} | "
            f"{len(runs)} ({seeds}) | {frames} | {final} | {frames_cell} | "
            f"{spread([r['seconds'] for r in runs], '{:.0f}')} | "
            f"{spread([r['fps'] for r in runs], '{:,.0f}')} | {spec['published']} |")


RETURN_TAG = "charts/episodic_return"
SVG_W, SVG_H, PAD_L, PAD_R, PAD_T, PAD_B = 640, 300, 64, 16, 28, 44


def _at(curve: list[list[float]], x: float) -> float | None:
    """The curve's last logged value at or before frame ``x`` (None before its first point)."""
    value = None
    for frames, y in curve:
        if frames > x:
            break
        value = y
    return value


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]``."""
    raw = (hi - lo) / max(count, 1) or 1.0
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = step * (lo // step)
    return [first + i * step for i in range(int((hi - first) / step) + 2)
            if first + i * step <= hi + 1e-9]


def curve_svg(name: str, runs: list[dict]) -> str | None:
    """The learning curve of ``name`` as an SVG: median and [min, max] over the seeds.

    Each run's ``charts/episodic_return`` (kept thinned in its record) is read on a common
    grid of frames as the last value logged at or before each grid point; the band spans
    the seeds that had logged a return by then. None when no run kept its curve.
    """
    curves = [r["series"][RETURN_TAG] for r in runs if RETURN_TAG in r.get("series", {})]
    if not curves:
        return None
    spec, budget = EXAMPLES[name], max(c[-1][0] for c in curves)
    grid = [budget * i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]
    rows = []
    for x in grid:
        ys = [y for y in (_at(c, x) for c in curves) if y is not None]
        if ys:
            rows.append((x, statistics.median(ys), min(ys), max(ys)))
    lo = min([r[2] for r in rows] + [spec["threshold"]])
    hi = max([r[3] for r in rows] + [spec["threshold"]])
    yticks = _nice_ticks(lo, hi)
    lo, hi = min(lo, yticks[0]), max(hi, yticks[-1])
    plot_w, plot_h = SVG_W - PAD_L - PAD_R, SVG_H - PAD_T - PAD_B

    def px(x: float) -> float:
        return round(PAD_L + plot_w * x / budget, 1)

    def py(y: float) -> float:
        return round(PAD_T + plot_h * (1 - (y - lo) / ((hi - lo) or 1.0)), 1)

    band = ([f"{px(x)},{py(top)}" for x, _, _, top in rows]
            + [f"{px(x)},{py(bot)}" for x, _, bot, _ in reversed(rows)])
    median = " ".join(f"{px(x)},{py(m)}" for x, m, _, _ in rows)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SVG_W} {SVG_H}" width="100%" '
        f'style="max-width:{SVG_W}px" role="img" font-family="sans-serif" font-size="12">',
        f"<title>{name}: mean return of the last 20 episodes against frames, median and range over "
        f"{len(curves)} seed(s)</title>",
        f'<text x="{PAD_L}" y="16" font-size="13">{name}.py, {spec["task"]}: median and [min, max] '
        f"over {len(curves)} seed(s)</text>",
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#999"/>',
    ]
    for y in yticks:
        parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{py(y)}" y2="{py(y)}" '
                     f'stroke="#ddd"/><text x="{PAD_L - 6}" y="{py(y) + 4}" '
                     f'text-anchor="end">{y:g}</text>')
    for x in _nice_ticks(0, budget):
        parts.append(f'<text x="{px(x)}" y="{PAD_T + plot_h + 16}" '
                     f'text-anchor="middle">{x / 1000:g}k</text>')
    parts += [
        f'<text x="{PAD_L + plot_w / 2}" y="{SVG_H - 6}" text-anchor="middle">frames</text>',
        f'<text x="14" y="{PAD_T + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {PAD_T + plot_h / 2})">mean return (last 20 episodes)</text>',
        f'<polygon points="{" ".join(band)}" fill="#1f77b4" fill-opacity="0.2" stroke="none"/>',
        f'<polyline points="{median}" fill="none" stroke="#1f77b4" stroke-width="2"/>',
        f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{py(spec["threshold"])}" '
        f'y2="{py(spec["threshold"])}" stroke="#d62728" stroke-dasharray="6 4"/>',
        f'<text x="{PAD_L + plot_w - 4}" y="{py(spec["threshold"]) + 15}" text-anchor="end" '
        f'fill="#d62728">target {spec["threshold"]:g}</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def curves_section(by_name: dict[str, list[dict]], page: Path) -> list[str]:
    """Write each example's SVG next to the page; the Markdown that shows them."""
    lines = ["## Learning curves", "",
             "Drawn by `benchmarks/results_examples.py` from the runs recorded at the end of this "
             "page (the return logged after every batch, thinned to at most "
             f"{CURVE_POINTS} points per run): the line is the median over the seeds, the band "
             "their [min, max], the dashed line the example's target.", ""]
    without = []
    for name, runs in by_name.items():
        svg = curve_svg(name, runs)
        path = page.parent / "assets" / "curves" / f"{name}.svg"
        if svg is None:
            path.unlink(missing_ok=True)  # a curve of records dropped since would outlive them
            if runs:
                without.append(f"`{name}.py`")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg)
        kept = sum(RETURN_TAG in r.get("series", {}) for r in runs)
        note = ("" if kept == len(runs)
                else f" ({kept} of its {len(runs)} recorded runs kept their curve)")
        lines += ["![Learning curve of "
                  f"{name}.py]({path.relative_to(page.parent).as_posix()}){note}", ""]
    if without:
        lines += [f"No curve yet for {', '.join(without)}: their runs were recorded before the "
                  "script kept curves; `--rerun` them to draw one.", ""]
    return lines


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


def rival_at(name: str, frames: int, runs: list[dict]) -> str:
    """What example ``name``'s recorded curves (its current runs, else its last runs of
    earlier code) show at ``frames``: one value per seed, with the code that ran."""
    mine = [r for r in runs if r["example"] == name and RETURN_TAG in r.get("series", {})]
    current = [r for r in mine if r.get("code") == code_fingerprint(name)] or mine
    values = [(r["seed"], _at(r["series"][RETURN_TAG], frames), r["code"]) for r in current]
    shown = [f"seed {seed} {value:.1f} (code {code})" for seed, value, code in values
             if value is not None]
    return ", ".join(shown) or f"no recorded curve of `{name}.py`"


def budget_notes(runs: list[dict]) -> list[str]:
    """Why an example's budget is what it is, where its spec says (``"budget_why"``, its
    figures read from the bench file ``"budget_from"`` names, and from the curves of the
    ``"rival"`` example among ``runs`` at that budget)."""
    notes = []
    for name, spec in EXAMPLES.items():
        if "budget_why" not in spec:
            continue
        figures = step_cost(spec["budget_from"]) if "budget_from" in spec else {}
        if figures is not None and "per_frame_s" in figures:
            figures["hours_budget"] = f"{spec['budget'] * figures['per_frame_s'] / 3600:.1f}"
        if figures is not None and "rival" in spec:
            figures["rival"] = rival_at(spec["rival"], spec["budget"], runs)
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
    if "note" in record:
        return "not recorded"
    return ("not reached" if record["frames_to_threshold"] is None
            else f"{record['frames_to_threshold']:,}")


def peers_section() -> list[str]:
    """The race against Stable-Baselines3 (``compare_peers.py``), quoted from its results file."""
    from peers_docs import section_from_file  # benchmarks/peers_docs.py, this script's sibling

    section = section_from_file()
    return [section, ""] if section else []


def render(records: list[dict], argv: list[str], page: Path | None = None,
           superseded: list[dict] | None = None) -> str:
    by_name = {name: sorted((r for r in records if r["example"] == name), key=lambda r: r["seed"])
               for name in EXAMPLES}
    header = ("| Example | Task | Target (mean of last 20 episodes) | Runs (seeds) | Frames | "
              "Final return | Frames to target | Wall time (s) | Frames/s | Published |\n"
              "|---|---|---|---|---|---|---|---|---|---|")
    rows = [example_row(name, runs) for name, runs in by_name.items() if runs]
    missing = [f"`{name}.py`" for name, runs in by_name.items() if not runs]
    dates = sorted(r["started"] for r in records)
    loads = [r["load_avg_1min_before"] for r in records]
    peaks = [r["load_avg_1min_max"] for r in records if "load_avg_1min_max" in r]
    machines = sorted({r["machine"] for r in records if "machine" in r})
    unrecorded = sum("machine" not in r for r in records)
    machine_line = "; ".join(machines) or "not recorded"
    if machines and unrecorded:
        machine_line += (f" ({unrecorded} earlier run(s) did not record theirs: the same 2-CPU AMD "
                         "EPYC development VM, whose CPU generation changed between sessions)")
    lines = [
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
        *([f"- Highest 1-minute load while a run went on (sampled every {LOAD_POLL:g} s; recorded "
           f"for {len(peaks)} of the {len(records)} runs): {min(peaks):.1f} to {max(peaks):.1f}; "
           f"{sum(p > LOADED for p in peaks)} run(s) *loaded* (above {LOADED:g} on this "
           "machine: their wall times and frames/s are slowed by other work, their returns "
           "are not, each run being seeded and on one thread)"] if peaks else []),
        "",
        "Cells with a spread read `median [min, max]` over the runs. *Final return* is the mean "
        "return of the last 20 training episodes at the end of the run (the `mean_return` of the "
        "example's last line). *Frames to target* is the first logged frame count at which that "
        "running mean reached the target (`charts/episodic_return`).",
        "",
        *([header, *rows] if rows else []),
        "",
        *budget_notes(records + (superseded or [])),
    ]
    if missing:
        long = [f"`{name}.py`" for name in LONG_EXAMPLES if f"`{name}.py`" in missing]
        lines += [f"No run of the current code of {', '.join(missing)}: a record is dropped when "
                  "its example's code changes, and these have not been run since (or ever). "
                  + (f"{', '.join(long)} take about an hour or more per seed on the 2-core "
                     "development machine, so they are re-recorded only when it has the time. "
                     if long else "")
                  + "Run the script with their names to add them.", ""]
    lines += curves_section(by_name, PAGE if page is None else page)
    lines += [
        "The published figures are those projects' own reports (different budgets, hardware and "
        "evaluation protocols); they show what a correct implementation reaches, not a "
        "like-for-like race.",
        "",
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
        "",
        *peers_section(),
        *superseded_section(superseded or []),
        f"{RUNS_MARK}\n{dump_records(records)}\n-->",
        "",
    ]
    return "\n".join(lines)


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


def main() -> None:
    global EXAMPLES_DIR
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*",
                        help=f"examples to run (default all): {', '.join(EXAMPLES)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of each example")
    parser.add_argument("--rerun", action="store_true",
                        help="run again the (example, seed) pairs already on the page")
    parser.add_argument("--render-only", action="store_true",
                        help="re-render the page from its recorded runs")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, each its own process with one torch thread")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one run may take")
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--health", action="store_true",
                        help="run the deliberately wrong short runs instead "
                             f"({', '.join(HEALTH_VARIANTS)})")
    parser.add_argument("--examples-dir", type=Path, default=EXAMPLES_DIR,
                        help="read and run the example scripts from this directory")
    args, extra = parser.parse_known_args()
    EXAMPLES_DIR = args.examples_dir.resolve()
    if args.jobs < 1:
        parser.error(f"--jobs: expected a positive number of runs at once, got {args.jobs}")
    if args.health:
        run_health_variants(args.names or list(HEALTH_VARIANTS), args.timeout)
        return
    names = args.names or list(EXAMPLES)
    unknown = sorted(set(names) - set(EXAMPLES))
    if unknown:
        parser.error(f"unknown examples {unknown}; expected some of {list(EXAMPLES)}")
    recorded = load_records(args.page)
    records = drop_stale(recorded, extra)
    stale = load_superseded(args.page) + [r for r in recorded if r not in records]
    failures: list[str] = []
    if not args.render_only:
        pairs = [(name, seed) for name in names for seed in range(args.seeds)
                 if args.rerun or not any(r["example"] == name and r["seed"] == seed
                                          for r in records)]

        def keep(record: dict) -> None:
            # after every run, by this process only: nothing lost; the page is read again
            # first, so the runs another call recorded meanwhile stay
            nonlocal records, stale
            print(json.dumps(record), flush=True)
            now = load_records(args.page)
            records = [r for r in drop_stale(now + [record], extra)
                       if r is record or (r["example"], r["seed"]) != (record["example"],
                                                                       record["seed"])]
            stale = load_superseded(args.page) + [r for r in now if r not in records]
            args.page.write_text(render(records, sys.argv[1:], args.page,
                                        superseded_runs(stale, records)))

        failures = run_many(pairs, extra, args.timeout, args.jobs, keep)
    args.page.write_text(render(records, sys.argv[1:], args.page,
                                superseded_runs(stale, records)))
    print(f"wrote {args.page}")
    if failures:
        raise SystemExit("failed runs:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
