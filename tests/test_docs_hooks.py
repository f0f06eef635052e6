"""The docs' build hooks (``tools/mkdocs_hooks/``) and the results file they quote.

- ``bench_tables``: markers expand from the committed ``benchmarks/results/latest.json``
  (with or without recorded versions), every marker of the performance pages resolves, and
  a wrong marker fails the build with a message that names what exists;
- ``benchmarks/run.py`` records the versions, the command and the commit;
- ``vendored_mermaid``: the pinned script goes before the theme bundle on diagram pages only;
- ``example_results``: example markers expand from the runs recorded on ``docs/results.md``
  and in ``benchmarks/results/health_runs.json``, every marker on the pages resolves, and a
  wrong one fails the build naming what exists.
"""

from __future__ import annotations

import copy
import doctest
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from mkdocs.exceptions import PluginError

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "tools" / "mkdocs_hooks"
RESULTS = ROOT / "benchmarks" / "results" / "latest.json"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


bench_tables = _load(HOOKS / "bench_tables.py", "_docs_hook_bench_tables")
vendored_mermaid = _load(HOOKS / "vendored_mermaid.py", "_docs_hook_vendored_mermaid")
example_results = _load(HOOKS / "example_results.py", "_docs_hook_example_results")
gpu_tables = _load(HOOKS / "gpu_tables.py", "_docs_hook_gpu_tables")


@pytest.fixture(scope="module")
def results() -> dict:
    return bench_tables.load_results(RESULTS)


def test_hook_docstring_examples_run():
    for module in (bench_tables, vendored_mermaid, example_results, gpu_tables):
        outcome = doctest.testmod(module)
        assert outcome.failed == 0, f"{module.__name__}: {outcome}"


def test_table_has_every_row_of_the_bench_and_a_stamp(results: dict):
    for bench in sorted({r["bench"] for r in results["rows"]}):
        rows = [r for r in results["rows"] if r["bench"] == bench]
        out = bench_tables.expand(f"before\n\n<!-- bench: {bench} -->\n\nafter", results, "page.md")
        body = [line for line in out.splitlines() if line.startswith("| ")][2:]  # header, rule
        assert len(body) == len(rows), f"{bench}: {len(body)} table rows for {len(rows)} results"
        assert body[0].split(" | ")[1] == bench_tables.fmt_number(rows[0]["value"]), body[0]
        assert out.startswith("before") and out.rstrip().endswith("after")
        # a bench re-run with ``run.py --merge`` is stamped with its own run's time
        when = results.get("benches", {}).get(bench, results)["time"]
        assert f"Measured {when}" in out


def test_stamp_without_and_with_recorded_versions(results: dict):
    old = {k: v for k, v in results.items() if k not in ("versions", "command", "git_commit")}
    stamp = bench_tables.stamp(old)
    assert "versions not recorded" in stamp and "command not recorded" in stamp
    new = copy.deepcopy(old)
    new.update(versions={"torch": "2.15.0", "rl-envs": "0.1.0"}, command="python benchmarks/run.py",
               git_commit="abc123")
    stamp = bench_tables.stamp(new)
    assert "rl-envs 0.1.0, torch 2.15.0" in stamp and "`python benchmarks/run.py`" in stamp
    assert "`abc123`" in stamp and "not recorded" not in stamp


def test_value_and_ratio_markers(results: dict):
    row = results["rows"][0]
    marker = (f'<!-- bench-value: {row["bench"]} "{row["figure"]}" --> and '
              f'<!-- bench-ratio: {row["bench"]} "{row["figure"]}" -->')
    out = bench_tables.expand(marker, results, "page.md")
    assert (
        out
        == f"{bench_tables.fmt_number(row['value'])} {row['unit']} and "
           f"{bench_tables.fmt_number(row['ratio'])}"
    )


def test_match_keeps_only_matching_figures(results: dict):
    out = bench_tables.expand('<!-- bench: replay match="@100k" -->', results, "p.md")
    figures = [line.split(" | ")[0] for line in out.splitlines() if line.startswith("| ")][2:]
    assert figures and all("@100k" in f for f in figures)


def test_figure_text_is_literal_in_the_table():
    results = {"time": "t", "rows": [{"bench": "b", "figure": "with <a x>: GymEnv._fast_step | *y*",
                                      "value": 1.0, "unit": "ns", "limit": 1.0, "ratio": 1.0}]}
    out = bench_tables.expand("<!-- bench: b -->", results, "p.md")
    assert r"with &lt;a x&gt;: GymEnv.\_fast\_step \| \*y\*" in out


