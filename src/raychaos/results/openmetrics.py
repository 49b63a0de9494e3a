"""A run as Prometheus metrics: the whole timeline with its timestamps, and the run's figures.

Teams already have Prometheus and Grafana next to their Ray clusters; a game day should show up
there, beside Ray's own metrics. Two shapes, because Prometheus takes two kinds of input:

- :func:`openmetrics_text` — ``openmetrics.txt`` in every results folder: every sample of the
  timeline with its own timestamp (GCS up, nodes, GPUs, each load's operations, failures and
  latency, each fault and rollback as a 1/0 series), plus the run's figures at its end. It is
  what ``promtool tsdb create-blocks-from openmetrics`` backfills into a Prometheus TSDB.
- :func:`figures_text` — the run's figures without timestamps (verdict, SLO values and bounds,
  recovery, per-load window statistics, fault start/end times as values): what a Pushgateway
  accepts. A Pushgateway refuses samples that carry timestamps, by design, so a timeline cannot
  be pushed; its figures can, and Prometheus scrapes them from there.

Every series carries ``experiment`` (the slug) and ``run_id`` labels.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from raychaos.observe.recovery import recovery_figures
from raychaos.results.regions import regions
from raychaos.results.store import RunView, load_run
from raychaos.results.story import load_windows

__all__ = ["OPENMETRICS_FILE", "figures_text", "openmetrics_text", "write_openmetrics"]

OPENMETRICS_FILE = "openmetrics.txt"
VERDICT_CODE = {"pass": 0, "fail": 1, "error": 2, "inconclusive": 3}
SAMPLE_GAUGES = {"gcs_up": "1 when the GCS answered the sample, else 0",
                 "nodes_alive": "nodes ALIVE (or DRAINING)", "nodes_total": "nodes known",
                 "gpus_total": "GPUs of alive nodes", "gpus_available": "GPUs not in use",
                 "object_store_used_mb": "object store bytes in use",
                 "spilled_mb": "object store bytes spilled to disk"}
LOAD_FIELDS = {"seconds": "seconds", "count": "operations", "failures": "failures",
               "throughput": "throughput_per_second", "error_ratio": "error_ratio",
               "p50_ms": "latency_p50_seconds", "p95_ms": "latency_p95_seconds",
               "p99_ms": "latency_p99_seconds", "dip": "dip_ratio",
               "time_back_s": "time_back_seconds"}
SAMPLE_NAMES = {"object_store_used_mb": "object_store_used_bytes", "spilled_mb": "spilled_bytes",
                "gpus_total": "gpus", "nodes_total": "nodes_known"}
MIB = 2**20


def _esc(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(labels: dict[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


def _num(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _ms_to_s(value: Any) -> float | None:
    v = _num(value)
    return None if v is None else v / 1000.0


class _Families:
    """Metric families in order, each with its samples (OpenMetrics forbids interleaving)."""

    def __init__(self, base: dict[str, Any], timestamps: bool):
        self.base, self.timestamps = base, timestamps
        self.meta: dict[str, tuple[str, str]] = {}
        self.samples: dict[str, list[tuple[str, float, float | None]]] = defaultdict(list)

    def add(self, name: str, kind: str, help_text: str, value: Any,
            ts: float | None = None, suffix: str = "", /, **labels: Any) -> None:
        v = _num(value)
        if v is None:
            return
        self.meta.setdefault(name, (kind, help_text))
        self.samples[name].append((name + suffix + _labels({**self.base, **labels}), v, ts))

    def text(self, eof: bool) -> str:
        out = []
        for name, (kind, help_text) in self.meta.items():
            out.append(f"# TYPE {name} {kind}")
            out.append(f"# HELP {name} {_esc(help_text)}")
            rows = sorted(self.samples[name], key=lambda s: (s[0], s[2] or 0.0))
            for series, value, ts in rows:
                stamp = f" {ts:.3f}" if self.timestamps and ts is not None else ""
                out.append(f"{series} {value:.10g}{stamp}")
        if eof:
            out.append("# EOF")
        return "\n".join(out) + "\n"


def _base(view: RunView) -> dict[str, Any]:
    s = view.summary
    return {"experiment": s.get("slug") or view.run_dir.name,
            "run_id": s.get("run_id") or view.run_dir.name}


def _figures(fam: _Families, view: RunView, ts: float | None) -> None:
    s = view.summary
    fam.add("raychaos_run_verdict", "gauge", "0 pass, 1 fail, 2 error",
            VERDICT_CODE.get(str(s.get("verdict")), 2), ts)
    fam.add("raychaos_run_duration_seconds", "gauge", "how long the run took",
            s.get("duration_s"), ts)
    fam.add("raychaos_run_start_timestamp_seconds", "gauge", "when the run started",
            s.get("started_at"), ts)
    for slo in s.get("slos") or []:
        labels = {"slo": slo.get("name"), "metric": slo.get("metric"),
                  "window": slo.get("window")}
        fam.add("raychaos_slo_value", "gauge", "an SLO's measured value", slo.get("value"),
                ts, **labels)
        fam.add("raychaos_slo_threshold", "gauge", "an SLO's bound", slo.get("threshold"), ts,
                **labels)
        fam.add("raychaos_slo_passed", "gauge", "1 when the SLO held, else 0",
                slo.get("verdict") == "pass", ts, **labels)
    for probe in s.get("probes") or []:
        fam.add("raychaos_probe_passed", "gauge", "1 when the probe passed, else 0",
                probe.get("verdict") == "pass", ts, probe=probe.get("name"))
    if any(r.kind == "fault" for r in regions(view.records)):
        for figure, value in recovery_figures(view.records).items():
            fam.add("raychaos_recovery_seconds", "gauge",
                    "recovery figures, seconds from the kill (gcs_flaps: a count)",
                    value, ts, figure=figure)
    loads, _ = load_windows(s, view.records)
    for load, per in loads.items():
        for window, stats in per.items():
            for key, metric in LOAD_FIELDS.items():
                fam.add(f"raychaos_load_window_{metric}", "gauge",
                        f"a load's {metric.replace('_', ' ')} over a window of the run",
                        _ms_to_s(stats.get(key)) if key.endswith("_ms") else stats.get(key),
                        ts, load=load, window=window)
    for region in regions(view.records):
        labels = {"kind": region.kind, "fault": region.name, "id": region.id}
        fam.add("raychaos_fault_start_timestamp_seconds", "gauge",
                "when a fault (or its rollback) began", region.ts0, ts, **labels)
        fam.add("raychaos_fault_end_timestamp_seconds", "gauge",
                "when a fault's effect (or its rollback) ended", region.ts1, ts, **labels)


def figures_text(view: RunView) -> str:
    """The run's figures in the Prometheus text format, no timestamps (for a Pushgateway)."""
    fam = _Families(_base(view), timestamps=False)
    _figures(fam, view, None)
    return fam.text(eof=False)


