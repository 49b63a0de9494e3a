"""A game day's ``index.html``: each run's verdict, linked to its own report, and the runs side
by side.

A game day is read after the fact, like one run's report: one self-contained page (the same CSS
as :mod:`raychaos.results.report`) listing each run's experiment, status, verdict, duration and
failing checks, linked relatively so the folder can be archived and opened anywhere; then every
run's figures side by side and each SLO's spread across the runs
(:mod:`raychaos.results.series_page`).
"""

from __future__ import annotations

import html
import os
from datetime import UTC, datetime
from pathlib import Path

from raychaos.results.checks import combine_trials

__all__ = ["build_gameday_report"]


def build_gameday_report(gameday_dir: str | Path, run_dirs: list[str | Path], *,
                         title: str | None = None, build_missing: bool = True) -> Path:
    """Write ``<gameday_dir>/index.html``: each run's experiment, status, verdict and failing
    SLOs, linked (relatively) to its ``report.html``; return the index path.

    ``build_missing`` builds a run's report.html first when it is absent. The overall verdict
    is ``error`` if any run errored (or did not finish), else ``fail`` if any failed.
    """
    from raychaos.results.interactive import plotly_loader
    from raychaos.results.report import CSS, badge, build_report, esc, fmt_num, load_run
    from raychaos.results.series_page import distributions, side_by_side

    out_dir = Path(gameday_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    rows, verdicts, views = [], [], []
    for run in map(Path, run_dirs):
        report = run / "report.html"
        if build_missing and run.is_dir() and not report.exists():
            build_report(run)
        view = load_run(run)
        views.append(view)
        s = view.summary
        verdicts.append(s.get("verdict"))
        failing = [str(x.get("name")) for x in (s.get("slos") or []) + (s.get("probes") or [])
                   if x.get("verdict") in ("fail", "error")]
        link = os.path.relpath(report, out_dir).replace(os.sep, "/")
        name = esc(s.get("experiment") or run.name)
        cell = f'<a href="{esc(link)}">{name}</a>' if report.exists() else name
        rows.append(f"<tr><td>{cell}</td><td>{esc(s.get('status'))}</td>"
                    f"<td>{badge(s.get('verdict'))}</td><td>{fmt_num(s.get('duration_s'))}</td>"
                    f"<td>{esc(', '.join(failing)) or '—'}</td></tr>")
    overall, _ = combine_trials(verdicts)
    if not verdicts:
        overall = "n/a"
    heading = title or out_dir.name
    built = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>raychaos game day: {esc(heading)}</title>
<style>{CSS}</style></head><body>
<h1>Game day: {esc(heading)} {badge(overall)}</h1>
<p>{len(verdicts)} run(s): {verdicts.count('pass')} passed, {verdicts.count('fail')} failed,
{verdicts.count('inconclusive')} inconclusive, {len(verdicts) - verdicts.count('pass')
 - verdicts.count('fail') - verdicts.count('inconclusive')} errored or unfinished.</p>
<table><tr><th>experiment</th><th>status</th><th>verdict</th><th>duration (s)</th>
<th>failing SLOs / probes</th></tr>{''.join(rows)}</table>
<h2>The runs side by side</h2>{side_by_side(views, out_dir)}
<h2>Each SLO across the runs</h2>{distributions(views)}
<p><small>raychaos game-day report, built {html.escape(built)}</small></p>
{plotly_loader()}
</body></html>
"""
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index
