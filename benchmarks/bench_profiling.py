"""What rl-profiling's named ranges cost per call, armed or not.

Usage::

    uv run python benchmarks/bench_profiling.py      # or: uv run python benchmarks/run.py profiling

``RL_PROFILING`` is read once, at import, so each mode is measured in its own fresh
Python (a child process started by :func:`run`): not armed, then armed (runtime-disabled,
then enabled with torch importable but no profiler running). Each figure is the best of
15 ``timeit`` repeats, in nanoseconds per call, the loop's own overhead included (it is in
the plain-function reference too).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import timeit

RECORD_LIMIT_NS = 150.0  # issue 2: `with record(...)` when off costs at most this
REPEAT = 15  # many short repeats, keep the best of each: robust to a shared, busy machine


def _ns(stmts: dict[str, str], namespace: dict, number: int) -> dict[str, float]:
    """Best ns per run of each statement; repeats interleave the statements, so that they
    see the same machine load and compare with each other."""
    timers = {key: timeit.Timer(stmt, globals=namespace) for key, stmt in stmts.items()}
    best = dict.fromkeys(stmts, float("inf"))
    for _ in range(REPEAT):
        for key, timer in timers.items():
            best[key] = min(best[key], timer.timeit(number) / number * 1e9)
    return best


def _child() -> dict:
    """Measure in this process, armed or not as RL_PROFILING says."""
    from rl_profiling import ARMED, Timing, profiled, record, set_profiling_enabled

    def plain() -> None:
        return None

    wrapped = profiled("bench.plain")(plain)
    null = contextlib.nullcontext()
    ns = {"plain": plain, "wrapped": wrapped, "record": record, "null": null, "timing": Timing()}
    if not ARMED:
        return {
            "armed": False,
            "is_plain": wrapped is plain,
            **_ns(
                {
                    "plain": "plain()",
                    "profiled": "wrapped()",
                    "null": "with null: pass",
                    "record": "with record('bench.block'): pass",
                    "timing": "with timing.add_time('x'): pass",
                },
                ns,
                50_000,
            ),
        }
    set_profiling_enabled(False)
    stmts = {"profiled": "wrapped()", "record": "with record('bench.block'): pass"}
    out = {
        "armed": True,
        "is_plain": wrapped is plain,
        "plain": _ns({"plain": "plain()"}, ns, 50_000)["plain"],
    }
    out.update({f"{k}_disabled": v for k, v in _ns(stmts, ns, 50_000).items()})
    set_profiling_enabled(True)
    with record("warm-up"):  # imports torch once, outside the measurement
        pass
    out["torch"] = "torch" in sys.modules
    out.update({f"{k}_enabled": v for k, v in _ns(stmts, ns, 50_000).items()})
    if out["torch"]:  # the cost while a profiler records (a few thousand events)
        import torch

        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            out["record_profiler"] = _ns({"r": stmts["record"]}, ns, 300)["r"]
    return out


def _measure(armed: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "RL_PROFILING"}
    if armed:
        env["RL_PROFILING"] = "1"
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child"],
        env=env, capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run() -> list[dict]:
    """Rows for benchmarks/run.py: figure, value (ns), unit, limit, ratio."""
    off, on = _measure(armed=False), _measure(armed=True)
    assert off["is_plain"], "not armed, @profiled must return the plain function itself"
    assert not on["is_plain"]
    plain = off["plain"]
    backend = "torch" if on["torch"] else "stdlib recorder"

    def row(figure: str, value: float, limit: float) -> dict:
        return {
            "figure": figure,
            "value": value,
            "unit": "ns/call",
            "limit": limit,
            "ratio": value / limit,
        }

    return [
        row("plain function call (reference; ratio 1)", plain, plain),
        row(
            f"@profiled fn, not armed (is the plain fn: {off['is_plain']}); "
            "ratio to plain, target 1",
            off["profiled"], plain,
        ),
        row("with <a nullcontext>: pass (floor of any with-block here); ratio to 150 ns",
            off["null"], RECORD_LIMIT_NS),
        row("with record() off, not armed; ratio to the 150 ns limit, lower is better (<= 1)",
            off["record"], RECORD_LIMIT_NS),
        row("with record() off, not armed; ratio to the with-nullcontext floor above (info)",
            off["record"], off["null"]),
        row("@profiled fn, armed, runtime-disabled; ratio to plain (same process), lower is better",
            on["profiled_disabled"], on["plain"]),
        row("with record() armed, runtime-disabled; ratio to the 150 ns limit, lower is better",
            on["record_disabled"], RECORD_LIMIT_NS),
        row(f"@profiled fn, armed+enabled ({backend}, no profiler running); "
            "ratio to plain (same process)", on["profiled_enabled"], on["plain"]),
        row(f"with record() armed+enabled ({backend}, no profiler running); ratio to 150 ns",
            on["record_enabled"], RECORD_LIMIT_NS),
        row("with record() armed+enabled, under a running torch.profiler (info); ratio to 150 ns",
            on.get("record_profiler", float("nan")), RECORD_LIMIT_NS),
        row("with Timing.add_time() block (info); ratio to plain", off["timing"], plain),
    ]  # fmt: skip


def main() -> None:
    if "--child" in sys.argv:
        print(json.dumps(_child()))
        return
    rows = run()
    width = max(len(r["figure"]) for r in rows)
    print(f"{'figure':<{width}}  {'ns/call':>9}  {'limit':>8}  {'ratio':>7}")
    for r in rows:
        print(f"{r['figure']:<{width}}  {r['value']:9.1f}  {r['limit']:8.1f}  {r['ratio']:7.2f}")


if __name__ == "__main__":
    main()
