"""The section "Against Stable-Baselines3" of ``docs/results.md``, from ``results/peers.json``.

Written by ``compare_peers.py`` after a full-budget run (the section is replaced in place,
between its two markers, the rest of the page untouched) and by ``results_examples.py``
each time it writes the page, so the section always quotes the results file with its
stamp and is never typed by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "peers.json"
PAGE = HERE.parent / "docs" / "results.md"
BEGIN = ("<!-- peers:begin (written by benchmarks/compare_peers.py from "
         "benchmarks/results/peers.json) -->")
END = "<!-- peers:end -->"
TASK_ORDER = ("ppo-cartpole", "sac-pendulum", "ppo-hopper", "sac-halfcheetah", "td3-halfcheetah",
              "crossq-halfcheetah", "ppo-breakout")
ALGO = {"ppo": "PPO", "sac": "SAC", "td3": "TD3", "crossq": "CrossQ"}


def _fmt(x: float | None, fmt: str) -> str:
    return "–" if x is None else fmt.format(x)


def _side_row(label: str, side: str, v: dict, target: float | None) -> str:
    reached = f" ({v['reached']}/{len(v['seeds'])})" if target is not None else ""
    cells = [
        label,
        side,
        ", ".join(map(str, v["seeds"])),
        _fmt(v["frames"], "{:,.0f}"),
        _fmt(v["seconds"], "{:.1f}"),
        _fmt(v["fps"], "{:,.0f}"),
        _fmt(v["mean_return"], "{:.1f}"),
        _fmt(v["frames_to_target"], "{:,.0f}") + reached,
        _fmt(v["seconds_to_target"], "{:.1f}"),
    ]
    return "| " + " | ".join(cells) + " |"


CONTRIB = ("CrossQ",)  # the peers that sb3-contrib ships, not SB3


def _rows(name: str, rec: dict, sb3_version: str) -> list[str]:
    """Ours, SB3's and the ratios of one task."""
    s, target = rec["summary"], rec["target"]
    budget = f"{rec['budget']:,} frames" + ("" if rec["full_budget"] else " (short budget)")
    goal = f"target {target:g}" if target is not None else "throughput only"
    label = f"`{name}`: {rec['env_id']}, {budget}, {goal}"
    algo = ALGO[name.split("-")[0]]
    peer = f"SB3 {sb3_version}"
    contrib = rec["meta"].get("peer_versions", {}).get("sb3-contrib")
    if algo in CONTRIB and contrib:  # sb3-contrib's algorithm, on SB3's base classes
        peer = f"sb3-contrib {contrib}"
    sides = {"ours": f"ours (`{rec['example']}`)", "sb3": f"{peer} `{algo}`"}
    rows = [_side_row("" if i else label, sides[side], s[side], target)
            for i, side in enumerate(side for side in ("ours", "sb3") if side in s)]
    if "ratios_ours_over_sb3" in s:
        r = s["ratios_ours_over_sb3"]
        cells = [
            "",
            "**ours / SB3**",
            "",
            "",
            _fmt(r["seconds"], "{:.2f}"),
            f"**{_fmt(r['fps'], '{:.2f}')}**",
            "",
            _fmt(r["frames_to_target"], "{:.2f}"),
            f"**{_fmt(r['seconds_to_target'], '{:.2f}')}**",
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _versions(meta: dict) -> str:
    ours, peers = meta.get("versions", {}), meta.get("peer_versions", {})
    named = [
        f"{k} {ours[k]}" for k in ("python", "torch", "gymnasium", "rl-collectors") if k in ours
    ]
    named += [f"{k} {peers[k]}" for k in ("stable-baselines3", "mujoco", "ale-py") if k in peers]
    return ", ".join(named)


def _stamp(name: str, rec: dict) -> str:
    """When, where, under what load, with which versions and command the task was raced."""
    meta, loads = rec["meta"], [r["load_avg_1min_before"] for r in rec["runs"]]
    machine = meta["machine"]
    code = next((r["code"] for r in rec["runs"] if "code" in r), "not run")
    kept = sorted({(r["side"], r["kept_from"]) for r in rec["runs"] if "kept_from" in r})
    reuse = "".join(f" The {'SB3' if side == 'sb3' else 'our'} side's runs are kept from the "
                    f"record measured {when} on the same CPU model (only the other side re-ran)."
                    for side, when in kept)
    if any(r.get("alongside") for r in rec["runs"]):  # compare_peers.py merge_alongside
        reuse += (" The two sides ran at the same time, one process on each of the "
                  f"{machine['cpus']} CPUs (one after the other did not fit the session), "
                  "so each met the other's load: both slower than alone, alike.")
    return (f"- `{name}`: measured {meta['time']} on {machine['cpu']}, {machine['cpus']} CPUs "
            f"(1-minute load average {min(loads):.1f} to {max(loads):.1f} when each side started: "
            f"the machine was shared); {_versions(meta)}; commit {meta.get('git_commit')}; "
            f"`{meta['command']}`; code of the example `{code}`.{reuse}")


def render(results: dict) -> str:
    """The section's Markdown, markers included."""
    tasks = results.get("tasks", {})
    sb3 = results.get("meta", {}).get("peer_versions", {}).get("stable-baselines3", "")
    names = [n for n in TASK_ORDER if n in tasks]
    missing = [f"`{n}`" for n in TASK_ORDER if n not in tasks]
    lines = [
        BEGIN,
        "",
        "## Against Stable-Baselines3",
        "",
        "Stable-Baselines3 (the library most of our users would pick instead) and our examples on "
        "the same task, frame budget, network sizes and thread count (one torch thread, "
        "`OMP_NUM_THREADS=1`), each side in a fresh process, one after the other (unless a "
        "task's stamp says the two ran at once), by "
        "`benchmarks/compare_peers.py`; this section is written from "
        "`benchmarks/results/peers.json` by that script, not by hand. Cells are medians over the "
        "seeds. *Wall time* and *frames/s* are over the training loop (SB3's `learn()`); *final "
        "return* is the mean of the last 20 training episodes at the end of the budget; *frames to "
        "target* is the first per-batch check at which that running mean reached the target (with "
        "how many seeds reached it), *time to target* the training seconds until then. Ratios are "
        "ours / SB3: above 1 is better for frames/s, below 1 for the times.",
        "",
        "| Task | Side | Seeds | Frames | Wall time (s) | Frames/s | Final return | "
        "Frames to target | Time to target (s) |",
        "|---|---|---|---|---|---|---|---|---|",
        *[row for n in names for row in _rows(n, tasks[n], sb3)],
        "",
        *[_stamp(n, tasks[n]) for n in names],
        "",
    ]
    loaded = [n for n in names if max(r["load_avg_1min_before"] for r in tasks[n]["runs"])
              > tasks[n]["meta"]["machine"]["cpus"]]
    if loaded:
        lines += [f"During {', '.join(f'`{n}`' for n in loaded)} the load average was above the "
                  "machine's CPU count (other work was running), and not the same for both sides: "
                  "the wall times there are longer than on an idle machine and the ratios noisy; "
                  "re-run on an idle machine before drawing conclusions.", ""]
    if missing:
        lines += [
            f"Not raced at full budget yet: {', '.join(missing)} "
            "(`uv run python benchmarks/compare_peers.py --tasks "
            f"{' '.join(m.strip('`') for m in missing)}`; a task whose example is missing is "
            "skipped).",
            "",
        ]
    lines += ["### What differs between the two setups", ""]
    lines += [f"- **`{n}`**: " + " ".join(tasks[n]["differences"]) for n in names]
    lines += ["", "The exact settings of both sides of each race are in the results file "
              "(`tasks.<task>.settings`).", "", END]
    return "\n".join(lines)


def section_from_file(path: Path = RESULTS) -> str:
    """The section from the results file, or nothing while there is none."""
    return render(json.loads(path.read_text())) if path.exists() else ""


def update_page(results: dict, page: Path = PAGE) -> None:
    """Replace the section in ``page`` (or add it before the recorded runs, or at the end)."""
    text, section = page.read_text(), render(results)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section + rest.split(END, 1)[1]
    elif "<!-- runs:" in text:
        head, rest = text.split("<!-- runs:", 1)
        text = head + section + "\n\n<!-- runs:" + rest
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    page.write_text(text)
    print(f"wrote the section 'Against Stable-Baselines3' of {page}")
