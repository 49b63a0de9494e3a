"""How long the GCS takes to answer, now and at baseline: the evidence of a slow GCS.

A GCS that is slow rather than dead breaks everything that waits on it with a deadline — job
submission, actor creation, the dashboard, the raylets' own calls — without a single error
until the deadlines run out. This probe asks the GCS for its node table ``samples`` times now
(each with a deadline of ``timeout_s``, far longer than the monitor's) and compares with the
round trips the monitor measured in the baseline window (``latency_ms`` of the answered
``sample`` records): the run fails when the p95 now is above ``max_ms``.
"""

from __future__ import annotations

import statistics
from typing import Annotated, Any

from raychaos.catalog import stats_format
from raychaos.config.arguments import Range
from raychaos.context import current
from raychaos.observe.windows import windows
from raychaos.results.store import read_timeline

__all__ = ["gcs_latency"]


def _p95(values: list[float]) -> float:
    """The p95 by the one percentile definition (nearest rank, ``loads/_stats.py``)."""
    value: float = stats_format().percentile(sorted(values), 95)
    return value


def gcs_latency(samples: Annotated[int, Range(1, 1000)] = 10,
                max_ms: Annotated[float, Range(0.1, 600_000)] = 500.0,
                timeout_s: Annotated[float, Range(0.1, 600)] = 10.0) -> dict[str, Any]:
    """The GCS's round trip (its node table) now vs at baseline; fails above ``max_ms`` (p95).

    :param samples: how many requests to time now.
    :param max_ms: the p95 (ms) above which the probe fails.
    :param timeout_s: the deadline of each request; one without an answer counts as timed out.
    :returns: evidence: p50/p95 now, the baseline median from the monitor, their ratio.
    """
    run = current()
    now = [run.target.gcs_call_ms(timeout=timeout_s) for _ in range(samples)]
    answered = [v for v in now if v is not None]
    records = read_timeline(run.timeline.path)
    lo, hi = windows(records)["baseline"]
    base = [float(r["latency_ms"]) for r in records if r.get("kind") == "sample"
            and r.get("gcs_up") and lo <= r["t"] < hi
            and isinstance(r.get("latency_ms"), (int, float))]
    evidence: dict[str, Any] = {"samples": samples, "timed_out": samples - len(answered),
                                "max_ms": max_ms}
    if answered:
        evidence.update(p50_ms=round(statistics.median(answered), 2),
                        p95_ms=round(_p95(answered), 2))
    if base:
        evidence["baseline_p50_ms"] = round(statistics.median(base), 2)
        if answered and evidence["baseline_p50_ms"] > 0:
            evidence["ratio"] = round(evidence["p50_ms"] / evidence["baseline_p50_ms"], 2)
    if not answered:
        evidence["unobserved"] = f"the GCS did not answer within {timeout_s:g} s"
        verdict = "fail"
    else:
        verdict = "pass" if evidence["p95_ms"] <= max_ms and not evidence["timed_out"] \
            else "fail"
    run.record_probe("gcs_latency", verdict, evidence)
    return evidence
