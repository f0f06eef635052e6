"""The docs are true of the code: named files and functions exist, code blocks run.

- every ``packages/.../file.py`` and function named in ``docs/debugging.md``'s table exists
  (``def name`` / ``class name`` / ``Class.method``, read with ``ast``);
- every ```` ```python ```` block under ``docs/`` runs: the blocks of one page run in order,
  in one fresh namespace, in a process per page (forked from the ``zygote`` fixture's
  interpreter, which imported torch, tensordict and gymnasium once), with a timeout. A
  block right after an HTML comment ``<!-- no-run: reason -->`` is skipped (the reason is
  required);
- the glossary has at least 20 ``##`` terms, each with a link to its page;
- every term of ``TERMS`` that the internals or performance pages use has a ``##`` entry in
  the glossary.
"""

from __future__ import annotations

import ast
import importlib.util
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
        body = [
            line[len(indent) :] if line.startswith(indent) else line.lstrip()
            for line in lines[i + 1 : j]
        ]
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
    """The body rows of every Markdown table in ``text`` (each header and rule dropped)."""
    tables: list[list[list[str]]] = [[]]
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            tables[-1].append([c.strip() for c in re.split(r"(?<!\\)\|", stripped[1:-1])])
        elif tables[-1]:
            tables.append([])
    return [row for table in tables for row in table[2:]]


LOCATION = re.compile(
    r"`(?P<path>packages/[\w./-]+\.py)`(?P<funcs>(?:\s*[:,]?\s*`[A-Za-z_][\w.]*`)+)"
)


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
            names.update(
                f"{node.name}.{child.name}" for child in node.body if isinstance(child, defs)
            )
    return frozenset(names)


# -- parser self-checks (cheap, and they keep the real checks honest) ------------------
def test_parser_finds_indented_blocks_and_no_run_markers():
    text = (
        "intro\n\n<!-- no-run: needs a GPU -->\n```python\nraise SystemExit(1)\n```\n\n"
        "1. step\n\n    ```python\n    x = 1\n    ```\n\n```bash\nls\n```\n"
    )
    blocks = code_blocks(text)
    assert [(b["lang"], b["no_run"]) for b in blocks] == [
        ("python", "needs a GPU"),
        ("python", None),
        ("bash", None),
    ]
    assert blocks[1]["code"] == "x = 1\n"


