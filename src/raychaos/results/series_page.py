"""The parts of a page about several runs: their figures side by side, and each SLO's spread.

A trial series asks *how is this figure distributed* (GCS recovery 6 s at p50, 19 s at p95); a
game day asks *how did each rehearsal go next to the others*. Both pages —
``trials.html`` (:func:`build_trials_page`) and the game day's ``index.html``
(:mod:`raychaos.results.gameday_index`) — use the same two sections: a table with one column per
run (verdict, duration, every SLO value with its verdict, every probe's finding, the recovery
figures; each column linked to the run's own report) and an interactive plot with one panel per
SLO: every run's value as a point (hover: which run), a box over them, and the bound.
"""

from __future__ import annotations

import html
import os
from pathlib import Path
from typing import Any

from raychaos.observe.recovery import recovery_figures
from raychaos.results.interactive import figure_block, plotly_loader
from raychaos.results.report import CSS, badge, build_report, esc, fmt_num
from raychaos.results.store import RunView, load_run
from raychaos.results.story import fmt_value, probe_figure, slo_unit

__all__ = ["build_trials_page", "distributions", "side_by_side"]


def _link(view: RunView, out_dir: Path, label: str) -> str:
    report = view.run_dir / "report.html"
    if not report.exists():
        return esc(label)
    return f'<a href="{esc(os.path.relpath(report, out_dir).replace(os.sep, "/"))}">' \
           f"{esc(label)}</a>"


def side_by_side(views: list[RunView], out_dir: Path) -> str:
    """One column per run: verdict, duration, SLOs, probes and recovery figures as rows."""
    if not views:
        return "<p>No runs.</p>"
    slos: dict[str, str] = {}
    probes: list[str] = []
    for v in views:
        for s in v.summary.get("slos") or []:
            slos.setdefault(str(s.get("name")), slo_unit(s))
        for p in v.summary.get("probes") or []:
            if p.get("name") not in probes:
                probes.append(str(p.get("name")))
    figures = [recovery_figures(v.records) if any(e.get("event") == "fault_start"
                                                   for e in v.events) else {} for v in views]
    heads = "".join(f"<th>{_link(v, out_dir, str(v.summary.get('experiment') or v.run_dir.name))}"
                    f"<br><small>{esc(v.run_dir.name)}</small></th>" for v in views)
    rows = [("verdict", [badge(v.summary.get("verdict")) for v in views]),
            ("duration", [f"{fmt_num(v.summary.get('duration_s'))} s" for v in views])]
    for name, unit in slos.items():
        cells = []
        for v in views:
            row = next((s for s in v.summary.get("slos") or [] if s.get("name") == name), None)
            cells.append("" if row is None else
                         f"{esc(fmt_value(row.get('value'), unit))} {badge(row.get('verdict'))}")
        rows.append((f"SLO {name}", cells))
    for name in probes:
        cells = []
        for v in views:
            p = next((p for p in v.summary.get("probes") or [] if p.get("name") == name), None)
            cells.append("" if p is None else f"{esc(probe_figure(p))} {badge(p.get('verdict'))}")
        rows.append((f"probe {name}", cells))
    for key in sorted({k for f in figures for k, v in f.items()
                       if not isinstance(v, (list, dict))}):  # figures, not their detail
        rows.append((f"recovery {key}", [esc(fmt_value(f[key], "count" if key == "gcs_flaps"
                                                          else "s")) if key in f else ""
                                         for f in figures]))
    body = "".join(f"<tr><th>{esc(label)}</th>" + "".join(f"<td>{c}</td>" for c in cells)
                   + "</tr>" for label, cells in rows)
    return f'<div style="overflow-x:auto"><table class="side"><tr><th></th>{heads}</tr>' \
           f"{body}</table></div>"


