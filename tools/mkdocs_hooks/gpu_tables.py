"""mkdocs hook: quote ``benchmarks/results/gpu.json`` (the prepared GPU check's record).

Listed under ``hooks:`` in ``mkdocs.yml``. ``<!-- gpu: NAME -->`` becomes, from the file
``tools/gpu/run_check.py`` writes on a lent GPU machine (schema: ``docs/gpu.md``):

- ``stamp``: where and when it ran, with what (device, torch, triton, tensordict), the
  CUDA-only tests' outcome and the record's note;
- ``updates``: ours and plain torch per row and mode, frames/s and their ratio;
- ``speedups``: eager -> compile + CUDA graphs per row, ours and plain, beside LeanRL's;
- ``replay``: the prioritized step, numba on the CPU against Triton on the GPU;
- ``lstm``: the ``"triton"`` recurrent backend against cuDNN's ``nn.LSTM``.

A name not in that list, a section the record lacks, or a missing or dry-run record
fails the build and says which page and marker.

Examples:
    >>> record = {"device": "GPU", "torch": "2", "triton": "3", "tensordict": "0",
    ...           "started": "2026-01-01T00:00:00Z", "dry_run": False, "sections": {
    ...           "replay": [{"batch": 256, "numba_cpu_us": 36.0, "triton_cuda_us": 95.0,
    ...                       "speedup": 0.38}]}}
    >>> print(expand("<!-- gpu: replay -->", record, "page.md").splitlines()[2])
    | 256 | 36.0 | 95.0 | 0.38x |
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from mkdocs.exceptions import PluginError

RECORD = Path("benchmarks") / "results" / "gpu.json"  # relative to mkdocs.yml's directory
MARKER = re.compile(r"<!--\s*gpu:\s*(?P<name>[\w-]+)\s*-->")
LEANRL_SPEEDUP = {"ppo_atari": 1.83, "ppo_continuous": 2.6, "sac": 5.6, "td3": 3.8}
"""LeanRL's README, compile + CUDA graphs over its own eager script (whole runs)."""
MODES = {"eager": "eager", "compile": "compile", "cudagraphs": "compile + CUDA graphs"}


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.1f}"


def stamp(record: dict) -> str:
    tests = record.get("tests")
    ran = "CUDA-only tests: not recorded"
    if tests:
        failed = tests.get("failed", [])
        ran = f"CUDA-only tests: {tests['passed']} passed, {len(failed)} failed"
        ran += f" ({', '.join(f'`{n}`' for n in failed)})" if failed else ""
    note = f" {record['note']}" if record.get("note") else ""
    return (f"*Measured on {record['device']}, {record['started']} (torch {record['torch']}, "
            f"triton {record['triton']}, tensordict {record['tensordict']}); {ran}.{note}*")


def _section(record: dict, name: str, where: str) -> list[dict]:
    rows = record.get("sections", {}).get(name)
    if not rows:
        have = sorted(record.get("sections", {}))
        raise PluginError(f"{where}: <!-- gpu: {name} -->: gpu.json has no {name!r} section "
                          f"(it has {have})")
    return rows


def updates(record: dict, where: str) -> str:
    out = ["| Row | Mode | Ours (frames/s) | Plain torch (frames/s) | Ours / plain | "
           "Warm-up s (ours / plain) |", "| --- | --- | ---: | ---: | ---: | ---: |"]
    for r in _section(record, "updates", where):
        w = r["warmup_seconds"]
        out.append(f"| {r['row']} | {MODES[r['mode']]} | {_num(r['ours_fps'])} | "
                   f"{_num(r['plain_fps'])} | {r['ours_over_plain']:.3f} | "
                   f"{w['ours']:.1f} / {w['plain']:.1f} |")
    return "\n".join(out)


def speedups(record: dict, where: str) -> str:
    by = {(r["row"], r["mode"]): r for r in _section(record, "updates", where)}
    out = ["| Row | Ours: graphed / eager | Plain: graphed / eager | LeanRL (whole run) |",
           "| --- | ---: | ---: | ---: |"]
    for row, leanrl in LEANRL_SPEEDUP.items():
        eager, graphed = by.get((row, "eager")), by.get((row, "cudagraphs"))
        if eager and graphed:
            out.append(f"| {row} | {graphed['ours_fps'] / eager['ours_fps']:.1f}x | "
                       f"{graphed['plain_fps'] / eager['plain_fps']:.1f}x | {leanrl}x |")
    return "\n".join(out)


def replay(record: dict, where: str) -> str:
    out = ["| Batch | numba tree, CPU (us) | Triton tree, GPU (us) | GPU speed-up |",
           "| ---: | ---: | ---: | ---: |"]
    for r in _section(record, "replay", where):
        gpu, speedup = r.get("triton_cuda_us"), r.get("speedup")
        gpu_cell = "-" if gpu is None else f"{gpu:.1f}"
        speedup_cell = "-" if speedup is None else f"{speedup:.2f}x"
        out.append(f"| {r['batch']:,} | {r['numba_cpu_us']:,.1f} | {gpu_cell} | {speedup_cell} |")
    return "\n".join(out)


def lstm(record: dict, where: str) -> str:
    out = ["| Shape [B, T] | Hidden | Triton backend (ms) | cuDNN nn.LSTM (ms) | Ratio |",
           "| --- | ---: | ---: | ---: | ---: |"]
    for r in _section(record, "lstm", where):
        out.append(f"| {r['shape']} | {r['hidden']} | {r['triton_ms']:.2f} | "
                   f"{r['nn_lstm_ms']:.2f} | {r['ratio']:.2f}x |")
    return "\n".join(out)


RENDER = {"updates": updates, "speedups": speedups, "replay": replay, "lstm": lstm,
          "stamp": lambda record, where: stamp(record)}


def expand(markdown: str, record: dict, where: str) -> str:
    """Replace every ``<!-- gpu: NAME -->`` marker of one page."""

    def one(m: re.Match) -> str:
        name = m["name"]
        if name not in RENDER:
            raise PluginError(f"{where}: <!-- gpu: {name} -->: unknown; one of {sorted(RENDER)}")
        return RENDER[name](record, where)

    return MARKER.sub(one, markdown)


def load_record(path: Path) -> dict:
    """Read ``gpu.json``; missing, unreadable or a dry run is a build error that says why."""
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise PluginError(f"{path} not found: tools/gpu/run_check.py writes it on a GPU "
                          "machine (docs/gpu.md)") from None
    except json.JSONDecodeError as exc:
        raise PluginError(f"{path} is not valid JSON: {exc}") from None
    if record.get("dry_run"):
        raise PluginError(f"{path} is a dry run's (CPU) record: its figures mean nothing")
    return record


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (mkdocs hook API)
    """mkdocs event: expand the markers of one page (the record is read only if needed)."""
    if not MARKER.search(markdown):
        return markdown
    path = Path(config.config_file_path).parent / RECORD
    return expand(markdown, load_record(path), page.file.src_uri)