def test_locations_parse_path_and_names():
    cell = "`packages/a/b.py` `Foo.bar`, `baz`; and `packages/c.py` `qux`"
    assert locations(cell) == [
        ("packages/a/b.py", "Foo.bar"),
        ("packages/a/b.py", "baz"),
        ("packages/c.py", "qux"),
    ]


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
def test_python_blocks_run(page: Path, tmp_path: Path, zygote):
    rel = str(page.relative_to(ROOT))
    blocks = [dict(b, page=rel) for b in python_blocks(page) if b["no_run"] is None]
    # `python -c RUNNER` forked from the zygote (torch, tensordict, gymnasium imported once
    # for all pages; RL_PROFILING and PYTHONPATH not passed on)
    proc = zygote.launch(
        code=RUNNER,
        stdin=json.dumps(blocks),
        cwd=tmp_path,  # files a block writes land in the test's temp dir
        env={"TMPDIR": str(tmp_path)},  # a block's tempfile.mkdtemp() too (pytest cleans these)
        new_session=True,  # its own session: leftovers are found by session id
    )
    try:
        out, err = proc.communicate(timeout=PAGE_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail(
            f"{rel}: python blocks did not finish within {PAGE_TIMEOUT} s; "
            "mark slow ones <!-- no-run: reason -->"
        )
    leftovers = _session_leftovers(proc.pid)
    for leftover in leftovers:
        leftover.kill()
    assert proc.returncode == 0, f"{rel}: a python block failed\n{err[-4000:]}"
    assert not leftovers, f"{rel}: the blocks left processes behind: {[p.pid for p in leftovers]}"


def test_every_python_block_is_run_or_says_why():
    for page in PAGES:
        for block in python_blocks(page):
            if block["no_run"] is not None:
                assert len(block["no_run"]) >= 5, (
                    f"{page}:{block['line']}: give a real no-run reason"
                )


# -- (c) the glossary -----------------------------------------------------------------
def test_glossary_has_twenty_linked_terms():
    text = (DOCS / "glossary.md").read_text()
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 20, f"glossary.md: expected >= 20 `##` terms, found {len(sections)}"
    unlinked = [s.splitlines()[0] for s in sections if not re.search(r"\]\([^)]+\)", s)]
    assert not unlinked, f"glossary.md: terms without a link to their page: {unlinked}"


# -- (d) the jargon of the internals pages is defined ----------------------------------
# glossary heading -> how the internals and performance pages write the term
TERMS = {
    "sub-env": r"\bsub-envs?\b",
    "trajectory vs episode": r"\btrajector(?:y|ies)\b|\bepisodes?\b",
    "segment": r"\bsegments?\b",
    "time-major": r"\btime-major\b",
    "policy input": r"`policy_input`|\bpolicy input\b",
    "plan": r"\bplans?\b",
    "carry": r"\bcarr(?:y|ied|ies)\b",
    "armed": r"\barmed\b",
    "floor and limit": r"\bfloor\b|\bthe limit\b",
    "is_init": r"\bis_init\b",
    "primer": r"\bprimer\b",
    "fast path": r"\bfast path\b|fast_step",
    "storing device": r"storing_device|storing device",
    "policy device": r"policy_device|policy device",
    "env device": r"env_device|env device",
    "recurrent mode": r"\brecurrent mode\b",
    "recurrent state": r"recurrent_state|recurrent state",
    "traj_ids": r"\btraj_ids\b",
    "frames_per_batch": r"\bframes_per_batch\b",
    "weight version": r"policy_version|weight version",
    "RL_PROFILING": r"\bRL_PROFILING\b",
    "Timing": r"\bTiming\b",
    "in_keys / out_keys": r"\bin_keys\b|\bout_keys\b",
    "rollout layout": r"\[\*B, T\]|rollout layout",
    "ratio to the limit": r"ratio to (?:the|its) limit",
}
JARGON_PAGES = sorted((DOCS / "internals").glob("*.md")) + sorted(
    (DOCS / "performance").glob("*.md")
)


def glossary_terms() -> set[str]:
    return {
        m.strip() for m in re.findall(r"^## (.+)$", (DOCS / "glossary.md").read_text(), flags=re.M)
    }


def test_glossary_term_check_sees_a_missing_term():
    assert "sub-env" in glossary_terms()
    assert "no such term" not in glossary_terms()
    term = TERMS["policy input"]
    assert re.search(term, "copied into `policy_input` each step") and not re.search(
        term, "the policy's input"
    )


def test_terms_the_internals_pages_use_are_in_the_glossary():
    used: dict[str, list[str]] = {}
    for page in JARGON_PAGES:
        text = page.read_text()
        for term, pattern in TERMS.items():
            if re.search(pattern, text):
                used.setdefault(term, []).append(str(page.relative_to(DOCS)))
    assert len(used) >= 20, (
        f"the term list matches only {sorted(used)}: update TERMS to what the pages say"
    )
    missing = {term: pages for term, pages in used.items() if term not in glossary_terms()}
    assert not missing, "terms used on these pages with no `## term` in glossary.md:\n" + "\n".join(
        f"  {term}: {', '.join(pages)}" for term, pages in missing.items()
    )


# -- (e) no measured figure typed on a page that says its figures are generated ----------
GENERATED_MARK = "<!-- figures: generated"
GENERATED_PAGES = [
    "health.md",
    "performance/index.md",
    "performance/knobs.md",
    "performance/recipes.md",
]
# a number with a unit of time, rate, size or a ratio, as prose writes a measurement
FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?\s*(?:us|µs|ms|ns|s|seconds?|minutes?|min|h|hours?|frames/s|steps/s|fps"
    r"|[KMGT]i?B|%|x|times)(?![\w/])"
)
# figures on those pages that are settings, not measurements: figure -> what it is
SETTINGS = {
    "0.5 ms": "the step cost the collector and ParallelEnv benchmarks give their env",
    "2 ms": "WORKER_SPIN_S, how long a ParallelEnv worker spins before it sleeps",
    "30 times": "the health page's deliberately wrong learning rate, 0.03 against 0.001",
    "300 times": "the health page's deliberately wrong learning rate, 0.3 against 0.001",
    "1,000 times": "the health page's deliberately wrong critic_coef, 500 against 0.5",
}
_NOT_PROSE = [re.compile(r"^```.*?^```", re.S | re.M), re.compile(r"<!--.*?-->", re.S),
              re.compile(r"`[^`\n]*`"), re.compile(r"\]\([^)]*\)")]


def typed_figures(text: str) -> list[str]:
    """Measured-looking figures in the prose of ``text`` (code, comments, markers and link
    targets removed: a bench or example marker is an HTML comment until the build expands it)."""
    for pattern in _NOT_PROSE:
        text = pattern.sub(" ", text)
    return [m.group(0) for m in FIGURE.finditer(text) if m.group(0) not in SETTINGS]


def test_typed_figure_check_sees_figures_and_skips_markers():
    text = 'took 54.8 s and 3,409 frames/s; <!-- bench-value: x "y" --> and `--lr 0.03`, 2 ms spin'
    assert typed_figures(text) == ["54.8 s", "3,409 frames/s"]
    assert typed_figures("16 sub-envs x 32 steps, 200,000 frames") == []


def test_generated_pages_are_marked_and_say_so():
    marked = sorted(str(p.relative_to(DOCS)) for p in PAGES if GENERATED_MARK in p.read_text())
    assert marked == sorted(GENERATED_PAGES), f"pages marked {GENERATED_MARK!r}: {marked}"


@pytest.mark.parametrize("page", GENERATED_PAGES)
def test_no_figure_typed_on_a_generated_page(page: str):
    found = typed_figures((DOCS / page).read_text())
    assert not found, (
        f"{page} says its figures are generated, but these are typed by hand: {found}. Quote them "
        "with a <!-- bench-value: ... --> or <!-- example: ... --> marker, move dated history to "
        "performance/history.md, or, for a setting rather than a measurement, list it in SETTINGS"
    )


def test_results_page_is_what_its_script_renders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """docs/results.md and its curves are exactly what results_examples.py writes from the
    page's own records (only the line naming the command that last wrote it may differ)."""
    monkeypatch.syspath_prepend(
        str(ROOT / "benchmarks")
    )  # the script's sibling imports (peers_docs)
    spec = importlib.util.spec_from_file_location(
        "_docs_test_results_examples", ROOT / "benchmarks" / "results_examples.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    page = DOCS / "results.md"
    rendered = script.render(script.load_records(page), ["(argv)"], tmp_path / "results.md",
                             script.load_superseded(page))
    mine = [
        line
        for line in page.read_text().splitlines()
        if "this page was last written by" not in line
    ]
    theirs = [line for line in rendered.splitlines() if "this page was last written by" not in line]
    assert mine == theirs, (
        "docs/results.md differs from its rendering: run results_examples.py --render-only"
    )
    for svg in sorted((tmp_path / "assets" / "curves").glob("*.svg")):
        committed = DOCS / "assets" / "curves" / svg.name
        assert committed.is_file() and committed.read_text() == svg.read_text(), (
            f"{committed} is stale or missing"
        )


# -- (f) the API reference ---------------------------------------------------------------
API_PACKAGES = [
    "rl_collectors",
    "rl_envs",
    "rl_migrate",
    "rl_modules",
    "rl_objectives",
    "rl_profiling",
    "rl_record",
    "rl_recurrent",
    "rl_replay",
    "rl_trainers",
]


@pytest.mark.parametrize("package", API_PACKAGES)
def test_api_page_has_summary_tables(package: str):
    text = (DOCS / "api" / f"{package}.md").read_text()
    assert f"::: {package}\n" in text and "summary: true" in text, (
        f"api/{package}.md: no summary tables"
    )


def test_hosting_only_methods_are_kept_off_the_api_page():
    internals = (DOCS / "internals" / "collector.md").read_text()
    section = internals.split("## Hosting a Collector", 1)[1].split("\n## ", 1)[0]
    hosting = [re.match(r"`(\w+)\(", row[0])[1] for row in table_rows(section)] + [
        "init_worker_profiling"
    ]
    assert len(hosting) >= 4, f"hosting methods found in collector.md: {hosting}"
    api = (DOCS / "api" / "rl_collectors.md").read_text()
    shown = [name for name in hosting if f'"!^{name}$"' not in api]
    assert not shown, f"api/rl_collectors.md does not filter out the hosting-only methods {shown}"


# -- (g) the strict build's link checks ----------------------------------------------------
@pytest.mark.timeout(120)
def test_strict_build_fails_on_a_broken_anchor(tmp_path: Path):
    """The site's ``validation:`` settings, on a two-page site: a link to a missing anchor
    fails the strict build, the same link to an existing heading passes."""
    config = (ROOT / "mkdocs.yml").read_text()
    validation = re.search(r"^validation:\n(?:[ \t]+.*\n)+", config, flags=re.M)
    assert validation and "anchors: warn" in validation[0], (
        "mkdocs.yml: validation.links.anchors is not on"
    )
    assert re.search(r"^strict: true$", config, flags=re.M) and "\nrepo_url:" not in config
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## Here\n")
    (tmp_path / "mkdocs.yml").write_text(
        f"site_name: t\nstrict: true\nnav:\n  - a.md\n  - b.md\n{validation[0]}"
    )

    def build(anchor: str) -> subprocess.CompletedProcess:
        (tmp_path / "docs" / "a.md").write_text(f"# A\n\n[to b](b.md#{anchor})\n")
        # no -q: mkdocs counts the warnings that --strict turns into a failure only at
        # its default log level, so `build --strict -q` passes with a broken anchor
        return subprocess.run(
            [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=100,
            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        )

    broken = build("nowhere")
    assert broken.returncode != 0 and "#nowhere" in broken.stderr, broken.stderr[-2000:]
    assert build("here").returncode == 0
