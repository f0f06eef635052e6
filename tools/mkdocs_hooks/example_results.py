"""mkdocs hook: quote the example runs recorded on ``docs/results.md``, so their figures
cannot drift.

Listed under ``hooks:`` in ``mkdocs.yml``. ``benchmarks/results_examples.py`` keeps every
run of the example trainers as a JSON record at the end of ``docs/results.md``; before a
page's Markdown is rendered, two markers are expanded from those records and from the
short, deliberately wrong runs that its ``--health`` option keeps in
``benchmarks/results/health_runs.json`` (for the "Is my run healthy?" page):

- ``<!-- example: NAME -->`` becomes one sentence on example ``NAME``'s runs: the final
  return, the frames to its target (and how many seeds reached it), the wall time and the
  frames per second, each as ``median [min, max]`` over the seeds, with when the runs
  started and the machine's load then;
- ``<!-- example-brief: NAME -->`` becomes the first half of that sentence (the final
  return and the frames to the target), short enough for a table cell;
- ``<!-- example-series: NAME TAG -->`` becomes what the logged scalar ``TAG`` (for
  example ``losses/kl_approx``) did over those runs: its first value, its median over the
  run, its largest value and its last value, each the median over the seeds.

The records are read with the script's own ``load_records`` and formatted with its own
``spread``. A marker naming an example without a record, or a series no record holds,
fails the build with a message that names the page, the marker and what exists.

Examples:
    >>> records = [{"example": "a", "seed": s, "mean_return": r, "frames_to_threshold": f,
    ...             "seconds": 10.0 + s, "fps": 100.0, "started": "2026-01-01 00:0%d UTC" % s,
    ...             "load_avg_1min_before": 1.0, "series": {"losses/x": [[1, 0.5], [2, 0.1]]}}
    ...            for s, r, f in ((0, 500.0, 1000), (1, 400.0, None))]
    >>> expand("<!-- example-series: a losses/x -->", records, "page.md")
    'first 0.5, median over the run 0.3, largest 0.5, last 0.1 (median of 2 seeds)'
"""

from __future__ import annotations

import importlib.util
import json
import re
import statistics
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "results_examples.py"
SUMMARY = re.compile(r"<!--\s*example:\s*(?P<name>\w+)\s*-->")
BRIEF = re.compile(r"<!--\s*example-brief:\s*(?P<name>\w+)\s*-->")
SERIES = re.compile(r"<!--\s*example-series:\s*(?P<name>\w+)\s+(?P<tag>[\w/]+)\s*-->")


def _script():
    """``benchmarks/results_examples.py`` as a module (its top level imports only the stdlib)."""
    name = "_docs_hook_results_examples"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, SCRIPT)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def _spread(values: list[float], fmt: str) -> str:
    return _script().spread(values, fmt)


def _runs(records: list[dict], name: str, where: str) -> list[dict]:
    """``name``'s runs of its current code, else its last runs of earlier code (marked)."""
    mine = [r for r in records if r["example"] == name]
    runs = [r for r in mine if not r.get("superseded")] or mine
    runs = sorted(runs, key=lambda r: r["seed"])
    if not runs:
        known = sorted({r["example"] for r in records})
        raise PluginError(f"{where}: no run of example {name!r} is recorded (docs/results.md, "
                          f"benchmarks/results/health_runs.json); recorded: {known}")
    return runs


def brief(records: list[dict], name: str, where: str) -> str:
    """The final return and the frames to target of example ``name``'s recorded runs."""
    runs = _runs(records, name, where)
    reached = [float(r["frames_to_threshold"]) for r in runs
               if r.get("frames_to_threshold") is not None]
    target = (f"its target reached by {len(reached)} of {len(runs)} at "
              f"{_spread(reached, '{:,.0f}')} frames"
              if reached else f"its target reached by none of {len(runs)}")
    earlier = (f" (runs of an earlier version of the example's code, `{runs[0]['code']}`: "
               "no run of its current code is recorded yet)" if runs[0].get("superseded") else "")
    return (f"final return {_spread([r['mean_return'] for r in runs], '{:.1f}')}, {target}"
            f"{earlier}")


def summary(records: list[dict], name: str, where: str) -> str:
    """One sentence on example ``name``'s recorded runs (every figure from the records)."""
    runs = _runs(records, name, where)
    starts = sorted(r["started"] for r in runs)
    loads = [r["load_avg_1min_before"] for r in runs]
    seeds = ", ".join(str(r["seed"]) for r in runs)
    which = (f"median [min, max] over seeds {seeds}, runs started {starts[0]} to {starts[-1]} "
             f"at a 1-minute load average of {min(loads):.1f} to {max(loads):.1f}"
             if len(runs) > 1 else
             f"one run (seed {seeds}), started {starts[0]} at a 1-minute load average of "
             f"{loads[0]:.1f}")
    return (f"{brief(records, name, where)}, {_spread([r['seconds'] for r in runs], '{:,.0f}')} s "
            f"of wall time ({_spread([r['fps'] for r in runs], '{:,.0f}')} frames/s including "
            f"training); {which}")


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def series(records: list[dict], name: str, tag: str, where: str) -> str:
    """What the logged scalar ``tag`` did over example ``name``'s recorded runs."""
    runs = [r for r in _runs(records, name, where) if tag in r.get("series", {})]
    if not runs:
        tags = sorted({t for r in records if r["example"] == name for t in r.get("series", {})})
        raise PluginError(
            f"{where}: no recorded run of {name!r} holds the series {tag!r}; its series: {tags}"
        )
    values = [[v for _, v in r["series"][tag]] for r in runs]
    med = statistics.median
    earlier = (f", runs of an earlier version of the example's code, `{runs[0]['code']}`"
               if runs[0].get("superseded") else "")
    return (f"first {_fmt(med(v[0] for v in values))}, median over the run "
            f"{_fmt(med(med(v) for v in values))}, largest {_fmt(med(max(v) for v in values))}, "
            f"last {_fmt(med(v[-1] for v in values))} (median of {len(runs)} seeds{earlier})")


def expand(markdown: str, records: list[dict], where: str) -> str:
    """Replace every example marker in ``markdown`` (``where`` names the page in errors)."""
    markdown = SUMMARY.sub(lambda m: summary(records, m["name"], where), markdown)
    markdown = BRIEF.sub(lambda m: brief(records, m["name"], where), markdown)
    return SERIES.sub(lambda m: series(records, m["name"], m["tag"], where), markdown)


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (mkdocs hook API)
    """mkdocs event: expand the markers of one page (the records are read only if needed)."""
    if "<!-- example" not in markdown:
        return markdown
    return expand(markdown, all_records(Path(config.docs_dir) / "results.md"), page.file.src_uri)


def all_records(results_page: Path) -> list[dict]:
    """The examples' runs (``results_page``) and the health page's short runs (``HEALTH_RUNS``)."""
    script = _script()
    health = json.loads(script.HEALTH_RUNS.read_text()) if script.HEALTH_RUNS.exists() else []
    kept = [dict(r, superseded=True) for r in script.load_superseded(results_page)]
    return script.load_records(results_page) + kept + health
