"""Timeline plots of one run: every signal on one shared time axis, fault moments as lines.

A chaos run is read by lining things up in time — *the GCS went down here, nodes dropped here,
throughput sagged here, rollback happened here* — so every panel shares the x axis (seconds since
the run started, the timeline's ``t``) and every panel carries the same vertical lines for fault
start/applied/end and rollback start/end.

matplotlib is imported here and nowhere else, and only through the object API with the Agg canvas
(no ``pyplot``, no global backend switch), so building a report never opens a window and never
changes the plotting state of a process that imported raychaos.
"""

from __future__ import annotations

import math
from collections import defaultdict
from io import BytesIO
from typing import Any

__all__ = ["EVENT_STYLES", "gcs_spans", "load_series", "render_timeline_png"]

# event -> (colour, line style, legend label)
EVENT_STYLES: dict[str, tuple[str, Any, str]] = {
    "fault_start": ("#d62728", "--", "fault start"),
    "fault_applied": ("#d62728", "-", "fault applied"),
    "fault_end": ("#2ca02c", "--", "fault end"),
    "rollback_start": ("#9467bd", ":", "rollback start"),
    "rollback_end": ("#9467bd", "-", "rollback end"),
    "abort": ("#000000", "-", "abort"),
}
WINDOW_COLOURS = {"baseline": "#e8f0fe", "chaos": "#fde8e8", "recovery": "#e8f6e8"}


def _num(value: Any) -> float:
    """A plottable float; None and junk become NaN (a gap in the line)."""
    if isinstance(value, bool):
        return float(value)
    try:
        out = float(value)
    except (TypeError, ValueError):
        return math.nan
    return out if math.isfinite(out) else math.nan


def load_series(records: list[dict[str, Any]]) -> dict[str, dict[str, list[float]]]:
    """Per load: t, throughput (count/s over the interval since its previous line), failures/s,
    p95, p99."""
    series: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    last_t: dict[str, float] = {}
    for rec in records:
        if rec.get("kind") != "load":
            continue
        name = str(rec.get("load") or "load")
        t = _num(rec.get("t"))
        if math.isnan(t):
            continue
        dt = t - last_t[name] if name in last_t and t > last_t[name] else 1.0
        last_t[name] = t
        s = series[name]
        s["t"].append(t)
        s["rate"].append(_num(rec.get("count")) / dt)
        s["fail"].append(_num(rec.get("failures")) / dt)
        s["p95"].append(_num(rec.get("p95_ms")))
        s["p99"].append(_num(rec.get("p99_ms")))
    return series


def gcs_spans(samples: list[dict[str, Any]]
               ) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """(start, width) spans where the GCS was up and where it was down."""
    up: list[tuple[float, float]] = []
    down: list[tuple[float, float]] = []
    points = [(_num(r.get("t")), bool(r.get("gcs_up"))) for r in samples]
    points = [p for p in points if not math.isnan(p[0])]
    for (t, is_up), (t_next, _) in zip(points, points[1:] + points[-1:], strict=True):
        spans = up if is_up else down
        end = max(t_next, t)
        if spans and abs(spans[-1][0] + spans[-1][1] - t) < 1e-9:  # extend the current run
            spans[-1] = (spans[-1][0], end - spans[-1][0])
        else:
            spans.append((t, end - t))
    return up, down


