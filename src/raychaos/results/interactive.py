"""Interactive plots inside a self-contained page: the run's timeline, and figures across runs.

A person reading a chaos run wants to zoom into the ten seconds around the kill and read the
value under the mouse — a static PNG cannot do that. The page must still be ONE file that opens
offline (attached to a CI run, mailed after a game day), so the plotting library goes inside it:
Plotly's ``plotly.min.js`` from the ``plotly`` wheel (its Python API is never imported), gzipped
and base64-encoded (4.8 MB become 2 MB) and unpacked by the browser's ``DecompressionStream``.
No network is touched: no CDN, no fonts, no map tiles.

Figures are plain dicts in Plotly's JSON schema (``{"data": [...], "layout": {...}}``), placed in
``<script type="application/json" class="rc-figure">`` blocks next to their ``<div>``; one loader
per page plots them all. When the library is missing or the browser cannot unpack it, the
fallback (the PNG) stays visible, and ``<html data-plots=...>`` says ``ready`` or why not — the
Chromium test reads it.
"""

from __future__ import annotations

import base64
import gzip
import html
import importlib.util
import json
import math
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from raychaos.results.plots import load_series
from raychaos.results.regions import regions

__all__ = ["figure_block", "plotly_loader", "timeline_figure"]

FAULT_FILL = "rgba(214,39,40,0.13)"
ROLLBACK_FILL = "rgba(148,103,189,0.16)"
WINDOW_FILL = {"baseline": "rgba(31,119,180,0.05)", "chaos": "rgba(214,39,40,0.05)",
               "recovery": "rgba(44,160,44,0.06)"}


def plotly_js_path() -> Path | None:
    """``plotly.min.js`` of the installed ``plotly`` wheel, found without importing plotly."""
    spec = importlib.util.find_spec("plotly")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "package_data" / "plotly.min.js"
        if path.is_file():
            return path
    return None


@lru_cache(maxsize=1)
def _plotly_blob() -> str | None:
    path = plotly_js_path()
    if path is None:
        return None
    return base64.b64encode(gzip.compress(path.read_bytes(), compresslevel=6, mtime=0)
                            ).decode("ascii")


_LOADER = """<script>
(function () {
  var root = document.documentElement;
  function fail(why) { root.dataset.plots = "failed: " + why; }
  var blob = document.getElementById("rc-plotly-gz");
  if (!blob) { fail("no plotting library in this page"); return; }
  if (typeof DecompressionStream === "undefined") { fail("this browser cannot unpack it"); return; }
  var bin = Uint8Array.from(atob(blob.textContent.trim()),
                            function (c) { return c.charCodeAt(0); });
  var stream = new Blob([bin]).stream().pipeThrough(new DecompressionStream("gzip"));
  new Response(stream).text().then(function (code) {
    var s = document.createElement("script");
    s.textContent = code;
    document.head.appendChild(s);
    var jobs = [];
    document.querySelectorAll("script.rc-figure").forEach(function (el) {
      var fig = JSON.parse(el.textContent);
      var div = document.getElementById(el.dataset.target);
      var fallback = document.getElementById(el.dataset.target + "-fallback");
      div.classList.remove("rc-hidden");
      jobs.push(Plotly.newPlot(div, fig.data, fig.layout, fig.config).then(function () {
        if (fallback) { fallback.open = false; }
      }));
    });
    return Promise.all(jobs);
  }).then(function () { root.dataset.plots = "ready"; }, function (e) { fail(String(e)); });
})();
</script>"""


def plotly_loader() -> str:
    """The plotting library and the loader, once per page (empty-handed pages keep fallbacks)."""
    blob = _plotly_blob()
    lib = "" if blob is None else (
        f'<script type="application/octet-stream" id="rc-plotly-gz">{blob}</script>')
    return lib + _LOADER


def _script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``</script>`` or ``<!--`` can close it)."""
    text = json.dumps(value, default=str, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def figure_block(element_id: str, figure: dict[str, Any], fallback_html: str = "",
                 height_px: int | None = None) -> str:
    """A plot's ``<div>``, its figure JSON and the fallback shown until (unless) it is drawn."""
    style = f' style="height:{int(height_px)}px"' if height_px else ""
    fallback = (f'<details open id="{html.escape(element_id)}-fallback" class="rc-fallback">'
                f"<summary>static picture</summary>{fallback_html}</details>"
                if fallback_html else "")
    return (f'<div id="{html.escape(element_id)}" class="rc-plot rc-hidden"{style}></div>'
            f'<script type="application/json" class="rc-figure" '
            f'data-target="{html.escape(element_id)}">{_script_json(figure)}</script>{fallback}')


