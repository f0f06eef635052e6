"""The docs are true of the code: named files and functions exist, code blocks run.

- every ``packages/.../file.py`` and function named in ``docs/debugging.md``'s table exists
  (``def name`` / ``class name`` / ``Class.method``, read with ``ast``);
- every ```` ```python ```` block under ``docs/`` runs: the blocks of one page run in order,
  in one fresh namespace, in a subprocess per page, with a timeout. A block right after an
  HTML comment ``<!-- no-run: reason -->`` is skipped (the reason is required);
- the glossary has at least 20 ``##`` terms, each with a link to its page.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import textwrap
from functools import cache
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.rglob("*.md"))

FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w-]*)[^\n`]*$")
NO_RUN = re.compile(r"^\s*<!--\s*no-run:\s*(?P<reason>\S.*?)\s*-->\s*$")
PAGE_TIMEOUT = 90  # seconds per page; the whole set runs in well under a minute


# -- parsing -------------------------------------------------------------------------
def code_blocks(text: str) -> list[dict]:
    """Every fenced block of ``text``: language, code (dedented), line, no-run reason."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        indent, start = match["indent"], i
        close = re.compile(rf"^{re.escape(indent)}```\s*$")
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : j]]
        prev = next((lines[k] for k in range(start - 1, -1, -1) if lines[k].strip()), "")
        no_run = NO_RUN.match(prev)
        blocks.append(
            {
                "lang": match["lang"],
                "code": textwrap.dedent("\n".join(body)) + "\n",
                "line": start + 1,
                "no_run": no_run["reason"] if no_run else None,
            }
        )
        i = j + 1
    return blocks


def python_blocks(page: Path) -> list[dict]:
    return [b for b in code_blocks(page.read_text()) if b["lang"] in ("python", "py")]


def table_rows(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in ``text`` (header and rule dropped)."""
    rows = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", stripped[1:-1])]
            rows.append(cells)
        elif rows:
            break
    return [r for r in rows[2:]]


LOCATION = re.compile(r"`(?P<path>packages/[\w./-]+\.py)`(?P<funcs>(?:\s*[:,]?\s*`[A-Za-z_][\w.]*`)+)")


def locations(cell: str) -> list[tuple[str, str]]:
    """``(path, name)`` pairs from a "where to look" cell: `path` `name`, `name2` ..."""
    pairs = []
    for match in LOCATION.finditer(cell):
        for name in re.findall(r"`([A-Za-z_][\w.]*)`", match["funcs"]):
            pairs.append((match["path"], name))
    return pairs


@cache
def defined_names(path: Path) -> frozenset[str]:
    """``name`` for every function/class and ``Class.method`` for every method in ``path``."""
    tree = ast.parse(path.read_text())
    names = set()
    defs = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    for node in ast.walk(tree):
        if isinstance(node, defs):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            names.update(f"{node.name}.{child.name}" for child in node.body if isinstance(child, defs))
    return frozenset(names)


# -- parser self-checks (cheap, and they keep the real checks honest) ------------------
def test_parser_finds_indented_blocks_and_no_run_markers():
    text = (
        "intro\n\n<!-- no-run: needs a GPU -->\n```python\nraise SystemExit(1)\n```\n\n"
        "1. step\n\n    ```python\n    x = 1\n    ```\n\n```bash\nls\n```\n"
    )
    blocks = code_blocks(text)
    assert [(b["lang"], b["no_run"]) for b in blocks] == [("python", "needs a GPU"), ("python", None), ("bash", None)]
    assert blocks[1]["code"] == "x = 1\n"


def test_locations_parse_path_and_names():
    cell = "`packages/a/b.py` `Foo.bar`, `baz`; and `packages/c.py` `qux`"
    assert locations(cell) == [("packages/a/b.py", "Foo.bar"), ("packages/a/b.py", "baz"), ("packages/c.py", "qux")]


# -- (a) the debugging map points at real code ---------------------------------------
def test_debugging_table_names_existing_files_and_functions():
    rows = table_rows((DOCS / "debugging.md").read_text())
    assert len(rows) >= 15, f"debugging.md: expected >= 15 table rows, found {len(rows)}"
    missing = []
    for row in rows:
        assert len(row) == 3, f"debugging.md: expected 3 cells (symptom | cause | where), got {row}"
        pairs = locations(row[2])
        assert pairs, f"debugging.md: row {row[0]!r} names no `packages/...py` `function`"
        for path, name in pairs:
            file = ROOT / path
            if not file.is_file():
                missing.append(f"{path} (no such file)")
            elif name not in defined_names(file):
                missing.append(f"{path}: {name} (not defined there)")
    assert not missing, "debugging.md names code that does not exist:\n" + "\n".join(missing)


# -- (b) every python block runs -------------------------------------------------------
RUNNER = r"""
import json, sys, traceback
blocks = json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for block in blocks:
    try:
        exec(compile(block["code"], f"{block['page']}:{block['line']}", "exec"), namespace)
    except BaseException:
        sys.stderr.write(f"block at {block['page']} line {block['line']} failed:\n")
        traceback.print_exc()
        sys.exit(1)
"""

RUNNABLE = [p for p in PAGES if any(b["no_run"] is None for b in python_blocks(p))]


def _session_leftovers(sid: int) -> list[psutil.Process]:
    left = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getsid(proc.pid) == sid:
                left.append(proc)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return left


@pytest.mark.timeout(PAGE_TIMEOUT + 30)
@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(DOCS)) for p in RUNNABLE])
def test_python_blocks_run(page: Path, tmp_path: Path):
    rel = str(page.relative_to(ROOT))
    blocks = [dict(b, page=rel) for b in python_blocks(page) if b["no_run"] is None]
    env = {k: v for k, v in os.environ.items() if k != "RL_PROFILING"}
    env["PYTHONPATH"] = ""
    proc = subprocess.Popen(
        [sys.executable, "-c", RUNNER],
        cwd=tmp_path,  # files a block writes land in the test's temp dir
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own session: leftovers are found by session id
    )
    try:
        out, err = proc.communicate(json.dumps(blocks), timeout=PAGE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail(f"{rel}: python blocks did not finish within {PAGE_TIMEOUT} s; mark slow ones <!-- no-run: reason -->")
    leftovers = _session_leftovers(proc.pid)
    for leftover in leftovers:
        leftover.kill()
    assert proc.returncode == 0, f"{rel}: a python block failed\n{err[-4000:]}"
    assert not leftovers, f"{rel}: the blocks left processes behind: {[p.pid for p in leftovers]}"


def test_every_python_block_is_run_or_says_why():
    for page in PAGES:
        for block in python_blocks(page):
            if block["no_run"] is not None:
                assert len(block["no_run"]) >= 5, f"{page}:{block['line']}: give a real no-run reason"


# -- (c) the glossary -----------------------------------------------------------------
def test_glossary_has_twenty_linked_terms():
    text = (DOCS / "glossary.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 20, f"glossary.md: expected >= 20 `##` terms, found {len(sections)}"
    unlinked = [s.splitlines()[0] for s in sections if not re.search(r"\]\([^)]+\)", s)]
    assert not unlinked, f"glossary.md: terms without a link to their page: {unlinked}"
