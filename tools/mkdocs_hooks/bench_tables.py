"""mkdocs hook: quote ``benchmarks/results/latest.json`` in the docs, so figures cannot drift.

Listed under ``hooks:`` in ``mkdocs.yml``. Before a page's Markdown is rendered, two
markers are expanded from the results file that ``benchmarks/run.py`` writes:

- ``<!-- bench: NAME -->`` becomes a table of every row of ``bench_NAME.py`` (figure,
  value, unit, limit, ratio), followed by a stamp line: when and on what machine the
  figures were measured, the package versions and the command that produced them.
  ``<!-- bench: NAME match="TEXT" -->`` keeps only the rows whose figure contains TEXT.
- ``<!-- bench-value: NAME "FIGURE" -->`` becomes the value and unit of the one row of
  that bench whose figure is exactly FIGURE (for figures quoted in prose);
  ``<!-- bench-ratio: NAME "FIGURE" -->`` becomes its ratio.

A marker naming an unknown bench, a figure that is not there, or a missing results file
fails the build with a message that says which page and marker, and what is available.
Results written before ``run.py`` recorded versions and the command (no ``versions`` /
``command`` key) are stamped "versions not recorded" / "command not recorded".

Examples:
    >>> results = {"time": "2026-01-01T00:00:00", "machine": {"cpus": 2}, "rows": [
    ...     {"bench": "b", "figure": "x / y", "value": 1.5, "unit": "ms", "limit": 3.0,
    ...      "ratio": 0.5}]}
    >>> print(expand('<!-- bench-value: b "x / y" -->', results, "page.md"))
    1.50 ms
"""

from __future__ import annotations

import html
import json
import math
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

RESULTS = Path("benchmarks") / "results" / "latest.json"  # relative to mkdocs.yml's directory
TABLE = re.compile(r"<!--\s*bench:\s*(?P<name>[\w-]+)(?:\s+match=\"(?P<match>[^\"]*)\")?\s*-->")
VALUE = re.compile(r"<!--\s*bench-(?P<what>value|ratio):\s*(?P<name>[\w-]+)"
                   r"\s+\"(?P<figure>[^\"]+)\"\s*-->")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def fmt_number(x: float) -> str:
    """A figure as people read it: thousands separated, about four significant digits."""
    if not math.isfinite(x):
        return str(x)
    if x == 0:
        return "0"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 0.01:
        return f"{x:.{max(0, 2 - math.floor(math.log10(abs(x))))}f}"
    return f"{x:.3g}"


def _cell(text: str) -> str:
    """Figure names as literal text in a Markdown table cell (``<a x>``, ``_x_``, ``|``)."""
    return _MD_SPECIAL.sub(r"\\\1", html.escape(text, quote=False))


def stamp(results: dict, name: str | None = None) -> str:
    """One line: when, where, with which versions and which command the figures were made.

    A bench re-run alone with ``run.py --merge`` has its own metadata under
    ``results["benches"][name]``, which then replaces the file's.
    """
    results = {**results, **results.get("benches", {}).get(name, {})} if name else results
    machine = dict(results.get("machine", {}))
    versions = results.get("versions")
    if versions and "python" in versions:
        machine.pop("python", None)  # said once, with the versions
    where = ", ".join(
        part
        for part in (
            machine.get("cpu") or machine.get("machine"),
            f"{machine['cpus']} CPUs" if "cpus" in machine else None,
            f"Python {machine['python']}" if "python" in machine else None,
        )
        if part
    )
    if versions:
        versions_text = ", ".join(f"{name} {version}" for name, version in sorted(versions.items()))
    else:
        versions_text = "versions not recorded"
    command = results.get("command")
    command_text = f"by `{command}`" if command else "command not recorded"
    commit = results.get("git_commit")
    commit_text = f" at commit `{commit}`" if commit else ""
    return (
        f"*Measured {results.get('time', '(time not recorded)')} on "
        f"{where or 'an unrecorded machine'}; {versions_text}; {command_text}{commit_text}; "
        f"from `benchmarks/results/latest.json`.*"
    )


def _rows(results: dict, name: str, where: str) -> list[dict]:
    rows = [r for r in results.get("rows", []) if r.get("bench") == name]
    if not rows:
        known = sorted({r.get("bench") for r in results.get("rows", [])})
        raise PluginError(
            f"{where}: bench {name!r} has no row in {RESULTS}; benches there: {known}"
        )
    return rows


def table(results: dict, name: str, where: str, match: str | None = None) -> str:
    """The Markdown table of bench ``name``'s rows (optionally those containing ``match``)."""
    rows = _rows(results, name, where)
    if match is not None:
        rows = [r for r in rows if match in r["figure"]]
        if not rows:
            raise PluginError(f"{where}: no figure of bench {name!r} contains {match!r}")
    lines = ["| Figure | Value | Unit | Limit | Ratio |", "| --- | ---: | --- | ---: | ---: |"]
    for r in rows:
        cells = [_cell(r["figure"]), fmt_number(r["value"]), _cell(r["unit"]),
                 fmt_number(r["limit"]), fmt_number(r["ratio"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + stamp(results, name) + "\n"


def value(results: dict, name: str, figure: str, where: str, what: str = "value") -> str:
    """``"<value> <unit>"`` (or the ratio) of the row of bench ``name`` named ``figure``."""
    rows = _rows(results, name, where)
    found = [r for r in rows if r["figure"] == figure]
    if len(found) != 1:
        raise PluginError(
            f"{where}: bench {name!r} has {len(found)} rows named {figure!r}, expected exactly "
            f"one; its figures: {[r['figure'] for r in rows]}"
        )
    row = found[0]
    if what == "ratio":
        return fmt_number(row["ratio"])
    return f"{fmt_number(row['value'])} {html.escape(row['unit'], quote=False)}"


def expand(markdown: str, results: dict, where: str) -> str:
    """Replace every bench marker in ``markdown`` (``where`` names the page in errors)."""
    markdown = TABLE.sub(lambda m: table(results, m["name"], where, m["match"]), markdown)
    return VALUE.sub(lambda m: value(results, m["name"], m["figure"], where, m["what"]), markdown)


def load_results(path: Path) -> dict:
    """Read the results file; a missing or unreadable one is a build error that says why."""
    try:
        results = json.loads(path.read_text())
    except FileNotFoundError:
        raise PluginError(
            f"{path} not found: run `uv run python benchmarks/run.py` to write it"
        ) from None
    except json.JSONDecodeError as exc:
        raise PluginError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(results, dict) or not isinstance(results.get("rows"), list):
        raise PluginError(
            f"{path}: expected an object with a 'rows' list, got {type(results).__name__}"
        )
    return results


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (mkdocs hook API)
    """mkdocs event: expand the markers of one page (the results file is read only if needed)."""
    if "<!-- bench" not in markdown and "<!--bench" not in markdown:
        return markdown
    path = Path(config.config_file_path).parent / RESULTS
    return expand(markdown, load_results(path), page.file.src_uri)