# --- the run's timeline ---------------------------------------------------------------------
def _finite(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _kept(vs: Sequence[float | None]) -> list[int]:
    """Indices of the ends of every flat stretch: a step line looks the same with only those
    (and the hover, which takes the nearest point, reads the same value)."""
    return [i for i in range(len(vs))
            if i in (0, len(vs) - 1) or vs[i] != vs[i - 1] or vs[i] != vs[i + 1]]


def _trace(name: str, ts: list[float], vs: Sequence[float | None], axis: int, *,
           shape: str = "hv", dash: str = "solid", colour: str | None = None,
           unit: str = "", fill: str | None = None, text: list[str] | None = None
           ) -> dict[str, Any]:
    keep = _kept(vs)
    xs = [round(ts[i], 2) for i in keep]
    ys = [None if vs[i] is None else round(float(vs[i] or 0.0), 3) for i in keep]
    trace: dict[str, Any] = {
        "type": "scatter", "mode": "lines", "name": name, "x": xs, "y": ys,
        "xaxis": "x", "yaxis": "y" if axis == 1 else f"y{axis}",
        "line": {"shape": shape, "dash": dash, "width": 1.6},
        "hovertemplate": f"%{{y:.4~g}}{unit}<extra>{html.escape(name)}</extra>",
    }
    if colour:
        trace["line"]["color"] = colour
    if fill:
        trace["fill"] = fill
    if text is not None:
        trace["text"] = [text[i] for i in keep]
        trace["hovertemplate"] = f"%{{text}}<extra>{html.escape(name)}</extra>"
    return trace


def _shapes(records: list[dict[str, Any]], windows: dict[str, Any]
            ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    for name, span in windows.items():
        if name in WINDOW_FILL and isinstance(span, (list, tuple)) and len(span) == 2 \
                and None not in span:
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": span[0],
                           "x1": span[1], "y0": 0, "y1": 1, "layer": "below",
                           "fillcolor": WINDOW_FILL[name], "line": {"width": 0}})
            notes.append({"x": (span[0] + span[1]) / 2, "y": 1.0, "xref": "x", "yref": "paper",
                          "text": name, "showarrow": False, "yanchor": "bottom",
                          "font": {"size": 10, "color": "#777"}})
    for region in regions(records):
        kind, label, t0, t1 = region.kind, region.label, region.t0, region.t1
        fill = FAULT_FILL if kind == "fault" else ROLLBACK_FILL
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": t0,
                       "x1": max(t1, t0 + 0.2), "y0": 0, "y1": 1, "layer": "below",
                       "fillcolor": fill, "line": {"width": 0}, "name": f"{kind} {label}"})
        notes.append({"x": t0, "y": 1.0, "xref": "x", "yref": "paper", "showarrow": False,
                      "xanchor": "left", "yanchor": "top", "font": {"size": 10},
                      "bgcolor": "rgba(255,255,255,0.8)",
                      "text": f"{'fault' if kind == 'fault' else 'rollback'} {label}"})
    for ev in records:
        if ev.get("kind") == "event" and ev.get("event") in ("head_killed", "abort") \
                and _finite(ev.get("t")) is not None:
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": ev["t"],
                           "x1": ev["t"], "y0": 0, "y1": 1,
                           "line": {"color": "#d62728" if ev["event"] == "head_killed"
                                    else "#000", "width": 1.2, "dash": "dot"}})
    return shapes, notes


