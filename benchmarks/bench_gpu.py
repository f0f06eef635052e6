"""The GPU benchmarks, the quick sections first, each entry's JSON written as soon as it ends.

Run by ``tools/gpu/run_check.py`` on a lent GPU machine (``--dry-run``: the same code at
tiny sizes on the CPU, in CI). Sections, in this order:

1. ``replay``: prioritized sampling from a 1M-leaf tree, the Triton tree on the GPU
   against the numba tree on the CPU, batch sizes 256 .. 65,536.
2. ``lstm``: ``LSTMModule`` with the ``"triton"`` backend against cuDNN's ``nn.LSTM``,
   forward + backward at [32, 128], hidden 256 (``bench_recurrent.py``'s shapes), then
   at [512, 128] (the kernels' grid is one program per 16 rows: 2 programs at 32 rows).
3. ``updates``: LeanRL's four rows (PPO Atari, PPO continuous, SAC, TD3) in update-side
   frames/s (frames a batch stands for over the time of its updates; see
   ``update_rows.frames_per_update``), ours (``make_update_step``) and a plain-torch
   LeanRL-shaped update timed interleaved in the same job: eager and compile + CUDA
   graphs for every row first, then compile alone. No environment runs: gymnasium, ALE
   and MuJoCo are not on that machine, so batches are synthetic tensors of the real shapes
   (uint8 [4, 84, 84] frames, 17-dim HalfCheetah observations) and the env's step cost is
   left out.
   ``--rows iql,td3bc,cql`` times the offline losses instead (``update_rows.OFFLINE_ROWS``).
4. ``profile``: a torch.profiler trace of compiled SAC updates, summarised by
   ``rl-profile summary``.

``--sections`` picks some of the four (default all).

The first two take seconds; compilation makes the third the long one. A time guard
(``--budget-s``) skips what would not fit and says so in the JSON. ``docs/gpu.md``
documents the JSON's schema.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
import update_rows  # noqa: E402

SCHEMA = 1
GPU_ROWS = ("ppo_atari", "ppo_continuous", "sac", "td3")
ALL_ROWS = (*GPU_ROWS, *update_rows.OFFLINE_ROWS)
SECTIONS = ("replay", "lstm", "updates", "profile")


class Report:
    """The JSON document, rewritten after every entry (a cut-short run keeps its data)."""

    def __init__(self, path: Path, dry_run: bool, budget_s: float) -> None:
        self.path, self.start, self.budget_s = path, time.perf_counter(), budget_s
        cuda = torch.cuda.is_available()
        self.doc = {
            "schema": SCHEMA, "dry_run": dry_run,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "device": torch.cuda.get_device_name() if cuda else platform.processor() or "cpu",
            "torch": torch.__version__, "triton": _version("triton"),
            "tensordict": _version("tensordict"), "python": platform.python_version(),
            "sections": {}, "skipped": [], "errors": [], "seconds": 0.0,
        }

    def left(self) -> float:
        return self.budget_s - (time.perf_counter() - self.start)

    def add(self, section: str, entry: dict) -> None:
        self.doc["sections"].setdefault(section, []).append(entry)
        self.write()

    def skip(self, what: str, why: str) -> None:
        self.doc["skipped"].append({"what": what, "why": why})
        print(f"skipped {what}: {why}", flush=True)
        self.write()

    def section(self, name: str, fn, *args) -> None:
        """Run one section; an exception is recorded (``errors``) and the next one runs."""
        try:
            fn(self, *args)
        except Exception as exc:  # noqa: BLE001 (a cut-short section must not stop the rest)
            self.doc["errors"].append({"section": name, "error": f"{type(exc).__name__}: {exc}"})
            print(f"section {name} failed: {type(exc).__name__}: {exc}", flush=True)
            self.write()

    def write(self) -> None:
        self.doc["seconds"] = round(time.perf_counter() - self.start, 1)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1))
        tmp.replace(self.path)


def _version(name: str) -> str | None:
    try:
        return __import__(name).__version__
    except Exception:  # noqa: BLE001 (absent or broken: the JSON says None)
        return None


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _timed(fn, batches, device: str) -> float:
    _sync(device)
    t = time.perf_counter()
    for b in batches:
        fn(b.copy())  # shallow: a loss writing into its batch (td_error) changes no key set
    _sync(device)
    return time.perf_counter() - t


def bench_updates(rep: Report, device: str, compile_kwargs: dict, rounds: int, calls: int,
                  rows: tuple[str, ...], compiled_rows: tuple[str, ...]) -> None:
    # eager and CUDA graphs for every row first (the targets), compile alone last: it then
    # finds the graphs the CUDA-graphed pass compiled in inductor's on-disk cache
    order = [(n, m) for n in rows for m in ("eager", "cudagraphs")] + [(n, "compile") for n in rows]
    for name, mode in order:
        what = f"updates {name} {mode}"
        if mode != "eager" and name not in compiled_rows:
            rep.skip(what, f"dry run: compiles {list(compiled_rows)} only")
            continue
        if mode == "cudagraphs" and device != "cuda":
            rep.skip(what, "CUDA graphs need a CUDA device")
            continue
        if rep.left() < 30:
            rep.skip(what, f"time guard: {rep.left():.0f} s left")
            continue
        torch._dynamo.reset()  # Optimizer.step's cache holds 8 optimisers, then runs eager
        # a CUDA graph cannot capture torch.distributions' host-side argument checks: off for
        # both sides of a graphed row (make_update_step turns them off for its own calls)
        torch.distributions.Distribution.set_default_validate_args(mode != "cudagraphs")
        row = update_rows.make_row(name, device, mode, compile_kwargs)
        if row is None:
            rep.skip(what, "this tree has no TD3Loss")
            continue
        rep.add("updates", _time_row(row, name, mode, device, rounds, calls))


def _time_row(row, name, mode, device, rounds, calls) -> dict:
    batches = [row.batch() for _ in range(calls)]
    sides = {"ours": row.ours} if row.plain is None else {"ours": row.ours, "plain": row.plain}
    warm = {}
    for label, fn in sides.items():
        t = time.perf_counter()
        for b in batches[:1] * 6:  # eager warm-up, compile, CudaGraphModule warm-up, capture
            fn(b.copy())
        _sync(device)
        warm[label] = round(time.perf_counter() - t, 2)
    per = update_rows.frames_per_update(name) * calls
    fps = {label: [] for label in sides}
    for _ in range(rounds):  # interleaved: a drift in clocks or load hits both
        for label, fn in sides.items():
            fps[label].append(per / _timed(fn, batches, device))
    med = {label: statistics.median(v) for label, v in fps.items()}
    entry = {"row": name, "mode": mode, "batch": update_rows.SIZES[name][2],
             "ours_fps": round(med["ours"], 1), "plain_fps": None, "ours_over_plain": None}
    if "plain" in med:
        entry.update(plain_fps=round(med["plain"], 1),
                     ours_over_plain=round(med["ours"] / med["plain"], 3))
    for label, v in fps.items():
        entry[f"{label}_spread"] = [round(min(v), 1), round(max(v), 1)]
    entry.update(warmup_seconds=warm, rounds=rounds, updates_per_round=calls)
    print(json.dumps(entry), flush=True)
    return entry


def bench_replay(rep: Report, device: str, capacity: int, sizes: list[int], reps: int) -> None:
    from rl_replay import NumbaPriorityTree, TritonPriorityTree

    trees = {"numba_cpu": NumbaPriorityTree(capacity)}
    if device == "cuda" or os.environ.get("TRITON_INTERPRET") == "1":
        trees["triton_" + device] = TritonPriorityTree(capacity, device=device)
    prio = torch.rand(capacity, dtype=torch.float64) + 1e-3
    for tree in trees.values():
        tree.update(torch.arange(capacity, device=tree.device), prio.to(tree.device))
    for n in sizes:
        if rep.left() < 10:
            rep.skip(f"replay {n}", f"time guard: {rep.left():.0f} s left")
            continue
        entry = {"batch": n, "capacity": capacity}
        for label, tree in trees.items():
            entry[f"{label}_us"] = _time_tree(tree, n, reps)
        if len(trees) == 2:
            cpu, gpu = entry["numba_cpu_us"], entry[f"triton_{device}_us"]
            entry["speedup"] = round(cpu / gpu, 2)
        rep.add("replay", entry)


def _time_tree(tree, n: int, reps: int) -> float:
    """Median microseconds of one prioritized step: sample ``n`` leaves, update them."""
    dev = tree.device.type
    u = torch.rand(n, dtype=torch.float64, device=tree.device)
    new = torch.rand(n, dtype=torch.float64, device=tree.device) + 1e-3
    times = []
    for _ in range(reps + 1):
        _sync(dev)
        t = time.perf_counter()
        tree.update(tree.sample(u), new)
        _sync(dev)
        times.append(time.perf_counter() - t)
    return round(statistics.median(times[1:]) * 1e6, 1)


def bench_lstm(rep: Report, device: str, b: int, t: int, hidden: int, reps: int) -> None:
    from rl_recurrent import LSTMModule, set_recurrent_mode
    from tensordict import TensorDict

    if device != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        rep.skip("lstm", "the triton backend needs CUDA or TRITON_INTERPRET=1")
        return
    torch.manual_seed(0)
    module = LSTMModule(64, hidden, in_key="obs", out_key="feat", device=device,
                        recurrent_backend="triton")
    is_init = torch.rand(b, t, 1, device=device) < 0.02
    is_init[:, 0] = True
    td = TensorDict({"obs": torch.randn(b, t, 64, device=device), "is_init": is_init}, [b, t])

    def ours(batch):
        with set_recurrent_mode(True):
            module(batch)["feat"].sum().backward()

    def cudnn(batch):
        module.lstm(batch["obs"])[0].sum().backward()

    times = {"triton": [], "nn_lstm": []}
    for fn in (ours, cudnn):
        fn(td.copy())
    for _ in range(reps):
        times["triton"].append(_timed(ours, [td], device))
        times["nn_lstm"].append(_timed(cudnn, [td], device))
    tri, ref = (statistics.median(v) * 1e3 for v in times.values())
    rep.add("lstm", {"shape": [b, t], "hidden": hidden, "pass": "forward+backward",
                     "triton_ms": round(tri, 3), "nn_lstm_ms": round(ref, 3),
                     "ratio": round(tri / ref, 3), "nn_lstm_resets": "none (no is_init)"})


def bench_profile(rep: Report, device: str, mode: str, compile_kwargs: dict,
                  out_dir: Path) -> None:
    if rep.left() < 20:
        rep.skip("profile", f"time guard: {rep.left():.0f} s left")
        return
    torch._dynamo.reset()
    row = update_rows.make_row("sac", device, mode, compile_kwargs)
    batch = row.batch()
    for _ in range(3):
        row.ours(batch.copy())
    acts = [torch.profiler.ProfilerActivity.CPU]
    if device == "cuda":
        acts.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(5):
            row.ours(batch.copy())
        _sync(device)
    trace = out_dir / "gpu_trace.json"
    prof.export_chrome_trace(str(trace))
    summary = subprocess.run([sys.executable, "-m", "rl_profiling", "summary", str(trace)],
                             capture_output=True, text=True, timeout=120)
    (out_dir / "gpu_trace_summary.txt").write_text(summary.stdout + summary.stderr)
    rep.add("profile", {"trace": trace.name, "summary": "gpu_trace_summary.txt",
                        "summary_rc": summary.returncode, "steps": 5, "row": f"sac {mode}"})


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="benchmarks/results/gpu.json")
    p.add_argument("--dry-run", action="store_true",
                   help="tiny sizes on the CPU (compile with backend='eager')")
    p.add_argument("--budget-s", type=float, default=300.0)
    p.add_argument("--sections", default=",".join(SECTIONS),
                   help=f"comma-separated, of {SECTIONS} (default all)")
    p.add_argument("--rows", default=",".join(GPU_ROWS),
                   help=f"the updates section's rows, of {ALL_ROWS} (default {GPU_ROWS})")
    args = p.parse_args(argv)
    sections, rows = args.sections.split(","), tuple(args.rows.split(","))
    for flag, got, known in (("--sections", sections, SECTIONS), ("--rows", rows, ALL_ROWS)):
        if set(got) - set(known):
            p.error(f"{flag}: expected some of {known}, got {sorted(set(got) - set(known))}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    rep = Report(out, args.dry_run, args.budget_s)
    dry = args.dry_run
    device = "cpu" if dry else "cuda"
    if not dry and not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs CUDA; use --dry-run on a CPU")
    if dry:
        update_rows.SIZES.update({"ppo_atari": ((4, 84, 84), 4, 8), "ppo_continuous":
                                  ((17,), 6, 8), "sac": ((17,), 6, 8), "td3": ((17,), 6, 8)})
    compile_kwargs = {"backend": "eager"} if dry else {}
    if "replay" in sections:
        rep.section("replay", bench_replay, device, 4096 if dry else 1 << 20,
                    [256] if dry else [256 << (2 * i) for i in range(5)], 2 if dry else 20)
    if "lstm" in sections:
        rep.section("lstm", bench_lstm, device, *((2, 8, 16) if dry else (32, 128, 256)),
                    2 if dry else 10)
        if not dry:  # 16x the rows on the same kernels: does the time follow the program count?
            rep.section("lstm", bench_lstm, device, 512, 128, 256, 10)
    if "updates" in sections:  # a dry run compiles one of LeanRL's rows and one offline row
        compiled = tuple(r for r in rows if r in ("ppo_continuous", "iql"))
        rep.section("updates", bench_updates, device, compile_kwargs, 2 if dry else 7,
                    2 if dry else 20, rows, compiled if dry else rows)
    if "profile" in sections:
        rep.section("profile", bench_profile, device, "eager" if dry else "compile",
                    compile_kwargs, out.parent)
    rep.write()
    return rep.doc


if __name__ == "__main__":
    sys.exit(1 if main()["errors"] else 0)
