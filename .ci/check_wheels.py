"""Build every package as its own wheel and import it in a fresh venv holding only it.

uv cannot stop one workspace member from importing another's dependencies inside the
workspace venv, so only this check catches an undeclared dependency at import time.
Each package gets a new venv with its wheel, the wheels of the rl-* packages it declares
(transitively) and their third-party dependencies from the registry, nothing else; then
every name in its ``__all__`` must import.

The wheels are built in one ``uv build`` call; the seven venvs are checked two at a time
(the CI machine has two cores), each installed without byte-compiling (``uv`` would compile
all of torch's ~17,000 files into every venv; the import compiles the few hundred it loads),
which brought the check from 112 s (CI at 84cc9c2) to 71 s (here, beside a training run
using both cores).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _deps(name: str) -> list[str]:
    project = tomllib.loads((ROOT / "packages" / name / "pyproject.toml").read_text())["project"]
    names = [re.split(r"[\s<>=!~\[;]", d, maxsplit=1)[0] for d in project.get("dependencies", [])]
    return [n for n in names if n.startswith("rl-")]


def _closure(name: str) -> list[str]:
    out, todo = [], [name]
    while todo:
        n = todo.pop()
        if n not in out:
            out.append(n)
            todo.extend(_deps(n))
    return out


def _run(*cmd: str, log: list[str] | None = None) -> None:
    """Run ``cmd``; with ``log``, its command line and output go there (printed together
    afterwards, so two checks running side by side do not interleave their lines)."""
    line = "+ " + " ".join(cmd)
    if log is None:
        print(line, flush=True)
        subprocess.run(cmd, check=True, cwd=ROOT)
        return
    env = {**os.environ, "UV_COMPILE_BYTECODE": "0"}
    done = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    log += [line, *done.stdout.splitlines()]
    if done.returncode:
        raise RuntimeError("\n".join([*log, f"exit status {done.returncode}"]))


def check(name: str, tmp: Path) -> list[str]:
    """A fresh venv with ``name``'s wheel closure only; every name of its ``__all__`` imports."""
    log: list[str] = []
    venv, dist = tmp / f"venv-{name}", tmp / "dist"
    _run("uv", "venv", "--quiet", "--python", sys.executable, str(venv), log=log)
    wheels = [str(next(dist.glob(f"{n.replace('-', '_')}-*.whl"))) for n in _closure(name)]
    _run("uv", "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), *wheels,
         log=log)
    mod = name.replace("-", "_")
    code = (
        f"import importlib, sys; m = importlib.import_module({mod!r}); "
        "[getattr(m, n) for n in m.__all__]; "
        "print(m.__name__, m.__version__, len(m.__all__), 'names; torch loaded:', "
        "'torch' in sys.modules)"
    )
    _run(str(venv / "bin" / "python"), "-c", code, log=log)
    if name == "rl-profiling":
        # stdlib only: importing it must not need (or import) torch.
        _run(str(venv / "bin" / "python"), "-c",
             "import sys, rl_profiling; assert 'torch' not in sys.modules", log=log)
    return log


def main() -> int:
    names = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
    with tempfile.TemporaryDirectory(prefix="rl-wheels-") as tmp:
        _run("uv", "build", "--quiet", "--all-packages", "--wheel", "--out-dir", f"{tmp}/dist")
        with ThreadPoolExecutor(max_workers=2) as pool:
            for log in pool.map(check, names, [Path(tmp)] * len(names)):
                print("\n".join(log), flush=True)
    print("all packages build and import on their own")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