def test_wrong_markers_fail_with_what_exists(results: dict):
    with pytest.raises(PluginError, match=r"p\.md: bench 'nope' has no row .*'replay'"):
        bench_tables.expand("<!-- bench: nope -->", results, "p.md")
    with pytest.raises(PluginError, match="has 0 rows named 'nope', expected exactly one"):
        bench_tables.expand('<!-- bench-value: replay "nope" -->', results, "p.md")
    with pytest.raises(PluginError, match="no figure of bench 'replay' contains 'zzz'"):
        bench_tables.expand('<!-- bench: replay match="zzz" -->', results, "p.md")


def test_missing_or_bad_results_file(tmp_path: Path):
    with pytest.raises(PluginError, match="not found: run `uv run python benchmarks/run.py`"):
        bench_tables.load_results(tmp_path / "latest.json")
    (tmp_path / "bad.json").write_text("[1, 2]")
    with pytest.raises(PluginError, match="expected an object with a 'rows' list"):
        bench_tables.load_results(tmp_path / "bad.json")


def test_performance_pages_quote_the_results_through_markers(results: dict):
    pages = sorted((ROOT / "docs" / "performance").glob("*.md"))
    markers = 0
    for page in pages:
        text = page.read_text()
        markers += len(bench_tables.TABLE.findall(text)) + len(bench_tables.VALUE.findall(text))
        out = bench_tables.expand(
            text, results, page.name
        )  # raises on a marker that does not resolve
        assert "<!-- bench" not in out.replace("<!-- bench: ... -->", "").replace(
            "<!-- bench-value: ... -->", ""
        )
    assert markers >= 10, f"only {markers} bench markers in docs/performance/"


def test_run_records_versions_command_and_commit():
    run = _load(ROOT / "benchmarks" / "run.py", "_bench_runner")
    meta = run.metadata()
    assert set(meta) >= {"time", "machine", "versions", "command", "argv", "git_commit"}
    for module in run.OURS:
        assert (
            meta["versions"][module.replace("_", "-")]
            == importlib.import_module(module).__version__
        )
    for name in ("python", "torch", "tensordict", "gymnasium", "numpy"):
        assert re.fullmatch(r"\d+\.\d+.*", meta["versions"][name]), (name, meta["versions"][name])
    assert meta["command"].startswith("python ") and meta["argv"] == sys.orig_argv
    stamp = bench_tables.stamp(json.loads(json.dumps({**meta, "rows": []})))
    assert "not recorded" not in stamp and "rl-replay " in stamp
    # the CPU's model, not only its architecture: the VM behind the project changes
    assert meta["machine"]["cpu"] and f"on {meta['machine']['cpu']}, " in stamp


def test_mermaid_script_only_on_pages_with_a_diagram():
    bundle = '<script src="../../assets/javascripts/bundle.a5f9d56c.min.js"></script>'
    page = f'<body><pre class="mermaid"><code>graph TD</code></pre>{bundle}</body>'
    out = vendored_mermaid.add_script(page, "p.md")
    assert f'<script src="../../{vendored_mermaid.MERMAID}"></script>\n{bundle}' in out
    plain = f"<body><p>no diagram</p>{bundle}</body>"
    assert vendored_mermaid.add_script(plain, "p.md") == plain
    with pytest.raises(PluginError, match="no mkdocs-material bundle"):
        vendored_mermaid.add_script('<pre class="mermaid">x</pre>', "p.md")
    assert (ROOT / "docs" / vendored_mermaid.MERMAID).is_file()


def test_a_merged_bench_is_stamped_with_its_own_run():
    row = {"figure": "f", "value": 1.0, "unit": "us", "limit": 1.0, "ratio": 1.0}
    merged = {
        "time": "2026-01-01T00:00:00",
        "command": "python benchmarks/run.py",
        "git_commit": "full111",
        "rows": [{"bench": "a", **row}, {"bench": "b", **row}],
        "benches": {
            "a": {
                "time": "2026-02-02T02:02:02",
                "command": "python benchmarks/run.py --merge a",
                "git_commit": "part222",
            }
        },
    }
    own, other = bench_tables.table(merged, "a", "page"), bench_tables.table(merged, "b", "page")
    assert "2026-02-02T02:02:02" in own and "--merge a" in own and "part222" in own
    assert "2026-01-01T00:00:00" in other and "--merge" not in other and "full111" in other


