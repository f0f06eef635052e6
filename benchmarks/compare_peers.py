"""Race Stable-Baselines3 against our examples: same task, budget, network sizes, threads.

    uv sync --all-packages --all-extras --all-groups   # or: uv sync --group peers
    uv run python benchmarks/compare_peers.py --tasks ppo-cartpole sac-pendulum --seeds 1
    uv run python benchmarks/compare_peers.py --budget-scale 0.05          # short runs
    uv run python benchmarks/compare_peers.py --tasks ppo-hopper --sides sb3 \
        --frames ppo-hopper=5000

Each race is two fresh processes, one after the other (never at once): ours is
``python examples/<name>.py --env-id ID --seed K --total-frames N --threads 1 --logdir D``,
SB3's is ``python benchmarks/peers_sb3.py <task> --seed K --frames N`` with our example's
``Config``, so that SB3 gets the same settings wherever it has them; the order alternates
with the seed (even seeds ours first). Both run one torch thread (and ``OMP_NUM_THREADS=1``).
Measured the same way on both sides: *frames/s* over the training loop (SB3's
``learn()``), the *final return* (mean of the last 20 finished training episodes), the
*frames to target* (the first per-batch check at which that running mean reaches the
target; ours from the TensorBoard scalar ``charts/episodic_return``, SB3's from its
``Monitor`` through a callback) and the *time to target* (ours: that frame count over
``charts/SPS`` logged with it; SB3's: the callback's clock). The table is printed and, for
the full budgets, written to ``benchmarks/results/peers.json`` (the tasks of this call
replace theirs, the others are kept) and to the section "Against Stable-Baselines3" of
``docs/results.md``. A task whose example does not exist yet is skipped with a message
(``--sides sb3`` runs SB3's side alone, to check it). After a change to one side only,
``--sides ours --keep-other-side`` re-runs that side and keeps the other side's runs of the
published record, refused unless it raced the same budget and seeds on this CPU model; the
page says which runs were kept and from when. Where one side after the other does not fit
(CrossQ: over an hour a side here), the two sides may run at the same time, one core each,
as two calls (``--sides ours --out A`` and ``--sides sb3 --out B``, started together);
``--merge-alongside A B`` then publishes them as one race, its runs marked ``alongside``,
and the page says the sides shared the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from peers_docs import update_page
from results_examples import code_fingerprint, frames_to_threshold
from run import metadata

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results" / "peers.json"
SHORT_RESULTS = Path(tempfile.gettempdir()) / "peers_short.json"
PEER_VERSIONS = (
    "stable-baselines3", "sb3-contrib", "gymnasium", "ale-py", "mujoco", "opencv-python-headless"
)


@dataclasses.dataclass
class Task:
    """One race.

    Attributes:
        env_id: the gymnasium id both sides train on.
        frames: the budget in env steps (agent steps; each sub-env's step counts once).
        target: mean return of the last 20 episodes to reach; None for throughput only.
        example: our example, ``examples/<example>.py``.
        fallback: the settings SB3 gets while our example does not exist (or lacks them);
            our example's ``Config`` defaults replace them where it has them.
        differences: what differs between the two setups, besides the code; ``{field}``
            is filled in from the ``Config`` SB3 is given (ours where it exists).
        overrides: ``Config`` fields set on both sides: passed to our example as flags
            (``--algo td3``) and over the ``Config`` SB3 is given.
    """

    env_id: str
    frames: int
    target: float | None
    example: str
    fallback: dict
    differences: list[str]
    overrides: dict = dataclasses.field(default_factory=dict)


_PPO_CLEANRL = {"num_envs": 1, "steps_per_env": 2048, "lr": 3e-4, "gamma": 0.99, "lmbda": 0.95,
                "epochs": 10, "num_minibatches": 32, "clip_epsilon": 0.2, "entropy_coef": 0.0,
                "critic_coef": 0.5, "max_grad_norm": 0.5, "hidden": 64}
_PPO_ATARI_CLEANRL = {
    "num_envs": 8,
    "steps_per_env": 128,
    "frame_skip": 4,
    "lr": 2.5e-4,
    "gamma": 0.99,
    "lmbda": 0.95,
    "epochs": 4,
    "num_minibatches": 4,
    "clip_epsilon": 0.1,
    "entropy_coef": 0.01,
    "critic_coef": 0.5,
    "max_grad_norm": 0.5,
}
_SAC_CLEANRL = {
    "num_envs": 1,
    "steps_per_env": 1,
    "learning_starts": 5_000,
    "buffer_size": 1_000_000,
    "batch_size": 256,
    "updates_per_frame": 1.0,
    "lr": 3e-4,
    "gamma": 0.99,
    "tau": 0.005,
    "hidden": 256,
}
_SAC_DIFFS = [
    "Same settings: {num_envs} envs, buffer {buffer_size:,}, batch {batch_size}, lr {lr}, gamma "
    "{gamma}, tau {tau}, {learning_starts:,} random frames first, {hidden}x{hidden} ReLU "
    "networks, {updates_per_frame:g} gradient step per frame (SB3: `gradient_steps` per batch).",
    "SB3 steps its {num_envs} gymnasium envs in a Python loop (`DummyVecEnv`), ours in "
    "gymnasium's vector env.",
    "Both: two Q-networks and their Polyak targets, temperature learned from 1.0 towards "
    "-dim(A); SB3 three Adams (actor, critics, temperature) at the one lr it takes.",
    "SB3 samples uniformly at random for `learning_starts` frames and trains once past them; "
    "ours the same (`init_random_frames`).",
]
_TD3_DIFFS = [
    "SB3 runs RL-Zoo's MuJoCo `TD3` entry (hyperparams/td3.yml): lr {lr}, batch {batch_size}, "
    "{learning_starts:,} random frames first, Gaussian action noise of std {exploration_noise} "
    "(times the bound), one gradient step per frame, policy delay {policy_delay}, target policy "
    "noise 0.2 clipped to 0.5; the same in our `td3_mujoco.py` (its `Config` defaults).",
    "Network sizes: RL-Zoo's `net_arch` is [400, 300]; both sides run {hidden}x{hidden} ReLU "
    "here (our example has one width for both layers).",
    "Our Adam is fused (one kernel over every parameter); SB3's is torch's default "
    "per-tensor loop.",
    "Our linear layers are `OneDNNLinear`: a training batch's products run on oneDNN "
    "(AVX-512 on this AMD CPU); SB3's `nn.Linear` calls MKL's `sgemm`, which runs its AVX2 "
    "kernels here. The same math, values equal up to float32 rounding.",
    "SB3 steps its env in a Python loop (`DummyVecEnv`), ours in gymnasium's vector env.",
]
_CROSSQ_DIFFS = [
    "sb3-contrib's `CrossQ` with its documented defaults (lr {lr}, batch {batch_size}, "
    "{learning_starts} random frames, policy delay {policy_delay}, actor {hidden}x{hidden}, "
    "critics {critic_hidden}x{critic_hidden} with a batch-renorm layer before each linear, "
    "momentum 0.01, eps 1e-3, 100k warm-up steps, Adam beta1 {adam_beta1}); ours "
    "`crossq_mujoco.py` with the same (its `Config` defaults).",
    "sb3-contrib's actor batch-renormalises too; ours has none. Our Adam is fused.",
    "SB3 steps its env in a Python loop (`DummyVecEnv`), ours in gymnasium's vector env.",
]
TASKS: dict[str, Task] = {
    "ppo-cartpole": Task(
        "CartPole-v1",
        200_000,
        475.0,
        "ppo_cartpole",
        {"hidden": 64},
        [
            "SB3 runs RL-Zoo's tuned `CartPole-v1` entry (hyperparams/ppo.yml): 8 envs x 32 steps "
            "(256 frames per update), 20 epochs of minibatch 256, lr `lin_0.001` and clip "
            "`lin_0.2` (both annealed to 0), gamma 0.98, lambda 0.8, entropy 0; ours its own "
            "`Config`: {num_envs} envs x {steps_per_env} steps, {epochs} epochs of "
            "{minibatch_size}, lr {lr} annealed to 0, clip {clip_epsilon} constant, gamma {gamma}, "
            "lambda {lmbda}, entropy {entropy_coef}.",
            "Same networks: SB3's default `MlpPolicy` for PPO is separate 64x64 tanh actor and "
            "critic with orthogonal init, as ours (RL-Zoo sets no `net_arch` for CartPole).",
            "SB3 steps its 8 CartPole envs in a Python loop (`DummyVecEnv`, RL-Zoo's default); "
            "ours uses gymnasium's numpy-vectorised CartPole (one numpy step for all {num_envs}).",
        ],
    ),
    "sac-pendulum": Task("Pendulum-v1", 20_000, -250.0, "sac_pendulum", _SAC_CLEANRL, _SAC_DIFFS),
    "ppo-hopper": Task(
        "Hopper-v5",
        1_000_000,
        1500.0,
        "ppo_mujoco",
        _PPO_CLEANRL,
        [
            "SB3 runs RL-Zoo's MuJoCo defaults (`normalize: true`: `VecNormalize` of observations "
            "and rewards, both clipped to [-10, 10], eps 1e-8) with our example's batch, epochs, "
            "rates and 64x64 tanh networks; ours normalises observations with `VecNorm` "
            "(cumulative statistics, variance floor 1e-2) and rewards with `NormalizeReward` "
            "(gymnasium's: the running std of the discounted return, as `VecNormalize`'s), each "
            "clipped to [-10, 10].",
            "Both: a state-independent log std starting at 0, actions clipped to the bounds on the "
            "way to the env, lr annealed linearly to 0.",
            "Ours compiles its update step (`--compile auto`, the example's default for a run "
            "this long: docs/compile.md); the compiling time is in its wall clock. SB3 runs "
            "eager PyTorch.",
        ],
    ),
    "sac-halfcheetah": Task(
        "HalfCheetah-v5", 100_000, 3000.0, "sac_mujoco", _SAC_CLEANRL, _SAC_DIFFS
    ),
    "td3-halfcheetah": Task(
        "HalfCheetah-v5", 100_000, 3000.0, "td3_mujoco", _SAC_CLEANRL, _TD3_DIFFS
    ),
    # the budget of crossq_mujoco.py (about an hour a seed here: the critics are wide)
    "crossq-halfcheetah": Task(
        "HalfCheetah-v5", 30_000, None, "crossq_mujoco", _SAC_CLEANRL, _CROSSQ_DIFFS
    ),
    "ppo-breakout": Task(
        "ALE/Breakout-v5",
        100_000,
        None,
        "ppo_atari",
        _PPO_ATARI_CLEANRL,
        [
            "Throughput only (a short budget). Frames are emulator frames on both sides (agent "
            "steps x {frame_skip}); SB3 learns for budget / {frame_skip} agent steps.",
            "SB3: RL-Zoo's `atari` setup (`AtariWrapper`: 30 no-ops, FIRE at reset, frame skip 4 "
            "with max-pool, 84x84 grey, life loss as terminal, reward clipping; 4 stacked frames; "
            "Nature-CNN `CnnPolicy`) on ALE made with frameskip 1 and no sticky actions, its "
            "{num_envs} envs stepped in a Python loop (`DummyVecEnv`), with our example's PPO "
            "settings: {steps_per_env} steps, {epochs} epochs of {num_minibatches} minibatches, lr "
            "{lr} annealed (SB3's to 0 over the budget, ours over CleanRL's 40M frames: the same "
            "work a step), clip {clip_epsilon} constant, entropy {entropy_coef}. Ours: ALE's own "
            "C++ vector env doing the same preprocessing (it may step its envs on threads of its "
            "own; torch has 1 thread on both sides), life loss a training-only done, one CNN trunk "
            "shared by the policy and value heads as in SB3's `CnnPolicy`. Both take each "
            "step's value while acting (ours: the collector runs the whole "
            "`ActorValueOperator`, and GAE reuses those values with `shifted=True`); neither "
            "runs a second CNN pass over the batch for the advantages.",
        ],
    ),
}


def example_config(name: str) -> dict | None:
    """The defaults of ``Config`` in ``examples/<name>.py`` (None without the file)."""
    path = ROOT / "examples" / f"{name}.py"
    if not path.exists():
        return None
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))  # an example may import its sibling's Config
    spec = importlib.util.spec_from_file_location(f"_peers_example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses reads its annotations through it
    spec.loader.exec_module(module)
    return dataclasses.asdict(module.Config())


def sb3_config(task: Task) -> dict:
    """What SB3 is given: our example's ``Config`` defaults over the task's fallback."""
    ours = example_config(task.example) or {}
    return task.fallback | ours | task.overrides | {"env_id": task.env_id}


def describe(text: str, config: dict) -> str:
    """``text`` with its ``{field}`` s filled in from ``config`` (as is where one is missing)."""
    try:
        return text.format_map(config)
    except (KeyError, ValueError):
        return text


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _last_json(proc: subprocess.CompletedProcess, what: str) -> dict:
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def seconds_at(logdir: Path, frames: int | None) -> float | None:
    """Seconds since the start of training at ``frames``: frames over ``charts/SPS`` logged
    there."""
    if frames is None:
        return None
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    if "charts/SPS" not in events.Tags()["scalars"]:
        return None
    sps = {event.step: event.value for event in events.Scalars("charts/SPS")}
    return round(frames / sps[frames], 2) if frames in sps else None


def run_ours(task: Task, seed: int, frames: int, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="rl-peers-") as tmp:
        tb = Path(tmp) / "tb"
        args = [f"examples/{task.example}.py", "--env-id", task.env_id, "--seed", str(seed),
                "--total-frames", str(frames), "--threads", "1"]
        for field, value in task.overrides.items():
            args += ["--" + field.replace("_", "-"), str(value)]
        proc = subprocess.run([sys.executable, *args, "--logdir", str(tb)], cwd=ROOT, env=_env(),
                              capture_output=True, text=True, timeout=timeout, check=False)
        result = _last_json(proc, f"ours ({task.example}.py seed {seed})")
        reached = frames_to_threshold(tb, task.target) if task.target is not None else None
        result |= {"frames_to_target": reached, "seconds_to_target": seconds_at(tb, reached)}
    return result | {
        "code": code_fingerprint(task.example),
        "command": shlex.join(["python", *args]),
    }


def run_sb3(name: str, task: Task, seed: int, frames: int, config: dict, timeout: float) -> dict:
    args = ["benchmarks/peers_sb3.py", name, "--seed", str(seed), "--frames", str(frames)]
    if task.target is not None:
        args += ["--target", str(task.target)]
    proc = subprocess.run(
        [sys.executable, *args, "--config", json.dumps(config)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return _last_json(proc, f"SB3 ({name} seed {seed})") | {
        "command": shlex.join(["python", *args])
    }


def race(name: str, seed: int, frames: int, sides: list[str], timeout: float) -> list[dict]:
    """One seed of one task: each side in a fresh process, ours first on even seeds."""
    task = TASKS[name]
    config = sb3_config(task)
    order = sides if seed % 2 == 0 else sides[::-1]
    runs = []
    for side in order:
        load = os.getloadavg()[0]
        started, t0 = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), time.perf_counter()
        print(f"[{name} seed {seed}] {side} ... (1-min load {load:.2f})", flush=True)
        result = (run_ours(task, seed, frames, timeout) if side == "ours"
                  else run_sb3(name, task, seed, frames, config, timeout))
        runs.append(
            {
                "side": side,
                "seed": seed,
                "started": started,
                "load_avg_1min_before": round(load, 2),
                "process_seconds": round(time.perf_counter() - t0, 2),
                **result,
            }
        )
        print(
            f"    {json.dumps({k: v for k, v in runs[-1].items() if k != 'settings'})}", flush=True
        )
    return runs


def _median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarise(runs: list[dict]) -> dict:
    """Per side: medians over seeds; then the ratios ours / SB3."""
    out: dict = {}
    for side in ("ours", "sb3"):
        mine = [r for r in runs if r["side"] == side]
        if not mine:
            continue
        out[side] = {
            "seeds": [r["seed"] for r in mine],
            "frames": _median([r["frames"] for r in mine]),
            "reached": sum(r["frames_to_target"] is not None for r in mine),
            **{
                k: _median([r[k] for r in mine])
                for k in (
                    "seconds",
                    "process_seconds",
                    "fps",
                    "mean_return",
                    "frames_to_target",
                    "seconds_to_target",
                )
            },
        }
    if "ours" in out and "sb3" in out:
        ours, sb3 = out["ours"], out["sb3"]
        ratio = {k: round(ours[k] / sb3[k], 3) if ours[k] and sb3[k] else None
                 for k in ("fps", "seconds", "seconds_to_target", "frames_to_target")}
        out["ratios_ours_over_sb3"] = ratio
    return out


def task_record(name: str, frames: int, runs: list[dict], meta: dict) -> dict:
    task = TASKS[name]
    ours_cfg = example_config(task.example)
    sb3_settings = next((r["settings"] for r in runs if r["side"] == "sb3"), None)
    return {"env_id": task.env_id, "budget": frames, "full_budget": frames == task.frames,
            "target": task.target, "example": f"examples/{task.example}.py",
            "settings": {"ours": ours_cfg, "sb3": sb3_settings},
            "differences": [describe(text, sb3_config(task)) for text in task.differences],
            "runs": runs, "summary": summarise(runs), "meta": meta}


def _cell(x, fmt: str = "{:,.0f}") -> str:
    return "–" if x is None else fmt.format(x)


def print_table(tasks: dict[str, dict]) -> None:
    cols = ["task", "side", "frames", "seconds", "frames/s", "final return", "frames to target",
            "s to target"]
    rows = []
    for name, rec in tasks.items():
        s = rec["summary"]
        for side in ("ours", "sb3"):
            if side in s:
                v = s[side]
                rows.append(
                    [
                        name,
                        side,
                        _cell(v["frames"]),
                        _cell(v["seconds"], "{:.1f}"),
                        _cell(v["fps"]),
                        _cell(v["mean_return"], "{:.1f}"),
                        _cell(v["frames_to_target"]),
                        _cell(v["seconds_to_target"], "{:.1f}"),
                    ]
                )
        if "ratios_ours_over_sb3" in s:
            r = s["ratios_ours_over_sb3"]
            rows.append(
                [
                    name,
                    "ours/SB3",
                    "",
                    _cell(r["seconds"], "{:.2f}"),
                    _cell(r["fps"], "{:.2f}"),
                    "",
                    _cell(r["frames_to_target"], "{:.2f}"),
                    _cell(r["seconds_to_target"], "{:.2f}"),
                ]
            )
    widths = [
        max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)
    ]
    print("  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)))
    for row in rows:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def budgets(args: argparse.Namespace, parser: argparse.ArgumentParser) -> dict[str, int]:
    explicit = {}
    for item in args.frames:
        name, _, value = item.partition("=")
        if name not in TASKS or not value.isdigit():
            parser.error(f"--frames: expected TASK=N with TASK in {sorted(TASKS)}, got {item!r}")
        explicit[name] = int(value)
    return {
        name: explicit.get(name, round(TASKS[name].frames * args.budget_scale))
        for name in args.tasks
    }


def runnable(name: str, sides: list[str]) -> bool:
    example = ROOT / "examples" / f"{TASKS[name].example}.py"
    if "ours" in sides and not example.exists():
        print(f"skipping {name}: {example.relative_to(ROOT)} does not exist yet "
              f"(run SB3's side alone with --tasks {name} --sides sb3)", file=sys.stderr)
        return False
    return True


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--seeds", type=int, default=1, help="seeds 0..N-1 of each task")
    parser.add_argument("--sides", nargs="+", default=["ours", "sb3"], choices=["ours", "sb3"])
    parser.add_argument(
        "--keep-other-side", action="store_true",
        help="with one --sides: keep the other side's runs from the published record (same "
             "budget, seeds and CPU model), marked kept_from, and publish the race")
    parser.add_argument("--budget-scale", type=float, default=1.0, help="times each task's budget")
    parser.add_argument("--frames", nargs="*", default=[], metavar="TASK=N", help="a task's budget")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one run may take")
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results file (default {RESULTS.relative_to(ROOT)} for full budgets, "
                             f"{SHORT_RESULTS} otherwise)")
    parser.add_argument(
        "--merge-alongside", nargs=2, type=Path, default=None, metavar=("OURS", "SB3"),
        help="publish a race whose two sides ran at the same time, one core each: the "
             "--out files of `--sides ours` and `--sides sb3` started together (their runs "
             "are marked alongside, and the page says so)")
    parser.add_argument(
        "--render-docs",
        action="store_true",
        help=f"only rewrite the section of docs/results.md from {RESULTS.relative_to(ROOT)}",
    )
    args = parser.parse_args()
    if args.render_docs:
        update_page(json.loads(RESULTS.read_text()))
        return 0
    if args.merge_alongside:
        return merge_alongside(*args.merge_alongside)
    if "sb3" in args.sides and importlib.util.find_spec("stable_baselines3") is None:
        parser.error(
            "stable-baselines3 is not installed: `uv sync --all-packages --all-extras "
            "--all-groups` (or add `--group peers` to your sync)"
        )
    frames = budgets(args, parser)
    kept = kept_runs(args.tasks, args.sides, args.seeds, frames) if args.keep_other_side else {}
    full = all(frames[n] == TASKS[n].frames for n in args.tasks) and (
        set(args.sides) == {"ours", "sb3"} or bool(kept))
    out = args.out or (RESULTS if full else SHORT_RESULTS)
    meta = metadata() | {"peer_versions": peer_versions(), "load_avg_1min_start": _load()}
    done, failures = {}, []
    for name in [n for n in args.tasks if runnable(n, args.sides)]:
        runs = []
        for seed in range(args.seeds):
            try:
                runs += race(name, seed, frames[name], args.sides, args.timeout)
            except (RuntimeError, subprocess.TimeoutExpired, json.JSONDecodeError) as exc:
                failures.append(name)
                print(f"{name} seed {seed}: {exc}", file=sys.stderr)
        if runs:
            runs += kept.get(name, [])
            done[name] = task_record(
                name, frames[name], runs, meta | {"load_avg_1min_end": _load()}
            )
    print_table(done)
    write(out, done, meta)
    if out == RESULTS:
        update_page(json.loads(RESULTS.read_text()))
    return 1 if failures else 0


def kept_runs(tasks: list[str], sides: list[str], seeds: int,
              frames: dict[str, int]) -> dict[str, list[dict]]:
    """``--keep-other-side``: the other side's runs of each task, taken from the published
    record (``RESULTS``) when it raced the same budget and seeds on this CPU model, each
    marked with ``kept_from`` (that record's time): one side re-run after its code changed,
    the other's figures kept rather than re-measured."""
    if len(sides) != 1:
        raise SystemExit(f"--keep-other-side: give one of --sides ours / sb3, received {sides}")
    other = "sb3" if sides[0] == "ours" else "ours"
    record = json.loads(RESULTS.read_text()).get("tasks", {}) if RESULTS.exists() else {}
    cpu, kept = metadata()["machine"]["cpu"], {}
    for name in tasks:
        rec = record.get(name, {})
        runs = [dict(r, kept_from=rec["meta"]["time"]) for r in rec.get("runs", [])
                if r["side"] == other and r["seed"] < seeds]
        if (rec.get("budget") != frames[name] or rec["meta"]["machine"]["cpu"] != cpu
                or len(runs) != seeds):
            raise SystemExit(
                f"--keep-other-side: {RESULTS} has no {other} runs of {name} for seeds 0-"
                f"{seeds - 1} at {frames[name]:,} frames on this CPU ({cpu})")
        kept[name] = runs
    return kept


def merge_alongside(ours_path: Path, sb3_path: Path) -> int:
    """Publish the races of two one-side files whose runs went at the same time.

    Each task in both files at its full budget, with the same seeds on each side, becomes
    one record in ``RESULTS`` (its runs marked ``alongside``; the meta is our side's, its
    command both commands), and the page is rewritten.
    """
    ours, sb3 = (json.loads(p.read_text()) for p in (ours_path, sb3_path))
    done = {}
    for name in sorted(set(ours["tasks"]) & set(sb3["tasks"])):
        runs = [dict(r, alongside=True) for r in ours["tasks"][name]["runs"]
                if r["side"] == "ours"]
        peer = [dict(r, alongside=True) for r in sb3["tasks"][name]["runs"] if r["side"] == "sb3"]
        budgets = {ours["tasks"][name]["budget"], sb3["tasks"][name]["budget"]}
        if budgets != {TASKS[name].frames} or sorted(r["seed"] for r in runs) != sorted(
                r["seed"] for r in peer) or not runs:
            raise SystemExit(f"--merge-alongside: {name}: expected both sides at its full "
                             f"budget ({TASKS[name].frames:,}) with the same seeds, got "
                             f"budgets {sorted(budgets)}, seeds {[r['seed'] for r in runs]} "
                             f"and {[r['seed'] for r in peer]}")
        mine = ours["tasks"][name]["meta"]  # versions and commit of our side's code
        meta = dict(mine, command=f"{mine['command']} & {sb3['tasks'][name]['meta']['command']}")
        done[name] = task_record(name, TASKS[name].frames, runs + peer, meta)
    if not done:
        raise SystemExit(f"--merge-alongside: no task in both {ours_path} and {sb3_path}")
    print_table(done)
    write(RESULTS, done, ours["meta"])
    update_page(json.loads(RESULTS.read_text()))
    return 0


def _load() -> float:
    return round(os.getloadavg()[0], 2)


def peer_versions() -> dict[str, str]:
    found = {}
    for name in PEER_VERSIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def write(out: Path, done: dict[str, dict], meta: dict) -> None:
    """The tasks of this call replace theirs in ``out``; the others are kept."""
    old = json.loads(out.read_text()) if out.exists() else {}
    tasks = {**old.get("tasks", {}), **done}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "tasks": tasks}, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    raise SystemExit(main())
