"""Run the example trainers for several seeds and write ``docs/results.md`` from what they print.

    uv run python benchmarks/results_examples.py                      # 3 seeds of every example
    uv run python benchmarks/results_examples.py --seeds 1 dqn_prioritized
    uv run python benchmarks/results_examples.py --render-only        # rewrite the page only
    uv run python benchmarks/results_examples.py --health             # the health page's short runs

Each run is ``python examples/<name>.py --seed K --logdir <tmp>`` in a fresh process. The
last stdout line (one JSON object: frames, seconds, mean_return, fps) gives the final
return, the wall time and the frames per second; the TensorBoard scalar
``charts/episodic_return`` (mean of the last 20 episodes, logged after every batch) gives
the frames to threshold: the first logged frame count at which it reaches the example's
target. Every run's record is kept in the page itself (an HTML comment at its end), so a
later call adds the missing (example, seed) pairs and re-renders the table from all runs;
``--rerun`` runs them again. Each record carries the fingerprint of the example's code
(its syntax tree without docstrings and comments, so the ``Config`` defaults included):
records of an example whose code has changed since are dropped when the script runs, so
runs of old and new hyper-parameters are never mixed (the page then shows only what the
current code reaches, and lists the examples it has no run of). The last runs of an example
with no run of its current code are kept apart (``SUPERSEDED_MARK``), in their own table,
because other pages quote them through the hook, which says they ran earlier code. Only
measured figures go into the table; the published figures beside them are quoted from the
cited pages.

Each record also keeps every scalar series the run logged (``charts/episodic_return`` and
the ``losses/*`` diagnostics), thinned to ``CURVE_POINTS`` points. From the returns the
page's learning curves are drawn, one hand-written SVG per example under
``docs/assets/curves/`` (median and [min, max] over the seeds, no plotting dependency);
the diagnostics are quoted by ``docs/health.md`` through the build hook
``tools/mkdocs_hooks/example_results.py``. ``--health`` runs ``HEALTH_VARIANTS`` instead:
short runs with one setting made wrong on purpose (and the same examples' short runs with
their defaults), kept in ``benchmarks/results/health_runs.json``.

The work is split along its seams into sibling modules (standard library only, each imported
by name from this directory): ``results_registry.py`` (the examples and the health variants),
``results_records.py`` (the page's recorded runs and the code fingerprint),
``results_runs.py`` (running the examples, ``--jobs`` at a time), ``results_render.py`` (the
page's text) and ``results_curves.py`` (its SVG curves). This script keeps the command line
and the names other files use (``__all__``); its ``EXAMPLES``, ``EXAMPLES_DIR`` and
``LOAD_POLL`` are the ones a call uses, handed to the siblings explicitly.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # loaded by file path (the docs hook, the tests): its siblings
    sys.path.append(str(HERE))

import results_records  # noqa: E402
import results_render  # noqa: E402
from results_curves import RETURN_TAG, curve_svg  # noqa: E402
from results_records import (  # noqa: E402
    CURVE_POINTS,
    RUNS_MARK,
    SUPERSEDED_MARK,
    drop_stale,
    dump_records,
    load_records,
    load_superseded,
    superseded_runs,
)
from results_records import code_dump as _code_dump  # noqa: E402, F401 (the tests read it)
from results_registry import (  # noqa: E402
    EXAMPLES,
    EXAMPLES_DIR,
    HEALTH_RUNS,
    HEALTH_VARIANTS,
    LONG_EXAMPLES,
    PAGE,
    ROOT,
)
from results_render import LOADED, load_cell, spread  # noqa: E402
from results_runs import (  # noqa: E402
    LOAD_POLL,
    frames_to_threshold,
    logged_series,
    machine,
    run_health_variants,
    run_many,
    thin,
)

__all__ = [
    "CURVE_POINTS",
    "EXAMPLES",
    "EXAMPLES_DIR",
    "HEALTH_RUNS",
    "HEALTH_VARIANTS",
    "LOADED",
    "LOAD_POLL",
    "LONG_EXAMPLES",
    "PAGE",
    "RETURN_TAG",
    "ROOT",
    "RUNS_MARK",
    "SUPERSEDED_MARK",
    "budget_notes",
    "code_fingerprint",
    "curve_svg",
    "dump_records",
    "frames_to_threshold",
    "load_cell",
    "load_records",
    "load_superseded",
    "logged_series",
    "machine",
    "main",
    "render",
    "sibling_imports",
    "spread",
    "superseded_runs",
    "thin",
]


def sibling_imports(tree: ast.Module) -> list[str]:
    """Example modules in ``EXAMPLES_DIR`` that ``tree`` imports (``from sac_pendulum import``)."""
    return results_records.sibling_imports(tree, EXAMPLES_DIR)


def code_fingerprint(name: str) -> str:
    """Hash of ``examples/<name>.py``'s code and of the sibling example modules it imports
    (``results_records.code_fingerprint``, read from ``EXAMPLES_DIR``)."""
    return results_records.code_fingerprint(name, EXAMPLES_DIR)


def budget_notes(runs: list[dict]) -> list[str]:
    """Why an example's budget is what it is (``results_render.budget_notes`` over
    ``EXAMPLES``)."""
    return results_render.budget_notes(runs, EXAMPLES, EXAMPLES_DIR)


def render(records: list[dict], argv: list[str], page: Path | None = None,
           superseded: list[dict] | None = None) -> str:
    """The results page (``results_render.render``) for ``EXAMPLES``, its curves beside
    ``page`` (default ``PAGE``)."""
    return results_render.render(records, argv, PAGE if page is None else page, superseded,
                                 examples=EXAMPLES, examples_dir=EXAMPLES_DIR,
                                 load_poll=LOAD_POLL)


def _parser() -> argparse.ArgumentParser:
    """The command line (``--examples-dir`` defaults to the current ``EXAMPLES_DIR``)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*",
                        help=f"examples to run (default all): {', '.join(EXAMPLES)}")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 of each example")
    parser.add_argument("--rerun", action="store_true",
                        help="run again the (example, seed) pairs already on the page")
    parser.add_argument("--render-only", action="store_true",
                        help="re-render the page from its recorded runs")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs at once, each its own process with one torch thread")
    parser.add_argument("--timeout", type=float, default=4 * 3600, help="seconds one run may take")
    parser.add_argument("--page", type=Path, default=PAGE)
    parser.add_argument("--health", action="store_true",
                        help="run the deliberately wrong short runs instead "
                             f"({', '.join(HEALTH_VARIANTS)})")
    parser.add_argument("--examples-dir", type=Path, default=EXAMPLES_DIR,
                        help="read and run the example scripts from this directory")
    return parser


