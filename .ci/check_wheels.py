"""Build every package as its own wheel and import it in a fresh venv holding only it.

uv cannot stop one workspace member from importing another's dependencies inside the
workspace venv, so only this check catches an undeclared dependency at import time.
Each package gets a new venv with its wheel, the wheels of the rl-* packages it declares
(transitively) and their third-party dependencies from the registry, nothing else; then
every name in its ``__all__`` must import.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
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


def _run(*cmd: str) -> None:
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)


def main() -> int:
    names = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
    with tempfile.TemporaryDirectory(prefix="rl-wheels-") as tmp:
        dist = Path(tmp) / "dist"
        for name in names:
            _run("uv", "build", "--quiet", "--package", name, "--wheel", "--out-dir", str(dist))
        for name in names:
            venv = Path(tmp) / f"venv-{name}"
            _run("uv", "venv", "--quiet", "--python", sys.executable, str(venv))
            wheels = [str(next(dist.glob(f"{n.replace('-', '_')}-*.whl"))) for n in _closure(name)]
            _run("uv", "pip", "install", "--quiet", "--python", str(venv / "bin" / "python"),
                 *wheels)
            mod = name.replace("-", "_")
            code = (
                f"import importlib, sys; m = importlib.import_module({mod!r}); "
                "[getattr(m, n) for n in m.__all__]; "
                "print(m.__name__, m.__version__, len(m.__all__), 'names; torch loaded:', "
                "'torch' in sys.modules)"
            )
            _run(str(venv / "bin" / "python"), "-c", code)
            if name == "rl-profiling":
                # stdlib only: importing it must not need (or import) torch.
                _run(str(venv / "bin" / "python"), "-c",
                     "import sys, rl_profiling; assert 'torch' not in sys.modules")
    print("all packages build and import on their own")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
