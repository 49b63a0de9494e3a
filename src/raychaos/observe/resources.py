"""SLO figures of the resource experiments: spill and restore rates, stranded GPUs, /dev/shm.

:func:`resource_metric` is what :func:`raychaos.observe.slo.metric_value` asks for these metrics
(the ramp's knee is an ordinary probe metric): the spill/restore rates from the monitor's
cumulative counters (``spill_total_mb``, ``restore_total_mb``: Ray's own spill-manager figures),
the GPU figures from the GPU watch (:func:`raychaos.observe.gpu.gpu_metrics`) and the object
stores' placement from the storage watch (``shm_backed_ratio``).
"""

from __future__ import annotations

from typing import Any

from raychaos.observe.gpu import gpu_metrics
from raychaos.observe.watch import storage_metric

__all__ = ["GPU_METRICS", "RESOURCE_METRICS", "rate_series", "resource_metric", "spill_rates"]

GPU_METRICS = ("gpu_stranded_capacity_frac", "gpu_pending_demand_s", "gpu_task_idle_frac")
RESOURCE_METRICS = (*GPU_METRICS, "spill_mb_per_s", "restore_mb_per_s", "shm_backed_ratio")
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


def rate_series(records: list[dict[str, Any]]) -> dict[str, tuple[list[float], list[float]]]:
    """Spill and restore MB/s over time (``spill``/``restore``: times, rates) for the pictures.

    Ray exports its counters every 2 s (``RAY_metrics_report_interval_ms`` on the local
    target), so one sample per 2 s is used, or the rates alternate between 0 and twice the
    truth; a counter that went down (a raylet restarted) counts as nothing moved."""
    per_2s: dict[int, dict[str, Any]] = {}
    for r in records:
        if r.get("kind") == "sample" and r.get("spill_total_mb") is not None:
            per_2s.setdefault(int(r["t"] // 2), r)
    samples = [per_2s[k] for k in sorted(per_2s)]
    out: dict[str, tuple[list[float], list[float]]] = {}
    for key, name in (("spill_total_mb", "spill"), ("restore_total_mb", "restore")):
        ts, rates = [], []
        for a, b in zip(samples, samples[1:], strict=False):
            if a.get(key) is None or b.get(key) is None or b["t"] <= a["t"]:
                continue
            ts.append(float(b["t"]))
            rates.append(round(max(0.0, b[key] - a[key]) / (b["t"] - a["t"]), 3))
        out[name] = (ts, rates)
    return out


Measured = tuple[float | None, str, dict[str, Any]]  # (value, verdict when None, evidence)


def resource_metric(metric: str, records: list[dict[str, Any]], wins: dict[str, Window],
                    window: str, load: str | None) -> Measured:
    """(value, verdict when it has none, evidence) of a spill, GPU or /dev/shm metric.

    A figure that is missing is the harness's (``error``: the watch or the raylets' metrics
    recorded nothing in the window), except a window the run does not have (``n/a``)."""
    if window not in wins:
        return None, "n/a", {"note": f"the run has no {window} window (no fault was applied)"}
    if metric == "shm_backed_ratio":
        value, evidence = storage_metric(records, wins[window])
        return value, "error", {**evidence, "note": "not measured: no storage records in "
                                                    f"{window} (the storage watch saw nothing)"}
    if metric in GPU_METRICS:
        figures = gpu_metrics(records, wins[window], load)
        return figures[metric], "error", {
            **{k: v for k, v in figures.items() if k not in GPU_METRICS},
            "note": f"not measured: no GPU capacity or holdings in {window} (the GPU watch "
                    "recorded nothing for it)"}
    if metric not in ("spill_mb_per_s", "restore_mb_per_s"):
        raise ValueError(f"observe.resources: {metric} is not a resource metric")
    rates = spill_rates(records, wins[window])
    return rates[metric], "error", {
        **{k: v for k, v in rates.items() if k != metric},
        "note": f"not measured: fewer than two spill counters from the raylets' metrics in "
                f"{window}"}