def main() -> None:
    """The command line: run the missing (example, seed) pairs, then write the page."""
    global EXAMPLES_DIR
    parser = _parser()
    args, extra = parser.parse_known_args()
    EXAMPLES_DIR = args.examples_dir.resolve()
    if args.jobs < 1:
        parser.error(f"--jobs: expected a positive number of runs at once, got {args.jobs}")
    if args.health:
        run_health_variants(args.names or list(HEALTH_VARIANTS), args.timeout,
                            examples=EXAMPLES, examples_dir=EXAMPLES_DIR)
        return
    names = args.names or list(EXAMPLES)
    unknown = sorted(set(names) - set(EXAMPLES))
    if unknown:
        parser.error(f"unknown examples {unknown}; expected some of {list(EXAMPLES)}")
    recorded = load_records(args.page)
    records = drop_stale(recorded, extra, EXAMPLES, EXAMPLES_DIR)
    stale = load_superseded(args.page) + [r for r in recorded if r not in records]
    failures: list[str] = []
    if not args.render_only:
        pairs = [(name, seed) for name in names for seed in range(args.seeds)
                 if args.rerun or not any(r["example"] == name and r["seed"] == seed
                                          for r in records)]

        def keep(record: dict) -> None:
            # after every run, by this process only: nothing lost; the page is read again
            # first, so the runs another call recorded meanwhile stay
            nonlocal records, stale
            print(json.dumps(record), flush=True)
            now = load_records(args.page)
            records = [r for r in drop_stale(now + [record], extra, EXAMPLES, EXAMPLES_DIR)
                       if r is record or (r["example"], r["seed"]) != (record["example"],
                                                                       record["seed"])]
            stale = load_superseded(args.page) + [r for r in now if r not in records]
            args.page.write_text(render(records, sys.argv[1:], args.page,
                                        superseded_runs(stale, records)))

        failures = run_many(pairs, extra, args.timeout, args.jobs, keep, examples=EXAMPLES,
                            examples_dir=EXAMPLES_DIR, load_poll=LOAD_POLL)
    args.page.write_text(render(records, sys.argv[1:], args.page,
                                superseded_runs(stale, records)))
    print(f"wrote {args.page}")
    if failures:
        raise SystemExit("failed runs:\n" + "\n".join(failures))


if __name__ == "__main__":
    main()
