"""The ``rl-profile`` command.

``rl-profile summary TRACE.json [MORE.json ...] [--top N]`` prints the top named ranges of
Chrome traces by total and by self time, the share of each category, and a one-line
verdict with the docs page to read next; given the traces of several collector workers it
also names the slow one. Also runs as ``python -m rl_profiling summary ...``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rl_profiling._trace import CATEGORIES, RangeStats, TraceSummary, summarize_traces
from rl_profiling.exceptions import TraceError

__all__ = ["main"]


def _table(title: str, rows: list[RangeStats], profiled_us: float) -> list[str]:
    lines = [title, f"{'total ms':>12} {'self ms':>12} {'calls':>8} {'% prof':>7}  name"]
    for r in rows:
        share = r.total_us / profiled_us if profiled_us else 0.0
        lines.append(
            f"{r.total_us / 1e3:12.3f} {r.self_us / 1e3:12.3f} {r.calls:8d} {share:7.1%}  {r.name}"
        )
    return lines


def format_summary(summary: TraceSummary, path: str, top: int) -> str:
    """The text ``rl-profile summary`` prints for ``summary`` (read from ``path``)."""
    n_ranges = sum(r.calls for r in summary.ranges)
    skipped = ", ".join(f"{n} {cat} events" for cat, n in summary.skipped.items())
    lines = [
        f"trace: {path}",
        f"{n_ranges} ranges on {summary.threads} thread(s), "
        f"{summary.profiled_us / 1e3:.3f} ms profiled (busy thread time)"
        + (f"; skipped {skipped}" if skipped else ""),
        "",
        *_table(f"Top {top} ranges by total time", summary.top_by_total(top), summary.profiled_us),
        "",
        *_table(f"Top {top} ranges by self time", summary.top_by_self(top), summary.profiled_us),
        "",
    ]
    shares = summary.shares()
    labels = {key: label for key, (label, _, _) in CATEGORIES.items()} | {"other": "other"}
    lines.append(
        "Where the time goes: "
        + " | ".join(f"{labels[k]} {v:.1%}" for k, v in shares.items() if v or k == "other")
    )
    lines.extend(_process_lines(summary))
    if summary.gpu_events:
        lines.append(f"GPU: {summary.gpu_us / 1e3:.3f} ms in {summary.gpu_events} kernels/copies")
    lines.append(f"Verdict: {summary.verdict()}")
    slow = summary.slow_worker()
    if slow is not None:
        lines.append(f"Slow worker: {slow}")
    return "\n".join(lines)


def _process_lines(summary: TraceSummary) -> list[str]:
    """One line per process that collected batches, when there are several."""
    workers = [p for p in summary.processes.values() if p.rollouts]
    if len(workers) < 2:
        return []
    lines = ["Batches per process:"]
    for p in sorted(workers, key=lambda p: p.label):
        lines.append(
            f"  {p.label}: {p.rollouts} batches, {p.us_per_rollout / 1e3:.3f} ms per batch, "
            f"{p.busy_us / 1e3:.3f} ms busy"
        )
    return lines


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an int >= 1, got {text}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-profile", description="Read profiler traces.")
    commands = parser.add_subparsers(dest="command", required=True)
    summary = commands.add_parser(
        "summary",
        help="top ranges by total and self time, and where the time goes",
        description="Summarise a Chrome trace (torch.profiler's export_chrome_trace, "
        "ProfilerHook or rl-profiling's recorder): top named ranges by total and self "
        "time, the share of environment / policy / storage / loss time, and a verdict.",
    )
    summary.add_argument(
        "trace", nargs="+", help="Chrome traces (.json or .json.gz): several are read as one"
    )
    summary.add_argument("--top", type=_positive_int, default=15, help="rows per table (15)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``rl-profile``; return the exit status (0 ok, 1 unreadable trace, 2 usage)."""
    args = _parser().parse_args(argv)
    try:
        summary = summarize_traces(args.trace)
    except FileNotFoundError as err:
        print(f"rl-profile summary: error: {err.filename}: no such file", file=sys.stderr)
        return 1
    except (TraceError, OSError) as err:
        print(f"rl-profile summary: error: {err}", file=sys.stderr)
        return 1
    path = " ".join(args.trace)
    if not summary.ranges:
        print(f"rl-profile summary: {path} holds no complete or B/E range events")
        return 0
    print(format_summary(summary, path, args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
