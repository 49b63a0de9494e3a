"""The steps of a ramp and its knee: the offered load at which the cluster stops keeping up.

A ramped load (``ramp:`` in its spec, see :class:`~raychaos.config.settings.RampSpec`) reports
``offered`` in every stats line. Grouped by it, each step gets what was achieved (completions
per second), the p95 and the failure ratio of its completions, and the head's CPU and GCS
memory over the same seconds (the monitor's samples, from Ray's own component metrics). The
first second of each step is dropped (it mixes two rates), and so are the warm-up's seconds
(``warmup``: the load at its start rate while Ray starts its workers). A step **breaks** when
its p95 passes the bound, its failure ratio passes the bound, or it completed less than
``min_achieved`` of what it was offered; the **knee** is the last step before the first break.
"""

from __future__ import annotations

from typing import Any

from raychaos.config.settings import RampSpec, SloProfile
from raychaos.observe.slo import weighted_percentile

__all__ = ["DEFAULT_P95_MS", "knee", "ramp_bounds", "ramp_steps"]

DEFAULT_P95_MS = 250.0


def ramp_bounds(ramp: RampSpec, profile: SloProfile | None) -> dict[str, float]:
    """The bounds a step must hold: the ramp's own, else the SLO profile's p95 bound."""
    p95 = ramp.p95_ms
    if p95 is None and profile is not None:
        p95 = next((s.threshold for s in profile.slos if s.metric == "p95_latency_ms"), None)
    return {"p95_ms": float(p95 if p95 is not None else DEFAULT_P95_MS),
            "failure_ratio": ramp.failure_ratio, "min_achieved": ramp.min_achieved}


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 2) if values else None


def ramp_steps(records: list[dict[str, Any]], load: str) -> list[dict[str, Any]]:
    """One row per offered rate, in the order they came."""
    rows = sorted((r for r in records if r.get("kind") == "load" and r.get("load") == load
                   and r.get("offered") is not None and not r.get("warmup")),
                  key=lambda r: r["t"])
    groups: list[list[dict[str, Any]]] = []
    for r in rows:
        if groups and groups[-1][0]["offered"] == r["offered"]:
            groups[-1].append(r)
        else:
            groups.append([r])
    samples = [r for r in records if r.get("kind") == "sample"]
    steps = []
    for group in groups:
        body = group[1:] or group  # the first second straddles the change of rate
        lo, hi = body[0]["t"] - 1.0, body[-1]["t"]
        count = sum(r.get("count", 0) for r in body)
        failures = sum(r.get("failures", 0) for r in body)
        during = [s for s in samples if lo <= s["t"] <= hi]
        steps.append({
            "offered": float(group[0]["offered"]), "seconds": len(body),
            "t": [round(group[0]["t"], 2), round(group[-1]["t"], 2)],
            "achieved": round(count / len(body), 2),
            "p95_ms": weighted_percentile(((r.get("p95_ms"), r.get("count", 0)) for r in body),
                                          95),
            "failure_ratio": round(failures / (count + failures), 4) if count + failures
            else None,
            "head_cpu_pct": _mean([s["gcs_cpu_pct"] for s in during
                                   if s.get("gcs_cpu_pct") is not None]),
            "gcs_rss_mb": _mean([s["gcs_rss_mb"] for s in during
                                 if s.get("gcs_rss_mb") is not None]),
        })
    return steps


def _breaks(step: dict[str, Any], bounds: dict[str, float]) -> str | None:
    if step["p95_ms"] is not None and step["p95_ms"] > bounds["p95_ms"]:
        return f"p95 {step['p95_ms']:.0f} ms > {bounds['p95_ms']:g} ms"
    if step["failure_ratio"] is not None and step["failure_ratio"] > bounds["failure_ratio"]:
        return f"failure ratio {step['failure_ratio']:.3f} > {bounds['failure_ratio']:g}"
    if step["achieved"] < bounds["min_achieved"] * step["offered"]:
        return (f"achieved {step['achieved']:.0f}/s of {step['offered']:.0f}/s offered "
                f"(< {bounds['min_achieved']:.0%})")
    return None


def knee(steps: list[dict[str, Any]], bounds: dict[str, float]) -> dict[str, Any]:
    """The last step that held and the first that broke (with why); ``knee`` is None when the
    very first step broke, and ``broke_at`` None when no step did (the ramp was too short)."""
    last_good: dict[str, Any] | None = None
    for step in steps:
        why = _breaks(step, bounds)
        if why:
            return {"knee": last_good["offered"] if last_good else None,
                    "knee_achieved": last_good["achieved"] if last_good else None,
                    "broke_at": step["offered"], "reason": why, "bounds": bounds,
                    "steps": len(steps)}
        last_good = step
    return {"knee": last_good["offered"] if last_good else None,
            "knee_achieved": last_good["achieved"] if last_good else None,
            "broke_at": None, "reason": "no step broke: the ramp ended first" if steps
            else "no ramp steps were reported", "bounds": bounds, "steps": len(steps)}