def timeline_figure(records: list[dict[str, Any]], windows: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    """The run's timeline as one Plotly figure: stacked panels on ONE time axis (zoom one,
    zoom all), a unified hover that reads every panel at the mouse's time, fault and rollback
    bands across all panels, the windows shaded."""
    samples = sorted((r for r in records if r.get("kind") == "sample"
                      and _finite(r.get("t")) is not None), key=lambda r: r["t"])
    ts = [float(r["t"]) for r in samples]
    panels: list[tuple[str, list[dict[str, Any]]]] = []
    if samples:
        up = [1.0 if r.get("gcs_up") else 0.0 for r in samples]
        down = _trace("GCS down", ts, [1.0 - u for u in up], 0, colour="rgba(214,39,40,0.8)",
                      fill="tozeroy")
        down.update(hoverinfo="skip", showlegend=False)
        down.pop("hovertemplate")
        panels.append(("GCS", [down, _trace("GCS", ts, up, 0, colour="#2ca02c", fill="tozeroy",
                                            text=["up" if u else "DOWN" for u in up])]))
        panels.append(("nodes", [
            _trace("nodes alive", ts, [_finite(r.get("nodes_alive")) for r in samples], 0,
                   colour="#1f77b4"),
            _trace("nodes total", ts, [_finite(r.get("nodes_total")) for r in samples], 0,
                   colour="#7f7f7f", dash="dash")]))
        if any(_finite(r.get("gpus_total")) for r in samples):
            panels.append(("GPUs", [
                _trace("GPUs total", ts, [_finite(r.get("gpus_total")) for r in samples], 0,
                       colour="#ff7f0e"),
                _trace("GPUs available", ts,
                       [_finite(r.get("gpus_available")) for r in samples], 0,
                       colour="#8c564b", dash="dash")]))
        store = [r for r in samples if r.get("object_store_used_mb") is not None]
        if store:
            st = [float(r["t"]) for r in store]
            panels.append(("MB", [
                _trace("object store used", st,
                       [_finite(r.get("object_store_used_mb")) for r in store], 0, unit=" MB"),
                _trace("spilled", st, [_finite(r.get("spilled_mb")) for r in store], 0,
                       dash="dash", unit=" MB")]))
    loads = load_series(records)
    if loads:
        def per_load(key: str, unit: str, dash: str = "solid", suffix: str = ""
                     ) -> list[dict[str, Any]]:
            return [_trace(f"{name}{suffix}", s["t"], [_finite(v) for v in s[key]], 0,
                           shape="vh", dash=dash, unit=unit) for name, s in sorted(loads.items())]

        panels.append(("per s", per_load("rate", "/s", suffix=" throughput")))
        panels.append(("ms", per_load("p95", " ms", suffix=" p95")
                       + per_load("p99", " ms", "dot", " p99")))
        panels.append(("failures/s", per_load("fail", "/s", suffix=" failures")))
    layout: dict[str, Any] = {
        # every panel at the mouse's time; no cut-off, as flat stretches keep only their ends
        "hovermode": "x unified", "hoversubplots": "axis", "hoverdistance": -1,
        "dragmode": "zoom",
        "margin": {"l": 60, "r": 20, "t": 44, "b": 40}, "showlegend": True,
        "legend": {"orientation": "h", "y": -0.06, "font": {"size": 10}},
        "xaxis": {"title": {"text": "seconds since the run started"}, "showspikes": True,
                  "spikemode": "across", "spikethickness": 1, "spikedash": "dot",
                  "anchor": f"y{len(panels)}" if len(panels) > 1 else "y"},
        "font": {"family": "system-ui, sans-serif", "size": 11},
        "plot_bgcolor": "#fff", "paper_bgcolor": "#fff",
    }
    gap = 0.025
    height = (1.0 - gap * max(len(panels) - 1, 0)) / max(len(panels), 1)
    data: list[dict[str, Any]] = []
    for i, (title, traces) in enumerate(panels):
        axis = i + 1
        top = 1.0 - i * (height + gap)
        key = "yaxis" if axis == 1 else f"yaxis{axis}"
        layout[key] = {"domain": [max(top - height, 0.0), top], "title": {"text": title},
                       "fixedrange": True, "zeroline": False, "gridcolor": "#eee",
                       "rangemode": "tozero"}
        if title == "GCS":
            layout[key].update(tickvals=[0, 1], ticktext=["down", "up"], range=[-0.05, 1.15])
        for trace in traces:
            trace["yaxis"] = "y" if axis == 1 else f"y{axis}"
            data.append(trace)
    layout["shapes"], layout["annotations"] = _shapes(records, windows or {})
    if not data:
        layout["annotations"].append({"text": "no data recorded", "showarrow": False,
                                      "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5})
    return {"data": data, "layout": layout,
            "config": {"displaylogo": False, "responsive": True, "scrollZoom": False}}
