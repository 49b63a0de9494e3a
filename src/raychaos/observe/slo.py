"""SLO judgement over windows of the timeline.

Windows come from the fault events on the run's one clock:

``baseline``, ``chaos``, ``recovery`` and ``run``, as :mod:`raychaos.observe.windows`
defines them.

Load metrics are computed from the per-second ``load`` records. Window percentiles are the
count-weighted percentiles of the per-second percentiles — an approximation (the loads do not ship
raw samples) that is exact when latencies are steady within each second, and is reported as such.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from raychaos.catalog import stats_format
from raychaos.config.settings import SloProfile, SloSpec
from raychaos.observe.resources import resource_metric
from raychaos.observe.windows import windows

__all__ = ["OPS", "evaluate", "load_metrics", "weighted_percentile", "windows"]

OPS = {
    "<=": lambda v, t: v <= t,
    "<": lambda v, t: v < t,
    ">=": lambda v, t: v >= t,
    ">": lambda v, t: v > t,
    "==": lambda v, t: v == t,
}


def weighted_percentile(pairs: Iterable[tuple[float | None, float]], q: float) -> float | None:
    """Percentile ``q`` of values weighted by counts (the one definition, in loads/_stats.py)."""
    result: float | None = stats_format().weighted_percentile(pairs, q)
    return result


def _in(records: list[dict[str, Any]], window: tuple[float, float],
        load: str | None) -> list[dict[str, Any]]:
    lo, hi = window
    return [r for r in records if r.get("kind") == "load" and lo <= r["t"] < hi
            and (load is None or r.get("load") == load)]


def load_metrics(records: list[dict[str, Any]], window: tuple[float, float],
                 load: str | None = None) -> dict[str, Any]:
    """Throughput, error ratio and latency percentiles of the loads inside ``window``."""
    rows = _in(records, window, load)
    count = sum(r.get("count", 0) for r in rows)
    failures = sum(r.get("failures", 0) for r in rows)
    seconds = max(window[1] - window[0], 1e-9)
    names = {r.get("load") for r in rows}
    per_load_seconds = max(len(rows) / max(len(names), 1), 1.0) if rows else 0.0
    return {
        "records": len(rows),
        "count": count,
        "failures": failures,
        "seconds": round(seconds, 3),
        "throughput": count / per_load_seconds if per_load_seconds else 0.0,
        "failure_ratio": failures / (count + failures) if count + failures else None,
        "p50_ms": weighted_percentile(((r.get("p50_ms"), r.get("count", 0)) for r in rows), 50),
        "p95_ms": weighted_percentile(((r.get("p95_ms"), r.get("count", 0)) for r in rows), 95),
        "p99_ms": weighted_percentile(((r.get("p99_ms"), r.get("count", 0)) for r in rows), 99),
    }


def throughput_recovery_s(records: list[dict[str, Any]], wins: dict[str, tuple[float, float]],
                          load: str | None = None, fraction: float = 0.9) -> float | None:
    """Seconds after the end of chaos until a 3-second mean of throughput ≥ fraction×baseline."""
    if "chaos" not in wins:
        return None
    base = load_metrics(records, wins["baseline"], load)["throughput"]
    if not base:
        return None
    per_second: dict[int, float] = {}
    for r in _in(records, (wins["chaos"][0], math.inf), load):
        per_second[int(math.floor(r["t"]))] = per_second.get(int(math.floor(r["t"])), 0) + r.get(
            "count", 0)
    start = int(math.floor(wins["chaos"][1]))
    last = max(per_second, default=start)
    for s in range(start, last - 1):
        mean = sum(per_second.get(s + k, 0) for k in range(3)) / 3.0
        if mean >= fraction * base:
            return max(0.0, s - wins["chaos"][1])
    return None


def metric_value(slo: SloSpec, records: list[dict[str, Any]],
                 wins: dict[str, tuple[float, float]], probes: dict[str, dict[str, Any]]
                 ) -> tuple[float | None, dict[str, Any]]:
    """The measured value of one SLO's metric, with the evidence it came from."""
    ev_gcs = probes.get("gcs_recovery", {}).get("evidence", {})
    if slo.metric == "gcs_recovery_s":
        return ev_gcs.get("gcs_recovery_s"), {"probe": "gcs_recovery"}
    if slo.metric == "nodes_recovery_s":
        return ev_gcs.get("nodes_recovery_s"), {"probe": "gcs_recovery"}
    if slo.metric == "job_survival_ratio":
        return probes.get("job_survival", {}).get("evidence", {}).get("ratio"), {
            "probe": "job_survival"}
    if slo.metric == "sentinel_preserved":
        ev = probes.get("sentinel_preserved", {}).get("evidence")
        return (None if ev is None else float(bool(ev.get("preserved")))), {
            "probe": "sentinel_preserved"}
    if slo.metric == "throughput_recovery_s":
        return throughput_recovery_s(records, wins, slo.load), {"window": "after chaos"}
    resource = resource_metric(slo.metric, records, wins, slo.window, slo.load, probes)
    if resource is not None:  # spill rates, stranded GPUs, /dev/shm, the ramp's knee
        return resource
    if slo.window not in wins:
        return None, {"note": f"the run has no {slo.window} window (no fault was applied)"}
    m = load_metrics(records, wins[slo.window], slo.load)
    evidence = {k: m[k] for k in ("records", "count", "failures", "seconds")}
    if slo.metric == "task_failure_ratio":
        return m["failure_ratio"], evidence
    if slo.metric == "throughput_ratio":
        base = load_metrics(records, wins["baseline"], slo.load)["throughput"]
        evidence["baseline_throughput"] = base
        return (m["throughput"] / base if base else None), evidence
    if slo.metric in ("p95_latency_ms", "p99_latency_ms"):
        return m[slo.metric.split("_")[0] + "_ms"], evidence
    rows = _in(records, wins[slo.window], slo.load)
    if slo.metric == "checksum_errors":
        counted = [r for r in rows if "checksum_errors" in r]
        return (sum(r["checksum_errors"] for r in counted) if counted else None), evidence
    if slo.metric == "gpu_stranded_frac":
        vals = [r["gpu_stranded_frac"] for r in rows if r.get("gpu_stranded_frac") is not None]
        return (sum(vals) / len(vals) if vals else None), evidence
    if slo.metric == "spilled_mb":
        lo, hi = wins[slo.window]
        vals = [r["spilled_mb"] for r in records if r.get("kind") == "sample"
                and lo <= r["t"] < hi and r.get("spilled_mb") is not None]
        return (max(vals) if vals else None), {"samples": len(vals)}
    return None, {"note": f"unknown metric {slo.metric}"}


def evaluate(profile: SloProfile | None, records: list[dict[str, Any]],
             probes: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every SLO of the profile judged on this run: (rows, windows)."""
    wins = windows(records)
    by_name = {p["name"]: p for p in probes}
    rows = []
    for slo in (profile.slos if profile else []):
        value, evidence = metric_value(slo, records, wins, by_name)
        if value is None:
            verdict = "fail"
            evidence = {**evidence, "note": evidence.get("note", "not measured in this run")}
        else:
            verdict = "pass" if OPS[slo.op](value, slo.threshold) else "fail"
        rows.append({"name": slo.name, "metric": slo.metric, "window": slo.window,
                     "load": slo.load, "value": None if value is None else round(value, 4),
                     "op": slo.op, "threshold": slo.threshold, "verdict": verdict,
                     "description": slo.description, "evidence": evidence})
    return rows, {k: [round(v[0], 3), round(v[1], 3)] for k, v in wins.items()}
