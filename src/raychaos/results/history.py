"""``raychaos history RESULTS``: every SLO and recovery figure of one experiment, run after run.

The weekly game day is worth its trend: *GCS recovery went from 6 s to 9 s since the Ray
upgrade*. This reads every results folder under a root (runs, game-day and trial folders
alike), groups the runs by experiment, orders them by start, and marks a figure as regressed
when it is worse than in the run before by the same rule as ``raychaos compare`` (beyond the
tolerance, or a verdict pass → fail, or never recovered where the previous run did). It prints
one table per experiment and writes ``history.html`` next to them: the tables and one plot per
experiment, a panel per figure, with its bound and the regressions in red.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raychaos.observe.recovery import recovery_figures
from raychaos.results.compare import judge_change
from raychaos.results.interactive import figure_block, plotly_loader
from raychaos.results.report import CSS, badge, esc
from raychaos.results.store import load_run
from raychaos.results.story import fmt_value, slo_unit

__all__ = ["build_history_page", "find_runs", "format_history", "history"]

MAX_DEPTH = 3  # root/run, root/gameday/run, root/trials/run


def find_runs(root: str | Path) -> list[Path]:
    """Every results folder (one with a ``summary.json``) under ``root``."""
    out: list[Path] = []

    def walk(folder: Path, depth: int) -> None:
        if (folder / "summary.json").is_file():
            out.append(folder)
            return
        if depth < MAX_DEPTH:
            for child in sorted(p for p in folder.iterdir() if p.is_dir()):
                walk(child, depth + 1)

    walk(Path(root), 0)
    return out


def history(root: str | Path, tolerance: float = 0.2) -> dict[str, Any]:
    """``{"root", "tolerance", "experiments": {slug: {"title", "columns": [...], "runs":
    [{"run_dir", "run_id", "started_at", "verdict", "values": {col: v}, "verdicts": {col: v},
    "regressions": {col: reason}}]}}}``; columns are ``{"name", "kind" (slo|recovery), "op",
    "threshold", "unit"}``."""
    groups: dict[str, dict[str, Any]] = {}
    for run_dir in find_runs(root):
        view = load_run(run_dir)
        s = view.summary
        slug = str(s.get("slug") or run_dir.name)
        group = groups.setdefault(slug, {"title": s.get("experiment") or slug, "columns": {},
                                         "runs": []})
        values: dict[str, Any] = {}
        verdicts: dict[str, Any] = {}
        for slo in s.get("slos") or []:
            name = str(slo.get("name"))
            unit = slo_unit(slo)
            group["columns"].setdefault(name, {"name": name, "kind": "slo",
                                               "op": slo.get("op", "<="),
                                               "threshold": slo.get("threshold"), "unit": unit})
            values[name], verdicts[name] = slo.get("value"), slo.get("verdict")
        if any(r.get("event") == "fault_start" for r in view.events):
            for name, value in recovery_figures(view.records).items():
                if name == "gcs_flaps" and not value:
                    continue
                group["columns"].setdefault(name, {"name": name, "kind": "recovery",
                                                   "op": "<=", "threshold": None,
                                                   "unit": "count" if name == "gcs_flaps"
                                                   else "s"})
                values[name] = value
        group["runs"].append({"run_dir": str(run_dir), "run_id": s.get("run_id"),
                              "started_at": s.get("started_at"), "verdict": s.get("verdict"),
                              "values": values, "verdicts": verdicts, "regressions": {}})
    for group in groups.values():
        group["runs"].sort(key=lambda r: (r["started_at"] or 0.0, r["run_dir"]))
        group["columns"] = list(group["columns"].values())
        for prev, run in zip(group["runs"], group["runs"][1:], strict=False):
            for col in group["columns"]:
                name = col["name"]
                if name not in run["values"] or name not in prev["values"]:
                    continue
                row = judge_change(name, prev["values"][name], run["values"][name], col["op"],
                                   col["threshold"], tolerance, prev["verdicts"].get(name),
                                   run["verdicts"].get(name))
                if row["regression"]:
                    run["regressions"][name] = row["reason"]
    return {"root": str(root), "tolerance": tolerance, "experiments": groups}


def latest_regressions(result: dict[str, Any]) -> list[str]:
    """One sentence per regressed figure of each experiment's latest run."""
    out = []
    for slug, group in result["experiments"].items():
        if group["runs"]:
            last = group["runs"][-1]
            out += [f"{slug} {name}: {reason} ({last['run_dir']})"
                    for name, reason in last["regressions"].items()]
    return out


def _when(epoch: Any) -> str:
    if not isinstance(epoch, (int, float)):
        return "?"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M")


