"""Gather, HERE, the wheels the lent GPU machine lacks, into ``.gpu-wheels/`` (git-ignored).

That machine (see ``docs/gpu.md``) has Python 3.12 with torch 2.11, triton 3.6, numpy,
numba, cloudpickle, pytest, pytest-timeout and psutil, but not tensordict; it cannot
fetch anything. Our own packages travel as source with the working tree
(``run_check.py`` puts ``packages/*/src`` on ``PYTHONPATH``). What travels, wheels
included, must stay under 64 MiB: this script prints both sizes and fails above
``--limit-mib``.

Run from the repository root (pip is needed, not the project's venv)::

    uv run --no-project --with pip python tools/gpu/gather_wheels.py
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEST = ROOT / ".gpu-wheels"
# tensordict 0.15.3 declares torch>=2.11.0a0, so it runs on the GPU machine's torch 2.11;
# pyvers is its one dependency that machine lacks (numpy, cloudpickle are there).
WHEELS = ("tensordict==0.15.3", "pyvers==0.2.3")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


def download(dest: Path, wheels: tuple[str, ...]) -> None:
    dest.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
           "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp",
           "-d", str(dest), *[a for p in PLATFORMS for a in ("--platform", p)], *wheels]
    subprocess.run(cmd, check=True, timeout=600)
    keep = {w.split("==")[0].replace("-", "_").lower() for w in wheels}
    for whl in dest.glob("*.whl"):  # one version of each: two stop the install there
        name, version = whl.name.split("-")[:2]
        if name.lower() not in keep or f"{name.lower()}=={version}" not in {
                w.replace("-", "_").lower() for w in wheels}:
            whl.unlink()


def tree_bytes() -> int:
    """Bytes of what travels: tracked files and untracked ones git does not ignore."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / p for p in out.decode().split("\0") if p]
    return sum(p.stat().st_size for p in paths if p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", type=Path, default=DEST)
    parser.add_argument("--limit-mib", type=float, default=60.0)
    args = parser.parse_args(argv)
    download(args.dest, WHEELS)
    wheels = sorted(args.dest.glob("*.whl"))
    wheel_mib = sum(w.stat().st_size for w in wheels) / 2**20
    tree_mib = tree_bytes() / 2**20
    for w in wheels:
        print(f"{w.stat().st_size / 2**20:8.2f} MiB  {w.name}")
    print(f"wheels {wheel_mib:.2f} MiB + working tree {tree_mib:.2f} MiB = "
          f"{wheel_mib + tree_mib:.2f} MiB (limit {args.limit_mib} MiB)")
    if len(wheels) != len(WHEELS):
        print(f"expected {len(WHEELS)} wheels, found {[w.name for w in wheels]}")
        return 1
    return 0 if wheel_mib + tree_mib <= args.limit_mib else 1


if __name__ == "__main__":
    sys.exit(main())