def openmetrics_text(view: RunView) -> str:
    """The whole timeline, timestamped, and the figures at the run's end (OpenMetrics)."""
    fam = _Families(_base(view), timestamps=True)
    records = sorted((r for r in view.records if _num(r.get("ts")) is not None),
                     key=lambda r: r["ts"])
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in records:
        ts = float(r["ts"])
        if r.get("kind") == "sample":
            for key, help_text in SAMPLE_GAUGES.items():
                value = r.get(key)
                number = _num(value)
                if key.endswith("_mb") and number is not None:
                    value = number * MIB
                fam.add(f"raychaos_{SAMPLE_NAMES.get(key, key)}", "gauge", help_text,
                        bool(value) if key == "gcs_up" else value, ts)
        elif r.get("kind") == "load":
            load = str(r.get("load"))
            total = totals[load]
            total[0] += _num(r.get("count")) or 0.0
            total[1] += _num(r.get("failures")) or 0.0
            fam.add("raychaos_load_operations", "counter", "a load's completed operations",
                    total[0], ts, "_total", load=load)
            fam.add("raychaos_load_failures", "counter", "a load's failed operations",
                    total[1], ts, "_total", load=load)
            for q in ("p50", "p95", "p99"):
                fam.add(f"raychaos_load_latency_{q}_seconds", "gauge",
                        f"a load's {q} latency over its last second",
                        _ms_to_s(r.get(f"{q}_ms")), ts, load=load)
    for region in regions(view.records):
        labels = {"kind": region.kind, "fault": region.name, "id": region.id}
        fam.add("raychaos_fault_active", "gauge", "1 while a fault (or its rollback) is on",
                1, region.ts0, **labels)
        fam.add("raychaos_fault_active", "gauge", "1 while a fault (or its rollback) is on",
                0, max(region.ts1, region.ts0 + 0.001), **labels)
    end = _num(view.summary.get("ended_at")) or (float(records[-1]["ts"]) if records else None)
    _figures(fam, view, end)
    return fam.text(eof=True)


def write_openmetrics(run_dir: str | Path) -> Path:
    """Write ``<run_dir>/openmetrics.txt``; return its path."""
    run = Path(run_dir)
    out = run / OPENMETRICS_FILE
    out.write_text(openmetrics_text(load_run(run)), encoding="utf-8")
    return out