def _run(example: str, seed: int, returns: list[float]) -> dict:
    return {
        "example": example,
        "seed": seed,
        "mean_return": returns[-1],
        "frames_to_threshold": None,
        "seconds": 1.0,
        "fps": 2.0,
        "started": f"2026-01-01 00:0{seed} UTC",
        "load_avg_1min_before": 0.5,
        "series": {"charts/episodic_return": [[100 * (i + 1), r] for i, r in enumerate(returns)]},
    }


def test_example_summary_and_series_come_from_the_records():
    records = [_run("a", 0, [10.0, 30.0]), _run("a", 1, [20.0, 50.0]), _run("b", 0, [1.0])]
    out = example_results.expand("<!-- example: a -->", records, "p.md")
    assert out.startswith("final return 40.0 [30.0, 50.0], its target reached by none of 2")
    assert "seeds 0, 1" in out and "2026-01-01 00:00 UTC to 2026-01-01 00:01 UTC" in out
    brief = example_results.expand("<!-- example-brief: a -->", records, "p.md")
    assert (
        brief == "final return 40.0 [30.0, 50.0], its target reached by none of 2"
        and out.startswith(brief)
    )
    out = example_results.expand(
        "<!-- example-series: a charts/episodic_return -->", records, "p.md"
    )
    assert out == "first 15, median over the run 27.5, largest 40, last 40 (median of 2 seeds)"


def test_runs_of_earlier_code_are_quoted_only_without_current_ones_and_say_so():
    old = dict(_run("a", 0, [5.0]), code="0ld", superseded=True)
    out = example_results.expand("<!-- example-brief: a -->", [old], "p.md")
    assert out == ("final return 5.0, its target reached by none of 1 (runs of an earlier "
                   "version of the example's code, `0ld`: no run of its current code is "
                   "recorded yet)")
    series = example_results.expand("<!-- example-series: a charts/episodic_return -->",
                                    [old], "p.md")
    assert series.endswith("(median of 1 seeds, runs of an earlier version of the example's "
                           "code, `0ld`)")
    both = example_results.expand("<!-- example-brief: a -->", [old, _run("a", 0, [7.0])], "p.md")
    assert both == "final return 7.0, its target reached by none of 1"  # the current run only


def test_wrong_example_markers_fail_with_what_exists():
    records = [_run("a", 0, [1.0])]
    with pytest.raises(PluginError, match=r"p\.md: no run of example 'zzz' .*recorded: \['a'\]"):
        example_results.expand("<!-- example: zzz -->", records, "p.md")
    with pytest.raises(
        PluginError, match=r"holds the series 'losses/x'; its series: \['charts/episodic_return'\]"
    ):
        example_results.expand("<!-- example-series: a losses/x -->", records, "p.md")


def test_every_example_marker_on_the_pages_resolves():
    records = example_results.all_records(ROOT / "docs" / "results.md")
    pages = [p for p in sorted((ROOT / "docs").rglob("*.md")) if "<!-- example" in p.read_text()]
    assert len(pages) >= 2, f"pages with example markers: {pages}"
    for page in pages:
        out = example_results.expand(
            page.read_text(), records, page.name
        )  # raises on one that does not resolve
        assert not any(
            marker.search(out)
            for marker in (example_results.SUMMARY, example_results.BRIEF, example_results.SERIES)
        )


def test_gpu_markers_quote_the_record_and_wrong_ones_fail(tmp_path: Path):
    record = gpu_tables.load_record(ROOT / "benchmarks" / "results" / "gpu.json")
    pages = [p for p in (ROOT / "docs").rglob("*.md") if gpu_tables.MARKER.search(p.read_text())]
    assert {p.name for p in pages} >= {"gpu.md", "results.md"}
    for page in pages:
        out = gpu_tables.expand(page.read_text(), record, page.name)
        assert "<!-- gpu:" not in out
    table = gpu_tables.expand("<!-- gpu: updates -->", record, "p.md").splitlines()[2:]
    assert len(table) == len(record["sections"]["updates"])
    assert record["device"] in gpu_tables.expand("<!-- gpu: stamp -->", record, "p.md")
    with pytest.raises(PluginError, match=r"p.md: <!-- gpu: nope -->: unknown"):
        gpu_tables.expand("<!-- gpu: nope -->", record, "p.md")
    with pytest.raises(PluginError, match="has no 'lstm' section"):
        gpu_tables.expand("<!-- gpu: lstm -->", {"sections": {}}, "p.md")
    dry = tmp_path / "gpu.json"
    dry.write_text(json.dumps({**record, "dry_run": True}))
    with pytest.raises(PluginError, match="dry run"):
        gpu_tables.load_record(dry)
    with pytest.raises(PluginError, match="not found"):
        gpu_tables.load_record(tmp_path / "absent.json")
