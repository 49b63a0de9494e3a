"""SLO figures of the resource experiments: spill and restore rates, stranded GPUs, the knee.

:func:`resource_metric` is what :func:`raychaos.observe.slo.metric_value` asks for a metric it
does not compute itself: the spill/restore rates from the monitor's cumulative counters
(``spill_total_mb``, ``restore_total_mb``: Ray's own spill-manager figures), the GPU figures
from the GPU watch (:func:`raychaos.observe.gpu.gpu_metrics`), the object stores' placement
from the storage watch (``shm_backed_ratio``) and the ramp's knee from its probe's evidence.
"""

from __future__ import annotations

from typing import Any

from raychaos.config.metrics import METRICS, probe_of
from raychaos.observe.gpu import gpu_metrics
from raychaos.observe.watch import storage_metric

__all__ = ["GPU_METRICS", "resource_metric", "spill_rates"]

GPU_METRICS = ("gpu_stranded_capacity_frac", "gpu_pending_demand_s", "gpu_task_idle_frac")
Window = tuple[float, float]


def spill_rates(records: list[dict[str, Any]], window: Window) -> dict[str, Any]:
    """Mean spill and restore MB/s over ``window`` from the samples' cumulative counters."""
    lo, hi = window
    rows = [r for r in records if r.get("kind") == "sample" and lo <= r["t"] <= hi
            and r.get("spill_total_mb") is not None]
    out: dict[str, Any] = {"samples": len(rows)}
    for key, name in (("spill_total_mb", "spill_mb_per_s"),
                      ("restore_total_mb", "restore_mb_per_s")):
        vals = [(r["t"], r[key]) for r in rows if r.get(key) is not None]
        if len(vals) < 2 or vals[-1][0] <= vals[0][0]:
            out[name] = None
            continue
        # counters restart with a raylet: count only increases
        moved = sum(max(0.0, b[1] - a[1]) for a, b in zip(vals, vals[1:], strict=False))
        out[name] = round(moved / (vals[-1][0] - vals[0][0]), 3)
        out[key.replace("_total", "")] = round(moved, 2)
    return out


Value = tuple[float | None, dict[str, Any]]


def resource_metric(metric: str, records: list[dict[str, Any]], wins: dict[str, Window],
                    window: str, load: str | None,
                    probes: dict[str, dict[str, Any]]) -> Value | None:
    """(value, evidence) of a resource metric, or None when ``metric`` is not one of them."""
    probe = probe_of(metric)
    if probe and metric == "ramp_knee":
        ev = probes.get(probe, {}).get("evidence")
        key = METRICS[metric].evidence_key or metric
        return (None if ev is None else ev.get(key)), {"probe": probe}
    if metric not in GPU_METRICS and metric not in ("spill_mb_per_s", "restore_mb_per_s",
                                                    "shm_backed_ratio"):
        return None
    if window not in wins:
        return None, {"note": f"the run has no {window} window (no fault was applied)"}
    if metric == "shm_backed_ratio":
        return storage_metric(records, wins[window])
    if metric in GPU_METRICS:
        figures = gpu_metrics(records, wins[window], load)
        return figures[metric], {k: v for k, v in figures.items() if k not in GPU_METRICS}
    rates = spill_rates(records, wins[window])
    return rates[metric], {k: v for k, v in rates.items() if k != metric}
