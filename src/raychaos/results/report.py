"""One self-contained ``report.html`` per run, story first: what happened, then the evidence.

A report is read after the fact — attached to a CI run, mailed after a game day, opened on a
laptop with no network — so it is one file: inline CSS, the plotting library inside it
(:mod:`raychaos.results.interactive`), no external links. Its order is the order a person asks
in: the verdict and one paragraph of what happened (:mod:`raychaos.results.story`); the SLOs,
measured value against bound and how far from it; each load's baseline/chaos/recovery figures;
recovery; each fault's evidence as a table (raw JSON behind a disclosure); the interactive
timeline (the PNG, kept for JUnit and chat, is its fallback). It must also work for the runs
that matter most, the ones that crashed: with no ``summary.json`` the report is built from the
ledger and the timeline and says plainly that the run did not finish.
"""

from __future__ import annotations

import base64
import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raychaos.config.metrics import METRICS
from raychaos.observe.recovery import recovery_figures
from raychaos.results.interactive import figure_block, plotly_loader, timeline_figure
from raychaos.results.store import RunView, load_run
from raychaos.results.story import (
    evidence_rows,
    fault_rows,
    fmt_value,
    load_windows,
    margin,
    probe_figure,
    slo_unit,
    story,
)

__all__ = ["RunView", "build_report", "load_run"]  # the reader is store's; re-exported


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1150px;color:#222;padding:0 1em;line-height:1.4}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
h3{margin:1em 0 .3em}
table{border-collapse:collapse;width:100%;margin:.5em 0}
th,td{border:1px solid #ddd;padding:.35em .5em;text-align:left;vertical-align:top;font-size:.92em}
th{background:#f5f5f5}td.n{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:.85em;margin:0;
white-space:pre-wrap}
.v{display:inline-block;padding:.1em .6em;border-radius:.3em;font-weight:bold;color:#fff}
.pass{background:#2e7d32}.fail{background:#c62828}.error{background:#6a1b9a}
.inconclusive{background:#e0a100}
.na{background:#757575}.note{background:#fff3cd;border:1px solid #e0c36b;padding:.6em;
margin:.6em 0}img{max-width:100%;border:1px solid #ddd}dl{display:grid;
grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:bold}dd{margin:0}
.story{font-size:1.08em;background:#f6f8fa;border-left:4px solid #888;padding:.7em 1em}
.story.pass{border-color:#2e7d32;background:#f1f8f1}.story.fail{border-color:#c62828;
background:#fdf1f1}.story.error{border-color:#6a1b9a;background:#f7f1fa}
.story.inconclusive{border-color:#e0a100;background:#fff8e1}
details>summary{cursor:pointer;color:#555}.rc-hidden{display:none}
.rc-plot{width:100%;height:900px}.bad{color:#c62828;font-weight:bold}
table.kv td:first-child{width:14em;color:#555}
"""


def esc(value: Any) -> str:
    """HTML-escape anything (None shows as an em dash)."""
    return "—" if value is None else html.escape(str(value), quote=True)


def badge(verdict: Any) -> str:
    css = {"pass": "pass", "fail": "fail", "error": "error",
           "inconclusive": "inconclusive"}.get(str(verdict), "na")
    return f'<span class="v {css}">{esc(verdict)}</span>'


def fmt_time(epoch: Any) -> str:
    if not isinstance(epoch, (int, float)):
        return "—"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return esc(value)


def pre_json(value: Any) -> str:
    return f"<pre>{esc(json.dumps(value, indent=2, default=str, sort_keys=True))}</pre>"


def raw(value: Any, label: str = "raw JSON") -> str:
    """The machine's version, behind a disclosure."""
    return f"<details><summary>{esc(label)}</summary>{pre_json(value)}</details>"


def kv_table(rows: list[tuple[str, str]]) -> str:
    return '<table class="kv">' + "".join(f"<tr><td>{esc(k)}</td><td>{esc(v)}</td></tr>"
                                          for k, v in rows) + "</table>"


def _slo_rows(slos: list[dict[str, Any]]) -> str:
    if not slos:
        return "<p>No SLOs were judged.</p>"
    rows = []
    for s in slos:
        unit = slo_unit(s)
        what = METRICS[s["metric"]].description if s.get("metric") in METRICS else ""
        scope = esc(s.get("window")) + (f" · {esc(s.get('load'))}" if s.get("load") else "")
        bad = ' class="bad"' if s.get("verdict") in ("fail", "error") else ""
        rows.append(
            f"<tr><td><b>{esc(s.get('name'))}</b><br><small>{esc(s.get('description') or what)}"
            f"</small></td><td>{esc(s.get('metric'))}<br><small>{scope}</small></td>"
            f'<td class="n">{esc(fmt_value(s.get("value"), unit))}</td>'
            f'<td class="n">{esc(s.get("op"))} {esc(fmt_value(s.get("threshold"), unit))}</td>'
            f"<td{bad}>{esc(margin(s))}</td><td>{badge(s.get('verdict'))}</td>"
            f"<td>{raw(s.get('evidence', {}), 'evidence')}</td></tr>")
    return ("<table><tr><th>SLO</th><th>metric · window</th><th>measured</th><th>bound</th>"
            "<th>margin</th><th>verdict</th><th></th></tr>" + "".join(rows) + "</table>")


def _probe_rows(probes: list[dict[str, Any]]) -> str:
    if not probes:
        return "<p>No probes ran.</p>"
    rows = "".join(
        f"<tr><td><b>{esc(p.get('name'))}</b></td><td>{badge(p.get('verdict'))}</td>"
        f"<td>{esc(probe_figure(p))}</td><td><details><summary>evidence</summary>"
        f"{kv_table(evidence_rows(p.get('evidence') or {}))}"
        f"{raw(p.get('evidence', {}))}</details></td></tr>" for p in probes)
    return ("<table><tr><th>probe</th><th>verdict</th><th>found</th><th></th></tr>" + rows
            + "</table>")


_LOAD_COLUMNS = [("seconds", "s", "s"), ("count", "completed", "count"),
                 ("failures", "failed", "count"), ("throughput", "per second", ""),
                 ("error_ratio", "errors", "ratio"), ("p50_ms", "p50", "ms"),
                 ("p95_ms", "p95", "ms"), ("p99_ms", "p99", "ms"),
                 ("dip", "dip vs baseline", "ratio"), ("time_back_s", "time back", "s")]


def _load_cell(value: Any, key: str, unit: str) -> str:
    if value is None:
        return "—"
    if key == "dip" and isinstance(value, (int, float)) and value <= 0:
        return "none"  # throughput did not fall below baseline
    return fmt_value(value, unit)


def _load_tables(loads: dict[str, dict[str, dict[str, Any]]], from_summary: bool) -> str:
    if not loads:
        return "<p>No load reported statistics.</p>"
    head = "".join(f"<th>{esc(label)}</th>" for _, label, _ in _LOAD_COLUMNS)
    out = [] if from_summary else [
        '<p class="note">This run\'s summary has no per-load statistics (it was written before '
        "they existed); these figures are the SLO module's, read from the timeline.</p>"]
    for name, per in sorted(loads.items()):
        rows = []
        for window, stats in per.items():
            cells = "".join(f'<td class="n">{esc(_load_cell(stats.get(k), k, u))}</td>'
                            for k, _, u in _LOAD_COLUMNS)
            rows.append(f"<tr><td>{esc(window)}</td>{cells}</tr>")
        out.append(f'<h3 class="load">{esc(name)}</h3><table class="load-table"><tr>'
                   f"<th>window</th>{head}</tr>{''.join(rows)}</table>")
    return "".join(out)


_RECOVERY_LABELS = {
    "gcs_down_s": "GCS down (sum of the samples that found it down)",
    "gcs_first_answer_s": "GCS first answer after the kill",
    "gcs_recovery_s": "GCS steady (first 5 s without a miss) after the kill",
    "gcs_flaps": "GCS flaps after its first answer",
    "nodes_recovery_s": "every earlier worker ALIVE again, same node ID, re-registered",
    "nodes_alive_s": "every earlier worker ALIVE in the GCS's table (no proof of re-registration)",
    "gpus_back_s": "GPU capacity back at its level before the fault",
}


def _recovery_rows(figures: dict[str, Any]) -> str:
    if not figures:
        return ""
    rows = []
    for key, value in figures.items():
        if key == "gcs_flaps":
            shown = str(value)
        elif value is None:
            shown = "never (not within the timeline)"
        elif key == "gpus_back_s" and value == 0:
            shown = "did not drop in any sample"
        else:
            shown = fmt_value(value, "s")
        rows.append(f"<tr><td>{esc(_RECOVERY_LABELS.get(key, key))}</td>"
                    f'<td class="n">{esc(shown)}</td><td><code>{esc(key)}</code></td></tr>')
    return ("<h2>Recovery</h2><p>Read from the timeline, seconds from the kill (or the first "
            "fault), to the monitor's sampling interval.</p><table><tr><th>what</th><th>when"
            "</th><th>figure</th></tr>" + "".join(rows) + "</table>")


def _fault_sections(view: RunView) -> str:
    t0 = view.summary.get("started_at")
    t0 = float(t0) if isinstance(t0, (int, float)) else None
    parts = []
    for f in view.summary.get("faults") or []:
        parts.append(f"<h3>{esc(f.get('id'))} {esc(f.get('fault'))}</h3>"
                     f"{kv_table(fault_rows(f, t0))}{raw(f)}")
    return "".join(parts) or "<p>No faults recorded.</p>"


def _event_rows(events: list[dict[str, Any]]) -> str:
    if not events:
        return "<p>No events recorded.</p>"
    rows = "".join(
        f"<tr><td>{fmt_num(e.get('t'))}</td><td>{esc(e.get('event'))}</td>"
        f"<td>{esc(e.get('name'))}</td><td><code>{esc(json.dumps(e.get('detail'), default=str))}"
        "</code></td></tr>" for e in events)
    return (f"<details><summary>{len(events)} events</summary><table><tr><th>t (s)</th>"
            f"<th>event</th><th>name</th><th>detail</th></tr>{rows}</table></details>")


def _target_text(target: dict[str, Any]) -> str:
    keys = ("kind", "name", "namespace", "cluster", "mode", "workers", "gpu_workers",
            "gcs_storage", "gcs_fault_tolerance")
    text = ", ".join(f"{k} {target[k]}" for k in keys if target.get(k) is not None)
    return text or "—"


def render_html(view: RunView, png: bytes | None,
                recovery: dict[str, Any] | None = None,
                resources_png: bytes | None = None) -> str:
    """The report page for ``view``; ``png`` is the timeline image to embed (or None);
    ``recovery`` the run's :func:`~raychaos.observe.recovery.recovery_figures` (or None)."""
    s = view.summary
    title = s.get("experiment") or s.get("slug") or view.run_dir.name
    windows = s.get("windows") or {}
    loads, from_summary = load_windows(s, view.records)
    notes = "".join(f'<div class="note">{esc(n)}</div>' for n in view.notes)
    errors = s.get("errors") or []
    img = ('<img alt="timeline" src="data:image/png;base64,'
           + base64.b64encode(png).decode("ascii") + '">') if png else \
        "<p>No timeline plot could be drawn.</p>"
    window_text = ", ".join(f"{esc(k)} {fmt_num(v[0])}–{fmt_num(v[1])} s"
                            for k, v in windows.items()
                            if isinstance(v, (list, tuple)) and len(v) == 2) or "—"
    verdict = str(s.get("verdict"))
    sentences = " ".join(esc(x) for x in story(s, view.records, recovery or {}, loads))
    plot = figure_block("timeline", timeline_figure(view.records, windows), img)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>raychaos: {esc(title)}</title><style>{CSS}</style></head><body>
<h1>{esc(title)} {badge(verdict)}</h1>
{notes}
<p class="story {esc(verdict)}" id="story">{sentences}</p>
<dl>
<dt>status</dt><dd>{esc(s.get('status'))} (exit code {esc(s.get('exit_code'))})</dd>
<dt>run</dt><dd>{esc(s.get('run_id'))} — <code>{esc(view.run_dir.name)}</code></dd>
<dt>started</dt><dd>{esc(fmt_time(s.get('started_at')))}, {fmt_num(s.get('duration_s'))} s</dd>
<dt>target</dt><dd>{esc(_target_text(s.get('target') or {}))}</dd>
<dt>windows</dt><dd>{window_text}</dd>
</dl>
<h2>SLOs</h2>{_slo_rows(s.get('slos') or [])}
<h2>Probes</h2>{_probe_rows(s.get('probes') or [])}
<h2>Loads</h2>{_load_tables(loads, from_summary)}
{_recovery_rows(recovery or {})}
<h2>Faults</h2>{_fault_sections(view)}
<h2>Timeline</h2>
<p><small>Drag to zoom into a stretch of time (double-click to zoom out); the label under the
mouse reads every panel at that moment. Red bands: faults (start to the end of their effect);
purple: rollbacks.</small></p>
{plot}
{_resources_section(s, resources_png)}
<h2>Errors</h2>{''.join(f'<pre>{esc(e)}</pre>' for e in errors) or '<p>None.</p>'}
<h2>Events</h2>{_event_rows(view.events)}
<p><small>raychaos report, built {esc(fmt_time(_now()))}</small></p>
{plotly_loader()}
</body></html>
"""


def _resources_section(s: dict[str, Any], png: bytes | None) -> str:
    """The spill/GPU picture and the preflight review's findings, when the run has them."""
    out = ""
    if png:
        out += ('<h2>Resources</h2><img alt="resources" src="data:image/png;base64,'
                + base64.b64encode(png).decode("ascii") + '">')
    findings = [f for f in (s.get("review") or {}).get("findings", [])
                if f.get("severity") != "info"]
    if findings:
        out += "<h2>Review</h2><ul>" + "".join(
            f"<li><b>{esc(f['severity'])}</b> {esc(f['rule'])}: {esc(f['message'])} "
            f"(see <code>{esc(f['experiment'])}</code>)</li>" for f in findings) + "</ul>"
    return out


def _now() -> float:
    return datetime.now(UTC).timestamp()


def build_report(run_dir: str | Path) -> Path:
    """Write ``<run_dir>/report.html`` (and ``<run_dir>/timeline.png``); return the HTML path.

    Works on finished runs and on partial ones (no ``summary.json``, torn last timeline line);
    raises ``FileNotFoundError`` only when ``run_dir`` is not a directory.
    """
    from raychaos.results.plots import render_timeline_png
    from raychaos.results.resource_plots import has_resource_data, render_resources_png

    run = Path(run_dir)
    if not run.is_dir():
        raise FileNotFoundError(f"{run}: not a results folder")
    view = load_run(run)
    title = str(view.summary.get("experiment") or run.name)
    png = render_timeline_png(view.records, view.summary.get("windows") or {}, title)
    (run / "timeline.png").write_bytes(png)
    extra = None
    if has_resource_data(view.records):  # spill rates, stranded GPUs: resources.png
        extra = render_resources_png(view.records, view.summary.get("windows") or {}, title)
        (run / "resources.png").write_bytes(extra)
    out = run / "report.html"
    recovery = recovery_figures(view.records) if any(
        e.get("event") == "fault_start" for e in view.events) else None
    out.write_text(render_html(view, png, recovery, extra), encoding="utf-8")
    return out
