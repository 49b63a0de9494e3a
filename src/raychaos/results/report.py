"""One self-contained ``report.html`` per run: what was done, what happened, and the verdict.

A report is read after the fact — attached to a CI run, mailed after a game day, opened on a
laptop with no network — so it is one file: inline CSS, plots embedded as base64 PNG data URIs,
no scripts, no external links. It must also work for the runs that matter most, the ones that
crashed: with no ``summary.json`` the report is built from the ledger and the timeline (a torn
last line is skipped and counted) and says plainly that the run did not finish.
"""

from __future__ import annotations

import base64
import html
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from raychaos.observe.recovery import recovery_figures
from raychaos.results.store import RunView, load_run

__all__ = ["RunView", "build_report", "load_run"]  # the reader is store's; re-exported


CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1100px;color:#222;padding:0 1em}
h1{margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
table{border-collapse:collapse;width:100%;margin:.5em 0}
th,td{border:1px solid #ddd;padding:.35em .5em;text-align:left;vertical-align:top;font-size:.92em}
th{background:#f5f5f5}pre{background:#f7f7f7;padding:.5em;overflow-x:auto;font-size:.85em;
margin:0;white-space:pre-wrap}
.v{display:inline-block;padding:.1em .6em;border-radius:.3em;font-weight:bold;color:#fff}
.pass{background:#2e7d32}.fail{background:#c62828}.error{background:#6a1b9a}
.na{background:#757575}.note{background:#fff3cd;border:1px solid #e0c36b;padding:.6em;
margin:.6em 0}img{max-width:100%;border:1px solid #ddd}dl{display:grid;
grid-template-columns:max-content auto;gap:.2em 1em}dt{font-weight:bold}dd{margin:0}
"""


def esc(value: Any) -> str:
    """HTML-escape anything (None shows as an em dash)."""
    return "—" if value is None else html.escape(str(value), quote=True)


def badge(verdict: Any) -> str:
    css = {"pass": "pass", "fail": "fail", "error": "error"}.get(str(verdict), "na")
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


def _fault_rows(view: RunView) -> str:
    t0 = view.summary.get("started_at")
    rows = []
    for f in view.summary.get("faults") or []:
        times = []
        for key in ("started_at", "applied_at", "undone_at"):
            v = f.get(key)
            rel = f" (t={v - t0:.1f}s)" if isinstance(v, (int, float)) and isinstance(
                t0, (int, float)) else ""
            times.append(f"{esc(key)}: {esc(fmt_time(v))}{rel}")
        rows.append(
            f"<tr><td>{esc(f.get('id'))}</td><td>{esc(f.get('fault'))}</td>"
            f"<td>{esc(f.get('state'))}</td><td>{'<br>'.join(times)}</td>"
            f"<td>{pre_json(f.get('args', {}))}</td><td>{pre_json(f.get('evidence', {}))}"
            + (f"<p><b>error:</b> {esc(f.get('error'))}</p>" if f.get("error") else "")
            + "</td></tr>")
    if not rows:
        return "<p>No faults recorded.</p>"
    return ("<table><tr><th>id</th><th>fault</th><th>state</th><th>times</th><th>args</th>"
            "<th>evidence</th></tr>" + "".join(rows) + "</table>")


def _slo_rows(slos: list[dict[str, Any]]) -> str:
    if not slos:
        return "<p>No SLOs were judged.</p>"
    rows = "".join(
        f"<tr><td>{esc(s.get('name'))}</td><td>{esc(s.get('metric'))}</td>"
        f"<td>{esc(s.get('window'))}</td><td>{esc(s.get('load'))}</td>"
        f"<td>{fmt_num(s.get('value'))}</td><td>{esc(s.get('op'))} "
        f"{fmt_num(s.get('threshold'))}</td><td>{badge(s.get('verdict'))}</td>"
        f"<td>{pre_json(s.get('evidence', {}))}</td></tr>" for s in slos)
    return ("<table><tr><th>SLO</th><th>metric</th><th>window</th><th>load</th><th>measured"
            "</th><th>required</th><th>verdict</th><th>evidence</th></tr>" + rows + "</table>")


def _probe_rows(probes: list[dict[str, Any]]) -> str:
    if not probes:
        return "<p>No probes ran.</p>"
    rows = "".join(f"<tr><td>{esc(p.get('name'))}</td><td>{badge(p.get('verdict'))}</td>"
                   f"<td>{pre_json(p.get('evidence', {}))}</td></tr>" for p in probes)
    return "<table><tr><th>probe</th><th>verdict</th><th>evidence</th></tr>" + rows + "</table>"


def _event_rows(events: list[dict[str, Any]]) -> str:
    if not events:
        return "<p>No events recorded.</p>"
    rows = "".join(
        f"<tr><td>{fmt_num(e.get('t'))}</td><td>{esc(e.get('event'))}</td>"
        f"<td>{esc(e.get('name'))}</td><td><code>{esc(json.dumps(e.get('detail'), default=str))}"
        "</code></td></tr>" for e in events)
    return "<table><tr><th>t (s)</th><th>event</th><th>name</th><th>detail</th></tr>" + rows + \
        "</table>"


def _recovery_rows(figures: dict[str, Any]) -> str:
    if not figures:
        return ""
    rows = "".join(f"<tr><td>{esc(k)}</td><td>{'never' if v is None else fmt_num(v)}</td></tr>"
                   for k, v in figures.items())
    return ("<h2>Recovery (read from the timeline, seconds from the first fault start)</h2>"
            "<table><tr><th>figure</th><th>seconds</th></tr>" + rows + "</table>")


def render_html(view: RunView, png: bytes | None,
                recovery: dict[str, Any] | None = None,
                resources_png: bytes | None = None) -> str:
    """The report page for ``view``; ``png`` is the timeline image to embed (or None);
    ``recovery`` the :func:`raychaos.compare.recovery_figures` of the run (or None)."""
    s = view.summary
    title = s.get("experiment") or s.get("slug") or view.run_dir.name
    windows = s.get("windows") or {}
    notes = "".join(f'<div class="note">{esc(n)}</div>' for n in view.notes)
    errors = s.get("errors") or []
    img = ('<img alt="timeline" src="data:image/png;base64,'
           + base64.b64encode(png).decode("ascii") + '">') if png else \
        "<p>No timeline plot could be drawn.</p>"
    window_text = ", ".join(f"{esc(k)} {fmt_num(v[0])}–{fmt_num(v[1])} s"
                            for k, v in windows.items()
                            if isinstance(v, (list, tuple)) and len(v) == 2) or "—"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>raychaos: {esc(title)}</title><style>{CSS}</style></head><body>
<h1>{esc(title)} {badge(s.get('verdict'))}</h1>
{notes}
<dl>
<dt>status</dt><dd>{esc(s.get('status'))} (exit code {esc(s.get('exit_code'))})</dd>
<dt>run</dt><dd>{esc(s.get('run_id'))} — <code>{esc(view.run_dir.name)}</code></dd>
<dt>started</dt><dd>{esc(fmt_time(s.get('started_at')))}</dd>
<dt>ended</dt><dd>{esc(fmt_time(s.get('ended_at')))}</dd>
<dt>duration</dt><dd>{fmt_num(s.get('duration_s'))} s</dd>
<dt>target</dt><dd><code>{esc(json.dumps(s.get('target') or {}, default=str))}</code></dd>
<dt>windows</dt><dd>{window_text}</dd>
</dl>
<h2>SLOs</h2>{_slo_rows(s.get('slos') or [])}
<h2>Probes</h2>{_probe_rows(s.get('probes') or [])}
<h2>Faults</h2>{_fault_rows(view)}
{_recovery_rows(recovery or {})}
<h2>Timeline</h2>{img}
{_resources_section(s, resources_png)}
<h2>Errors</h2>{''.join(f'<pre>{esc(e)}</pre>' for e in errors) or '<p>None.</p>'}
<h2>Events</h2>{_event_rows(view.events)}
<p><small>raychaos report, built {esc(fmt_time(_now()))}</small></p>
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