def _distribution_figure(views: list[RunView]) -> dict[str, Any] | None:
    series: dict[str, dict[str, Any]] = {}
    for v in views:
        for s in v.summary.get("slos") or []:
            if isinstance(s.get("value"), (int, float)):
                entry = series.setdefault(str(s.get("name")), {
                    "values": [], "runs": [], "threshold": s.get("threshold"),
                    "unit": slo_unit(s)})
                entry["values"].append(s["value"])
                entry["runs"].append(f"{v.run_dir.name} ({s.get('verdict')})")
    if not series:
        return None
    data: list[dict[str, Any]] = []
    layout: dict[str, Any] = {"showlegend": False, "hovermode": "closest",
                              "margin": {"l": 180, "r": 20, "t": 10, "b": 30}, "shapes": []}
    gap = 0.06
    height = (1.0 - gap * (len(series) - 1)) / len(series)
    for i, (name, e) in enumerate(series.items()):
        suffix = "" if i == 0 else str(i + 1)
        top = 1.0 - i * (height + gap)
        layout[f"xaxis{suffix}"] = {"anchor": f"y{suffix}", "domain": [0, 1],
                                    "title": {"text": e["unit"], "font": {"size": 10}}}
        layout[f"yaxis{suffix}"] = {"anchor": f"x{suffix}", "domain": [max(top - height, 0), top],
                                    "fixedrange": True}
        data.append({"type": "box", "orientation": "h", "x": e["values"], "name": name,
                     "text": e["runs"], "boxpoints": "all", "jitter": 0.4, "pointpos": 0,
                     "xaxis": f"x{suffix}", "yaxis": f"y{suffix}",
                     "hovertemplate": "%{x:.4~g} " + html.escape(e["unit"])
                                      + "<br>%{text}<extra>" + html.escape(name) + "</extra>"})
        if isinstance(e["threshold"], (int, float)):
            layout["shapes"].append({"type": "line", "xref": f"x{suffix}",
                                     "yref": f"y{suffix} domain", "x0": e["threshold"],
                                     "x1": e["threshold"], "y0": 0, "y1": 1,
                                     "line": {"color": "#c62828", "dash": "dash", "width": 1}})
    return {"data": data, "layout": layout, "config": {"displaylogo": False, "responsive": True}}


def distributions(views: list[RunView], element_id: str = "distributions") -> str:
    """Each SLO's values across the runs (points, box, bound); empty when none was measured."""
    figure = _distribution_figure(views)
    if figure is None:
        return "<p>No SLO was measured in these runs.</p>"
    panels = len([t for t in figure["data"] if t.get("type") == "box"])
    return ("<p><small>Each point is one run (hover to see which); the dashed red line is "
            "the bound.</small></p>" + figure_block(element_id, figure,
                                                     height_px=max(110 * panels, 200)))


def _rate(value: Any) -> str:
    return "—" if not isinstance(value, (int, float)) else f"{value:.0%}"


def build_trials_page(folder: str | Path, run_dirs: list[str | Path],
                      summary: dict[str, Any] | None = None, title: str | None = None) -> Path:
    """``<folder>/trials.html``: pass rate, each SLO's distribution, the runs side by side."""
    out_dir = Path(folder)
    views = []
    for run in map(Path, run_dirs):
        if run.is_dir() and not (run / "report.html").exists():
            build_report(run)
        views.append(load_run(run))
    verdicts = [str(v.summary.get("verdict")) for v in views]
    passed = verdicts.count("pass")
    heading = title or (views[0].summary.get("experiment") if views else out_dir.name)
    rows = ""
    if summary:
        rows = "".join(
            f"<tr><td>{esc(name)}</td><td class='n'>{esc(s.get('n'))}</td>"
            f"<td class='n'>{fmt_num(s.get('p50'))}</td><td class='n'>{fmt_num(s.get('p95'))}</td>"
            f"<td class='n'>{fmt_num(s.get('max'))}</td><td>{esc(s.get('op'))} "
            f"{fmt_num(s.get('threshold'))}</td><td class='n'>{_rate(s.get('pass_rate'))}"
            "</td></tr>"
            for name, s in (summary.get("slos") or {}).items())
    table = ("<table><tr><th>SLO</th><th>n</th><th>p50</th><th>p95</th><th>max</th>"
             f"<th>bound</th><th>pass rate</th></tr>{rows}</table>") if rows else ""
    page = (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>raychaos '
            f"trials: {esc(heading)}</title><style>{CSS}</style></head><body>"
            f"<h1>Trials: {esc(heading)}</h1><p>{len(views)} trial(s), {passed} passed"
            + (f" ({passed / len(views):.0%})" if views else "") + "</p>"
            f"<h2>Distributions</h2>{table}{distributions(views)}"
            f"<h2>The runs side by side</h2>{side_by_side(views, out_dir)}"
            f"{plotly_loader()}</body></html>\n")
    out = out_dir / "trials.html"
    out.write_text(page, encoding="utf-8")
    return out
