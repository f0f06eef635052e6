"""The results page's learning curves: one hand-written SVG per example (median and
[min, max] over the seeds of the return each record kept, the target dashed; no plotting
dependency), written beside the page by ``results_examples.py``. The standard library alone.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from results_records import CURVE_POINTS

RETURN_TAG = "charts/episodic_return"
SVG_W, SVG_H, PAD_L, PAD_R, PAD_T, PAD_B = 640, 300, 64, 16, 28, 44


def value_at(curve: list[list[float]], x: float) -> float | None:
    """The curve's last logged value at or before frame ``x`` (None before its first point)."""
    value = None
    for frames, y in curve:
        if frames > x:
            break
        value = y
    return value


def _nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]``."""
    raw = (hi - lo) / max(count, 1) or 1.0
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = step * (lo // step)
    return [first + i * step for i in range(int((hi - first) / step) + 2)
            if first + i * step <= hi + 1e-9]


def _median_band(curves: list[list[list[float]]]) -> tuple[float, list[tuple]]:
    """The curves' last frame, and ``(frames, median, min, max)`` on a grid of
    ``CURVE_POINTS`` frames up to it (over the curves that had logged a value by then)."""
    budget = max(c[-1][0] for c in curves)
    grid = [budget * i / (CURVE_POINTS - 1) for i in range(CURVE_POINTS)]
    rows = []
    for x in grid:
        ys = [y for y in (value_at(c, x) for c in curves) if y is not None]
        if ys:
            rows.append((x, statistics.median(ys), min(ys), max(ys)))
    return budget, rows


def curve_svg(name: str, runs: list[dict], spec: dict) -> str | None:
    """The learning curve of ``name`` (its registry entry ``spec``) as an SVG: median and
    [min, max] over the seeds.

    Each run's ``charts/episodic_return`` (kept thinned in its record) is read on a common
    grid of frames as the last value logged at or before each grid point; the band spans
    the seeds that had logged a return by then. None when no run kept its curve.
    """
    curves = [r["series"][RETURN_TAG] for r in runs if RETURN_TAG in r.get("series", {})]
    if not curves:
        return None
    budget, rows = _median_band(curves)
    lo = min([r[2] for r in rows] + [spec["threshold"]])
    hi = max([r[3] for r in rows] + [spec["threshold"]])
    yticks = _nice_ticks(lo, hi)
    lo, hi = min(lo, yticks[0]), max(hi, yticks[-1])
    plot_w, plot_h = SVG_W - PAD_L - PAD_R, SVG_H - PAD_T - PAD_B

    def px(x: float) -> float:
        return round(PAD_L + plot_w * x / budget, 1)

    def py(y: float) -> float:
        return round(PAD_T + plot_h * (1 - (y - lo) / ((hi - lo) or 1.0)), 1)

    band = ([f"{px(x)},{py(top)}" for x, _, _, top in rows]
            + [f"{px(x)},{py(bot)}" for x, _, bot, _ in reversed(rows)])
    median = " ".join(f"{px(x)},{py(m)}" for x, m, _, _ in rows)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {SVG_W} {SVG_H}" width="100%" '
        f'style="max-width:{SVG_W}px" role="img" font-family="sans-serif" font-size="12">',
        f"<title>{name}: mean return of the last 20 episodes against frames, median and range over "
        f"{len(curves)} seed(s)</title>",
        f'<text x="{PAD_L}" y="16" font-size="13">{name}.py, {spec["task"]}: median and [min, max] '
        f"over {len(curves)} seed(s)</text>",
        f'<rect x="{PAD_L}" y="{PAD_T}" width="{plot_w}" height="{plot_h}" fill="none" '
        'stroke="#999"/>',
    ]
    for y in yticks:
        parts.append(f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{py(y)}" y2="{py(y)}" '
                     f'stroke="#ddd"/><text x="{PAD_L - 6}" y="{py(y) + 4}" '
                     f'text-anchor="end">{y:g}</text>')
    for x in _nice_ticks(0, budget):
        parts.append(f'<text x="{px(x)}" y="{PAD_T + plot_h + 16}" '
                     f'text-anchor="middle">{x / 1000:g}k</text>')
    parts += [
        f'<text x="{PAD_L + plot_w / 2}" y="{SVG_H - 6}" text-anchor="middle">frames</text>',
        f'<text x="14" y="{PAD_T + plot_h / 2}" text-anchor="middle" '
        f'transform="rotate(-90 14 {PAD_T + plot_h / 2})">mean return (last 20 episodes)</text>',
        f'<polygon points="{" ".join(band)}" fill="#1f77b4" fill-opacity="0.2" stroke="none"/>',
        f'<polyline points="{median}" fill="none" stroke="#1f77b4" stroke-width="2"/>',
        f'<line x1="{PAD_L}" x2="{PAD_L + plot_w}" y1="{py(spec["threshold"])}" '
        f'y2="{py(spec["threshold"])}" stroke="#d62728" stroke-dasharray="6 4"/>',
        f'<text x="{PAD_L + plot_w - 4}" y="{py(spec["threshold"]) + 15}" text-anchor="end" '
        f'fill="#d62728">target {spec["threshold"]:g}</text>',
        "</svg>",
    ]
    return "\n".join(parts) + "\n"


def curves_section(by_name: dict[str, list[dict]], page: Path,
                   examples: dict[str, dict]) -> list[str]:
    """Write each example's SVG next to the page; the Markdown that shows them (``by_name``:
    each example of the registry ``examples`` with its runs)."""
    lines = ["## Learning curves", "",
             "Drawn by `benchmarks/results_examples.py` from the runs recorded at the end of this "
             "page (the return logged after every batch, thinned to at most "
             f"{CURVE_POINTS} points per run): the line is the median over the seeds, the band "
             "their [min, max], the dashed line the example's target.", ""]
    without = []
    for name, runs in by_name.items():
        svg = curve_svg(name, runs, examples[name])
        path = page.parent / "assets" / "curves" / f"{name}.svg"
        if svg is None:
            path.unlink(missing_ok=True)  # a curve of records dropped since would outlive them
            if runs:
                without.append(f"`{name}.py`")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(svg)
        kept = sum(RETURN_TAG in r.get("series", {}) for r in runs)
        note = ("" if kept == len(runs)
                else f" ({kept} of its {len(runs)} recorded runs kept their curve)")
        lines += ["![Learning curve of "
                  f"{name}.py]({path.relative_to(page.parent).as_posix()}){note}", ""]
    if without:
        lines += [f"No curve yet for {', '.join(without)}: their runs were recorded before the "
                  "script kept curves; `--rerun` them to draw one.", ""]
    return lines