def render_timeline_png(records: list[dict[str, Any]],
                        windows: dict[str, Any] | None = None,
                        title: str = "") -> bytes:
    """Draw the run's timeline as one PNG (bytes) with six panels sharing the time axis.

    Panels: GCS up/down band, alive/total nodes, GPU capacity (total/available), per-load
    throughput, per-load p95/p99 latency, per-load failures. ``windows`` (the summary's
    ``{"baseline": [t0, t1], ...}``) shades the phases when given. Missing data leaves a panel
    empty with a note rather than failing, so a crashed run still gets a picture.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    samples = [r for r in records if r.get("kind") == "sample"]
    events = [r for r in records if r.get("kind") == "event"]
    loads = load_series(records)

    fig = Figure(figsize=(11, 15), dpi=90)
    FigureCanvasAgg(fig)
    axes = fig.subplots(7, 1, sharex=True,
                        gridspec_kw={"height_ratios": [0.6, 1, 1, 1, 1.3, 1.3, 1]})
    ax_gcs, ax_nodes, ax_gpu, ax_store, ax_tput, ax_lat, ax_err = axes
    if title:
        fig.suptitle(title, fontsize=12)

    ts = [_num(r.get("t")) for r in samples]
    # 1. GCS band: green where up, red where down; each sample holds until the next one.
    up_spans, down_spans = gcs_spans(samples)
    ax_gcs.broken_barh(up_spans, (0, 1), color="#2ca02c", alpha=0.6, label="GCS up")
    ax_gcs.broken_barh(down_spans, (0, 1), color="#d62728", alpha=0.85, label="GCS down")
    ax_gcs.set_yticks([])
    ax_gcs.set_ylabel("GCS")
    # 2. Nodes.
    if samples:
        ax_nodes.step(ts, [_num(r.get("nodes_alive")) for r in samples], where="post",
                      label="alive", color="#1f77b4")
        ax_nodes.step(ts, [_num(r.get("nodes_total")) for r in samples], where="post",
                      label="total", color="#7f7f7f", linestyle="--")
    ax_nodes.set_ylabel("nodes")
    # 3. GPUs.
    if samples:
        ax_gpu.step(ts, [_num(r.get("gpus_total")) for r in samples], where="post",
                    label="GPUs total", color="#ff7f0e")
        ax_gpu.step(ts, [_num(r.get("gpus_available")) for r in samples], where="post",
                    label="GPUs available", color="#8c564b", linestyle="--")
    ax_gpu.set_ylabel("GPUs")
    # 4. Object store and spill (from the raylets' own metrics).
    store = [r for r in samples if r.get("object_store_used_mb") is not None]
    if store:
        st = [_num(r.get("t")) for r in store]
        ax_store.step(st, [_num(r.get("object_store_used_mb")) for r in store], where="post",
                      label="object store used MB", color="#17becf")
        ax_store.step(st, [_num(r.get("spilled_mb")) for r in store], where="post",
                      label="spilled MB", color="#9467bd", linestyle="--")
    ax_store.set_ylabel("MB")
    # 4-6. Loads.
    for name, s in sorted(loads.items()):
        # A stats line covers the second *before* its t, hence steps drawn "pre".
        ax_tput.step(s["t"], s["rate"], where="pre", label=name)
        line = ax_lat.step(s["t"], s["p95"], where="pre", label=f"{name} p95")[0]
        ax_lat.step(s["t"], s["p99"], where="pre", label=f"{name} p99",
                    color=line.get_color(), linestyle="--")
        ax_err.step(s["t"], s["fail"], where="pre", label=f"{name} failures/s")
    ax_tput.set_ylabel("completions/s")
    ax_lat.set_ylabel("latency ms")
    ax_err.set_ylabel("failures/s")
    ax_err.set_xlabel("seconds since run start")

    empty = {ax_gcs: not samples, ax_nodes: not samples, ax_gpu: not samples, ax_store: not store,
             ax_tput: not loads, ax_lat: not loads, ax_err: not loads}
    for ax, is_empty in empty.items():
        if is_empty:
            ax.text(0.5, 0.5, "no data recorded", transform=ax.transAxes, ha="center",
                    va="center", color="#7f7f7f")

    # Phase shading and event lines on every panel.
    for ax in axes:
        for phase, span in (windows or {}).items():
            if isinstance(span, (list, tuple)) and len(span) == 2 and None not in span:
                ax.axvspan(_num(span[0]), _num(span[1]),
                           color=WINDOW_COLOURS.get(phase, "#f0f0f0"), zorder=0)
        for ev in events:
            style = EVENT_STYLES.get(str(ev.get("event")))
            t = _num(ev.get("t"))
            if style and not math.isnan(t):
                ax.axvline(t, color=style[0], linestyle=style[1], linewidth=1.2, alpha=0.9)
        ax.grid(True, alpha=0.3)
        handles, _ = ax.get_legend_handles_labels()
        if handles:
            ax.legend(loc="upper right", fontsize=7)
    _event_legend(fig, events)

    fig.tight_layout(rect=(0, 0.03, 1, 0.97))
    buf = BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _event_legend(fig: Any, events: list[dict[str, Any]]) -> None:
    """One legend at the foot of the figure naming the event line styles that appear."""
    from matplotlib.lines import Line2D

    seen = [e for e in EVENT_STYLES if any(ev.get("event") == e for ev in events)]
    if not seen:
        return
    handles = [Line2D([], [], color=EVENT_STYLES[e][0], linestyle=EVENT_STYLES[e][1])
               for e in seen]
    fig.legend(handles, [EVENT_STYLES[e][2] for e in seen], loc="lower center",
               ncol=len(seen), fontsize=8, frameon=False)
