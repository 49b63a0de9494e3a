"""The one registry of what raychaos measures: every metric's name, unit, direction and producer.

Validation (an SLO on a metric nobody produces is refused), SLO evaluation (which probe's
evidence or which load records hold the value), ``abort_if`` (which metrics can be watched
live), the report (units) and ``compare`` (which way is worse) all read this table, so a metric
is defined once. ``producer`` says where the value comes from:

- ``probe:<name>``: the evidence of that probe (``evidence_key`` names the field);
- ``loads``: the loads' per-second stats records over the SLO's window;
- ``monitor``: the monitor's samples over the window (object store, spill).

``live`` metrics are computed from the timeline while the run goes on (``abort_if``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["LIVE_METRICS", "METRICS", "Metric", "SLO_METRICS", "probe_of"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # "s", "ms", "ratio", "count", "MB", "bool", "tasks/s"
    better: Literal["lower", "higher"]
    producer: str
    description: str
    evidence_key: str | None = None  # for probe:* producers
    slo: bool = True  # may be named by an SLO
    live: bool = False  # may be named by abort_if


_ALL = [
    Metric("gcs_recovery_s", "s", "lower", "probe:gcs_recovery",
           "seconds from the head/GCS kill to the start of the first stretch of at least 5 s "
           "of uninterrupted GCS answers", "gcs_recovery_s"),
    Metric("nodes_recovery_s", "s", "lower", "probe:gcs_recovery",
           "seconds from the kill until every worker alive before it is ALIVE with its node ID "
           "AND its raylet has reported to the new GCS (re-registered, measured where the "
           "target can tell)", "nodes_recovery_s"),
    Metric("gcs_flaps", "count", "lower", "probe:gcs_recovery",
           "times the GCS went down again after its first answer following the kill",
           "gcs_flaps_after_first_answer"),
    Metric("job_survival_ratio", "ratio", "higher", "probe:job_survival",
           "fraction of load jobs RUNNING (and progressing) or SUCCEEDED after the fault",
           "ratio"),
    Metric("sentinel_preserved", "bool", "higher", "probe:sentinel_preserved",
           "1 when the detached sentinel actor kept its PID and state, else 0", "preserved"),
    Metric("task_failure_ratio", "ratio", "lower", "loads",
           "failed / (completed + failed) operations of the loads in the window"),
    Metric("throughput_ratio", "ratio", "higher", "loads",
           "load throughput in the window (completions per wall second, stalled seconds "
           "counted as zero) as a fraction of baseline"),
    Metric("p95_latency_ms", "ms", "lower", "loads",
           "p95 latency of the loads' completions in the window"),
    Metric("p99_latency_ms", "ms", "lower", "loads",
           "p99 latency of the loads' completions in the window"),
    Metric("throughput_recovery_s", "s", "lower", "loads",
           "seconds after the end of chaos until a 3-second mean of throughput is back to "
           ">= 90% of baseline"),
    Metric("checksum_errors", "count", "lower", "loads",
           "blocks whose checksum did not match (corrupted) in the window"),
    Metric("blocks_lost_or_corrupted", "count", "lower", "loads",
           "output blocks that were corrupted (checksum mismatch) or lost (could not be "
           "fetched) in the window"),
    Metric("gpu_stranded_frac", "ratio", "lower", "loads",
           "mean fraction of allocated GPU capacity that sat idle in the window"),
    Metric("spilled_mb", "MB", "lower", "monitor",
           "most object-store megabytes spilled to disk at any moment in the window"),
    Metric("error_ratio", "ratio", "lower", "loads",
           "failures / (count + failures) of the loads over the last for_s seconds",
           slo=False, live=True),
    Metric("gcs_down_s", "s", "lower", "monitor",
           "seconds the GCS has been down without interruption", slo=False, live=True),
    Metric("nodes_dead", "count", "lower", "monitor",
           "nodes the GCS reports dead (or missing) right now", slo=False, live=True),
]

METRICS: dict[str, Metric] = {m.name: m for m in _ALL}
SLO_METRICS: dict[str, Metric] = {m.name: m for m in _ALL if m.slo}
LIVE_METRICS: dict[str, Metric] = {m.name: m for m in _ALL if m.live}


def probe_of(metric: str) -> str | None:
    """The probe whose evidence holds ``metric``, or None when a load/monitor produces it."""
    producer = METRICS[metric].producer
    return producer.split(":", 1)[1] if producer.startswith("probe:") else None
