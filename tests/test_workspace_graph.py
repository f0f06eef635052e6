"""The workspace's structure: the dependency graph, package layout and public API.

A package may import, at module level, only the stdlib, itself and the dependencies its
own ``pyproject.toml`` declares. Optional extras (gymnasium, ray, triton, ...) may only be
imported lazily, inside functions.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if (p / "pyproject.toml").exists())
EXPECTED = {
    "rl-profiling", "rl-envs", "rl-collectors", "rl-replay", "rl-objectives", "rl-recurrent",
    "rl-modules", "rl-record", "rl-trainers",
} | {"rl-migrate"}  # rl-migrate: libcst only (DESIGN.md), no rl-profiling
# distribution name -> import names it provides
IMPORT_NAMES = {"tensordict": {"tensordict"}, "torch": {"torch"}, "numpy": {"numpy"}}


def _dist_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~\[;]", requirement, maxsplit=1)[0].strip().lower()


def _project(pkg: Path) -> dict:
    return tomllib.loads((pkg / "pyproject.toml").read_text())["project"]


def _allowed_modules(pkg: Path) -> tuple[set[str], set[str]]:
    """Return (module-level allowed imports, lazily-allowed extra imports)."""
    project = _project(pkg)
    deps = {_dist_name(d) for d in project.get("dependencies", [])}
    extras = {_dist_name(d) for ds in project.get("optional-dependencies", {}).values() for d in ds}
    to_mod = lambda names: {m for n in names for m in IMPORT_NAMES.get(n, {n.replace("-", "_")})}  # noqa: E731
    own = project["name"].replace("-", "_")
    return to_mod(deps) | {own}, to_mod(extras)


def _module_level_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Top-level imports, including those under module-level if/try (but not in defs)."""
    found: list[tuple[int, str]] = []

    def visit(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.Import):
                found.extend((node.lineno, a.name.split(".")[0]) for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.append((node.lineno, node.module.split(".")[0]))
            elif isinstance(node, ast.If):
                if _is_type_checking(node.test):
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)
                for h in node.handlers:
                    visit(h.body)
                visit(node.orelse)
                visit(node.finalbody)

    visit(tree.body)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _all_imports(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_all_six_packages_exist_with_layout():
    assert {p.name for p in PACKAGES} == EXPECTED
    for pkg in PACKAGES:
        mod = pkg.name.replace("-", "_")
        for rel in ("README.md", f"src/{mod}/__init__.py", f"src/{mod}/py.typed", "tests"):
            assert (pkg / rel).exists(), f"{pkg.name} lacks {rel}"
        assert _project(pkg)["version"], pkg.name


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_imports_follow_declared_dependencies(pkg: Path):
    allowed, extras = _allowed_modules(pkg)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    errors = []
    for path in sorted((pkg / "src").rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        rel = path.relative_to(ROOT)
        for lineno, name in _module_level_imports(tree):
            if name not in stdlib and name not in allowed:
                kind = "an optional extra, import it lazily" if name in extras else "undeclared"
                errors.append(f"{rel}:{lineno}: module-level import of {name!r} ({kind})")
        for name in _all_imports(tree) - stdlib - allowed - extras:
            errors.append(f"{rel}: imports {name!r}, which {pkg.name} does not declare")
    assert not errors, "\n".join(errors)


def test_dependency_graph_is_a_dag_rooted_at_rl_profiling():
    graph = {}
    for pkg in PACKAGES:
        deps = {_dist_name(d) for d in _project(pkg).get("dependencies", [])}
        graph[pkg.name] = {d for d in deps if d in EXPECTED}
    assert graph["rl-profiling"] == set()
    assert not _project(ROOT / "packages" / "rl-profiling").get("dependencies")
    for name, deps in graph.items():
        if name not in ("rl-profiling", "rl-migrate"):
            assert "rl-profiling" in deps, f"{name} must depend on rl-profiling"
    seen, stack = set(), set()

    def visit(node: str) -> None:
        assert node not in stack, f"dependency cycle through {node}"
        if node in seen:
            return
        stack.add(node)
        for d in graph[node]:
            visit(d)
        stack.discard(node)
        seen.add(node)

    for name in graph:
        visit(name)


@pytest.mark.parametrize("pkg", PACKAGES, ids=lambda p: p.name)
def test_public_api_exports_import(pkg: Path):
    module = importlib.import_module(pkg.name.replace("-", "_"))
    assert module.__version__ == _project(pkg)["version"]
    exported = list(module.__all__)
    assert exported == sorted(exported), f"{pkg.name}: __all__ is not sorted"
    for name in exported:
        assert hasattr(module, name), f"{pkg.name}: __all__ names {name!r}, which does not import"
