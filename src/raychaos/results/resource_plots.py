"""Pictures of the resource failure modes: the spill sawtooth, stranded GPUs, the ramp's knee.

- :func:`render_resources_png` — one run, on its time axis: object store use and spilled bytes,
  the spill and restore rates (MB/s, from Ray's cumulative counters), the loads' throughput,
  the share of GPU time spent waiting, and the GPU watch's held / idle / stranded GPUs. A
  working set that does not fit shows as a sawtooth of store use with restore bursts, and the
  GPU tasks' waiting rises with them. ``report.html`` shows it when a run has such data.
- :func:`plot_ramp` — ``raychaos ramp``: completions/s and p95 against offered load, one line
  per trial and variant (with and without the fault), knees marked.

Same rules as :mod:`raychaos.results.plots`: matplotlib's object API on the Agg canvas only.
"""

from __future__ import annotations

import math
from io import BytesIO
from pathlib import Path
from typing import Any

from raychaos.observe.resources import rate_series
from raychaos.results.plots import EVENT_STYLES, WINDOW_COLOURS, _num

__all__ = ["has_resource_data", "plot_ramp", "render_resources_png"]


def has_resource_data(records: list[dict[str, Any]]) -> bool:
    return any(r.get("kind") == "gpu" or (r.get("kind") == "sample"
                                         and r.get("spill_total_mb") is not None)
               for r in records)


def render_resources_png(records: list[dict[str, Any]], windows: dict[str, Any] | None = None,
                         title: str = "") -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    samples = [r for r in records if r.get("kind") == "sample"
               and r.get("spill_total_mb") is not None]
    gpu = [r for r in records if r.get("kind") == "gpu"]
    loads = [r for r in records if r.get("kind") == "load"]
    fig = Figure(figsize=(11, 11), dpi=90)
    FigureCanvasAgg(fig)
    ax_store, ax_rate, ax_tput, ax_gpu = fig.subplots(4, 1, sharex=True)
    if title:
        fig.suptitle(title, fontsize=12)
    if samples:
        ts = [r["t"] for r in samples]
        ax_store.plot(ts, [_num(r.get("object_store_used_mb")) for r in samples],
                      label="object store used MB", color="#17becf")
        ax_store.plot(ts, [_num(r.get("spilled_mb")) for r in samples], label="spilled MB",
                      color="#9467bd", linestyle="--")
        series = rate_series(samples)
        for key, label, colour in (("spill", "spill MB/s", "#d62728"),
                                   ("restore", "restore MB/s", "#1f77b4")):
            rt, rates = series[key]
            ax_rate.plot(rt, rates, label=label, color=colour)
    ax_store.set_ylabel("MB")
    ax_rate.set_ylabel("MB/s")
    names = sorted({str(r.get("load")) for r in loads})
    for name in names:
        rows = [r for r in loads if r.get("load") == name]
        ax_tput.step([r["t"] for r in rows], [_num(r.get("count")) for r in rows], where="pre",
                     label=f"{name} completions/s")
        idle = [(r["t"], _num(r.get("gpu_stranded_frac"))) for r in rows
                if r.get("gpu_stranded_frac") is not None]
        if idle:
            ax_gpu.step([t for t, _ in idle], [v for _, v in idle], where="pre",
                        label=f"{name}: share of GPU time waiting", linestyle=":")
    ax_tput.set_ylabel("completions/s")
    if gpu:
        gt = [r["t"] for r in gpu]
        ax_gpu.step(gt, [_num(r.get("gpus_total")) for r in gpu], where="post",
                    label="GPUs total", color="#7f7f7f", linestyle="--")
        for name in sorted({n for r in gpu for n in r.get("loads", {})}):
            for key, style in (("held", "-"), ("stranded", "--")):
                ax_gpu.step(gt, [_num(r.get("loads", {}).get(name, {}).get(key)) for r in gpu],
                            where="post", label=f"{name} {key}", linestyle=style)
    ax_gpu.set_ylabel("GPUs / share")
    ax_gpu.set_xlabel("seconds since run start")
    events = [r for r in records if r.get("kind") == "event"]
    for ax in (ax_store, ax_rate, ax_tput, ax_gpu):
        for phase, span in (windows or {}).items():
            if phase != "run" and isinstance(span, (list, tuple)) and len(span) == 2 \
                    and None not in span:
                ax.axvspan(_num(span[0]), _num(span[1]),
                           color=WINDOW_COLOURS.get(phase, "#f0f0f0"), zorder=0)
        for ev in events:
            mark = EVENT_STYLES.get(str(ev.get("event")))
            t = _num(ev.get("t"))
            if mark and not math.isnan(t):
                ax.axvline(t, color=mark[0], linestyle=mark[1], linewidth=1.1)
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper right", fontsize=7)
        else:
            ax.text(0.5, 0.5, "no data recorded", transform=ax.transAxes, ha="center",
                    va="center", color="#7f7f7f")
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    buf = BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def plot_ramp(result: dict[str, Any], path: Path) -> Path:
    """Throughput and p95 against offered load for every trial of every variant."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 8), dpi=90)
    FigureCanvasAgg(fig)
    ax_tput, ax_lat = fig.subplots(2, 1, sharex=True)
    fig.suptitle(f"ramp: {Path(result['experiment']).name}", fontsize=12)
    top = 0.0
    for v, (name, entry) in enumerate(result["variants"].items()):
        colour = ("#1f77b4", "#d62728", "#2ca02c")[v % 3]
        for i, trial in enumerate(entry["trials"]):
            steps = trial.get("steps") or []
            offered = [s["offered"] for s in steps]
            top = max([top, *offered])
            label = name if i == 0 else None
            ax_tput.plot(offered, [s["achieved"] for s in steps], marker="o", color=colour,
                         alpha=0.8, label=label)
            ax_lat.plot(offered, [_num(s.get("p95_ms")) for s in steps], marker="o",
                        color=colour, alpha=0.8, label=label)
            if trial.get("knee") is not None:
                ax_tput.axvline(trial["knee"], color=colour, linestyle=":", alpha=0.7)
    if top:
        ax_tput.plot([0, top], [0, top], color="#7f7f7f", linestyle="--", label="offered")
    ax_tput.set_ylabel("completed tasks/s")
    ax_lat.set_ylabel("p95 ms")
    ax_lat.set_xlabel("offered tasks/s (knees dotted)")
    for ax in (ax_tput, ax_lat):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, format="png")
    return path
