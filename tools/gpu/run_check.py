"""The prepared check, run THERE on a lent GPU machine (``--dry-run``: here, on a CPU, in CI).

Steps, in priority order, each under its own time limit, all within ``--budget-s``
(default 420 s, so the call ends well inside 8 minutes):

1. install ``.gpu-wheels/*.whl`` offline into a target folder (``gather_wheels.py`` made
   them here) and put it, ``packages/*/src`` and ``benchmarks/`` on ``PYTHONPATH``;
2. ``pytest -m cuda`` over the files holding the CUDA-only tests (a JUnit XML and a log);
3. ``benchmarks/bench_gpu.py`` with what time is left (at most 300 s), which writes
   ``gpu.json`` after every entry, a profiler trace and its ``rl-profile summary``.

Everything lands in ``--out`` (default ``$OUT``, the folder the device tool brings back,
at most 8 files): ``gpu.json``, ``gpu_trace_summary.txt``, ``gpu_trace.json.gz``,
``pytest.log``, ``pytest.xml``, ``run_check.log``, ``status.json`` (each step's exit code;
``bench`` is 1 when a section raised: ``gpu.json``'s ``errors`` say which); the tests'
outcome is added to ``gpu.json`` as ``tests``. Then, here, copy ``gpu.json`` (and
``gpu_trace_summary.txt``) to ``benchmarks/results/`` and commit them.

There (see ``docs/gpu.md``)::

    python3 tools/gpu/run_check.py            # with .gpu-wheels carried
    python3 tools/gpu/run_check.py --sections updates --rows iql,td3bc,cql   # offline rows

Here, in CI (a venv with the GPU machine's torch and triton; see ``.ci/run``)::

    python tools/gpu/run_check.py --dry-run --out "$(mktemp -d)"
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CUDA_TESTS = ("tests/test_cuda_paths.py",
              "packages/rl-objectives/tests/test_objectives_update_step.py")


class Log:
    def __init__(self, path: Path) -> None:
        self.path, self.start = path, time.perf_counter()
        path.write_text("")

    def __call__(self, msg: str) -> None:
        line = f"[{time.perf_counter() - self.start:6.1f} s] {msg}"
        print(line, flush=True)
        with self.path.open("a") as f:
            f.write(line + "\n")


def install(wheels: Path, site: Path, log: Log) -> None:
    found = sorted(wheels.glob("*.whl"))
    if not found:
        raise SystemExit(f"no wheels in {wheels}: run tools/gpu/gather_wheels.py here first")
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
           "--no-compile", "--no-cache-dir", "--upgrade", "--target", str(site),
           *map(str, found)]
    log(f"install {[w.name for w in found]} -> {site}")
    subprocess.run(cmd, check=True, timeout=120)


def environment(site: Path, dry_run: bool) -> dict[str, str]:
    paths = [str(site), *(str(p) for p in sorted((ROOT / "packages").glob("*/src"))),
             str(ROOT / "benchmarks")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1")
    if dry_run:
        env["TRITON_INTERPRET"] = "1"  # the Triton kernels run through the interpreter
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def run(cmd: list[str], env: dict, timeout: float, log_path: Path, log: Log) -> int:
    log(f"run ({timeout:.0f} s at most): {' '.join(cmd)}")
    with log_path.open("a") as out:
        try:
            rc = subprocess.run(cmd, env=env, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    log(f"exit {rc}")
    return rc


def record_tests(junit: Path, record: Path) -> None:
    """Add the CUDA-only tests' outcome to ``gpu.json`` (``tests``: passed, failed, skipped)."""
    if not junit.exists() or not record.exists():
        return
    import xml.etree.ElementTree as ET

    passed, failed, skipped = 0, [], 0
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    doc = json.loads(record.read_text())
    doc["tests"] = {"passed": passed, "failed": failed, "skipped": skipped}
    record.write_text(json.dumps(doc, indent=1))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (CI)")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    p.add_argument("--wheels", type=Path, default=ROOT / ".gpu-wheels")
    p.add_argument("--budget-s", type=float, default=420.0)
    p.add_argument("--sections", help="bench_gpu.py's --sections (default: all of them)")
    p.add_argument("--rows", help="bench_gpu.py's --rows (default: LeanRL's four)")
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    log, start = Log(args.out / "run_check.log"), time.perf_counter()

    def left() -> float:
        return args.budget_s - (time.perf_counter() - start)

    with tempfile.TemporaryDirectory(prefix="rl-gpu-site-") as site:
        install(args.wheels, Path(site), log)
        env = environment(Path(site), args.dry_run)
        probe = [sys.executable, "-c", "import torch, triton, tensordict, rl_objectives; "
                 "print('torch', torch.__version__, 'triton', triton.__version__, "
                 "'tensordict', tensordict.__version__, 'cuda', torch.cuda.is_available())"]
        rc_env = run(probe, env, 120, args.out / "run_check.log", log)
        tests = [sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-p", "no:cacheprovider",
                 f"--junitxml={args.out / 'pytest.xml'}", *CUDA_TESTS]
        rc_tests = run(tests, env, min(150.0, left() - 60), args.out / "pytest.log", log)
        bench = [sys.executable, str(ROOT / "benchmarks" / "bench_gpu.py"),
                 "--out", str(args.out / "gpu.json"),
                 "--budget-s", str(max(30.0, min(300.0, left() - 20)))]
        if args.dry_run:
            bench.append("--dry-run")
        for flag in ("sections", "rows"):
            if getattr(args, flag):
                bench += [f"--{flag}", getattr(args, flag)]
        rc_bench = run(bench, env, max(40.0, left()), args.out / "run_check.log", log)
    record_tests(args.out / "pytest.xml", args.out / "gpu.json")
    trace = args.out / "gpu_trace.json"
    if trace.exists():  # compressed: what comes back is at most 16 MiB a file
        with trace.open("rb") as src, gzip.open(str(trace) + ".gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        trace.unlink()
    status = {"env": rc_env, "tests": rc_tests, "bench": rc_bench}
    (args.out / "status.json").write_text(json.dumps(status))
    log(f"done: env {rc_env}, tests {rc_tests}, bench {rc_bench}; files "
        f"{sorted(f.name for f in args.out.iterdir())}")
    return max(rc_env, rc_tests, rc_bench)


if __name__ == "__main__":
    sys.exit(main())