def format_history(result: dict[str, Any]) -> str:
    """Plain-text tables, one per experiment; ``!`` marks a regressed figure."""
    parts = []
    for slug, group in result["experiments"].items():
        cols = group["columns"]
        header = ["run (UTC)", "verdict", *(c["name"] for c in cols)]
        rows = [[_when(r["started_at"]), str(r["verdict"]), *(
            ("!" if c["name"] in r["regressions"] else "")
            + (fmt_value(r["values"][c["name"]], c["unit"]) if c["name"] in r["values"]
               else "") for c in cols)] for r in group["runs"]]
        widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
        lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
                 "  ".join("-" * w for w in widths)]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                  for row in rows]
        parts.append(f"{group['title']} ({slug}, {len(rows)} runs)\n" + "\n".join(lines))
    if not parts:
        return f"no results folders under {result['root']}\n"
    regressions = latest_regressions(result)
    tail = "\n".join(f"REGRESSION: {r}" for r in regressions) or \
        f"latest runs: no regression beyond {result['tolerance']:.0%} against the run before"
    return "\n\n".join(parts) + f"\n\n{tail}\n"


def _figure(group: dict[str, Any]) -> dict[str, Any]:
    cols, runs = group["columns"], group["runs"]
    xs = [datetime.fromtimestamp(r["started_at"], UTC).isoformat()
          if isinstance(r["started_at"], (int, float)) else r["run_dir"] for r in runs]
    data: list[dict[str, Any]] = []
    layout: dict[str, Any] = {"hovermode": "closest", "showlegend": False,
                              "margin": {"l": 70, "r": 20, "t": 20, "b": 40},
                              "xaxis": {"type": "date", "anchor": f"y{len(cols)}"}}
    gap = 0.04
    height = (1.0 - gap * max(len(cols) - 1, 0)) / max(len(cols), 1)
    for i, col in enumerate(cols):
        axis = "y" if i == 0 else f"y{i + 1}"
        top = 1.0 - i * (height + gap)
        layout["yaxis" if i == 0 else f"yaxis{i + 1}"] = {
            "domain": [max(top - height, 0.0), top], "fixedrange": True,
            "title": {"text": col["name"], "font": {"size": 10}}}
        values = [r["values"].get(col["name"]) for r in runs]
        colours = ["#c62828" if col["name"] in r["regressions"] else "#1f77b4" for r in runs]
        data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": values,
                     "yaxis": axis, "name": col["name"], "marker": {"color": colours, "size": 8},
                     "text": [r["regressions"].get(col["name"], "") for r in runs],
                     "hovertemplate": "%{y:.4~g}<br>%{text}<extra>" + html.escape(col["name"])
                                      + "</extra>"})
        if isinstance(col["threshold"], (int, float)):
            data.append({"type": "scatter", "mode": "lines", "x": [xs[0], xs[-1]],
                         "y": [col["threshold"]] * 2, "yaxis": axis, "hoverinfo": "skip",
                         "line": {"dash": "dash", "color": "#999", "width": 1}})
    return {"data": data, "layout": layout, "config": {"displaylogo": False, "responsive": True}}


def build_history_page(result: dict[str, Any], out: str | Path) -> Path:
    """``history.html``: per experiment, the table and the plot (self-contained, offline)."""
    sections = []
    for i, (slug, group) in enumerate(result["experiments"].items()):
        head = "".join(f"<th>{esc(c['name'])}<br><small>{esc(c['kind'])}"
                       + (f" {esc(c['op'])} {esc(fmt_value(c['threshold'], c['unit']))}"
                          if c["threshold"] is not None else "") + "</small></th>"
                       for c in group["columns"])
        rows = []
        for r in group["runs"]:
            cells = "".join(
                (f'<td class="n bad" title="{esc(r["regressions"][c["name"]])}">'
                 if c["name"] in r["regressions"] else '<td class="n">')
                + esc(fmt_value(r["values"][c["name"]], c["unit"]) if c["name"] in r["values"]
                      else "") + "</td>" for c in group["columns"])
            rows.append(f"<tr><td>{esc(_when(r['started_at']))}<br><small>{esc(r['run_id'])}"
                        f"</small></td><td>{badge(r['verdict'])}</td>{cells}</tr>")
        plot = figure_block(f"history-{i}", _figure(group),
                            height_px=max(180 * len(group["columns"]), 240)) \
            if group["columns"] else ""
        sections.append(f"<h2>{esc(group['title'])} <small>({esc(slug)})</small></h2>"
                        f"<table><tr><th>run</th><th>verdict</th>{head}</tr>{''.join(rows)}"
                        f"</table>{plot}")
    regressions = latest_regressions(result)
    note = "".join(f'<div class="note">regression: {esc(r)}</div>' for r in regressions)
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>raychaos '
            f"history: {esc(result['root'])}</title><style>{CSS}</style></head><body>"
            f"<h1>History of {esc(result['root'])}</h1>{note}<p>Red: worse than the run "
            f"before by more than {result['tolerance']:.0%} (the rule of "
            f"<code>raychaos compare</code>).</p>{''.join(sections) or '<p>No runs.</p>'}"
            f"{plotly_loader()}</body></html>\n")
    path = Path(out)
    path.write_text(page, encoding="utf-8")
    return path
