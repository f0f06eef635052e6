"""The recorded runs ``results_examples.py`` keeps in the results page, and the code
fingerprint that says which version of an example a record ran.

Every run's record is kept in the page itself, in an HTML comment at its end (``RUNS_MARK``);
the last runs of an example with no run of its current code are kept apart
(``SUPERSEDED_MARK``). A record carries the fingerprint of the example's code (its syntax
tree without docstrings, with the sibling example modules it imports): a record whose
example has changed since is stale. The standard library alone.
"""

from __future__ import annotations

import ast
import hashlib
import json
import sys
from pathlib import Path

RUNS_MARK = "<!-- runs:"
# the last runs of an example whose code has changed since, kept (apart, marked) while the
# example has no run of its current code, because other pages quote them through the hook
SUPERSEDED_MARK = "<!-- superseded runs:"
CURVE_POINTS = 60  # a record keeps at most this many points of each logged series


def code_dump(path: Path) -> tuple[str, ast.Module]:
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


def sibling_imports(tree: ast.Module, examples_dir: Path) -> list[str]:
    """Example modules in ``examples_dir`` that ``tree`` imports (``from sac_pendulum import``)."""
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
    return sorted({m for m in names if (examples_dir / f"{m}.py").is_file()})


def code_fingerprint(name: str, examples_dir: Path) -> str:
    """Hash of ``<examples_dir>/<name>.py``'s syntax tree without docstrings (comments never
    reach it), and of the sibling example modules it imports, recursively (``sac_mujoco.py``
    runs ``sac_pendulum.py``).

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
        dump, tree = code_dump(examples_dir / f"{module}.py")
        dumps.append(dump)
        todo += sibling_imports(tree, examples_dir)
    return hashlib.sha256("\n".join(dumps).encode()).hexdigest()[:12]


def drop_stale(records: list[dict], extra: list[str], examples: dict[str, dict],
               examples_dir: Path) -> list[dict]:
    """The records of the current code of ``examples`` (read from ``examples_dir``) run with
    the same extra options (``extra``).

    A record without a code fingerprint (written before there were any) is stale too.
    """
    current = {name: code_fingerprint(name, examples_dir) for name in examples}
    kept = [r for r in records
            if r.get("code") == current.get(r["example"]) and r.get("args", []) == extra]
    for r in records:
        if r not in kept:
            print(f"dropping the record of {r['example']} seed {r['seed']} ({r['started']}): code "
                  f"{r.get('code', 'unknown')} with options {r.get('args', [])}, now "
                  f"{current.get(r['example'])} with {extra}", file=sys.stderr)
    return kept


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


def load_records(page: Path) -> list[dict]:
    """The runs recorded on ``page`` (see ``RUNS_MARK``); none without the page or the block."""
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
