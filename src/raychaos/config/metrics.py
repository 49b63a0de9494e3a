"""The one registry of what raychaos measures: every metric's name, unit, direction and producer.

Validation (an SLO on a metric nobody produces is refused), SLO evaluation (which probe's
evidence or which load records hold the value), ``abort_if`` (which metrics can be watched
live), the report (units) and ``compare`` (which way is worse) all read this table, so a metric
is defined once. ``producer`` says where the value comes from:

- ``probe:<name>``: the evidence of that probe (``evidence_key`` names the field);
- ``loads``: the loads' per-second stats records over the SLO's window;
- ``monitor``: the monitor's samples over the window (object store, spill).
- ``gpu`` / ``storage``: the resource watch's ``kind: gpu`` / ``kind: storage`` records over the
  window (:mod:`raychaos.observe.watch`; the session starts it when an SLO names one of these).

``timing`` metrics are seconds, latencies and rates that a busy host makes *worse* without
anything being wrong with Ray (slower, fewer per second). Their misses are judged against the
host noise of their windows; invariants and counts (a lost job, a dead node, a corrupted
block) never are.

``live`` metrics are computed from the timeline while the run goes on (``abort_if``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BASELINE_PACE_METRICS", "LIVE_METRICS", "METRICS", "Metric", "SLO_METRICS",
           "probe_of"]


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str  # "s", "ms", "ratio", "count", "MB", "MB/s", "bool", "tasks/s"
    better: Literal["lower", "higher"]
    producer: str
    description: str
    evidence_key: str | None = None  # for probe:* producers
    slo: bool = True  # may be named by an SLO
    live: bool = False  # may be named by abort_if
    #: a timing or rate the host's speed moves as much as the system's: a miss measured while
    #: unrelated work loaded the host is ``inconclusive`` (see :mod:`raychaos.observe.slo`)
    timing: bool = False


_ALL = [
    Metric("gcs_recovery_s", "s", "lower", "probe:gcs_recovery",
           "seconds from the head/GCS kill to the start of the first stretch of at least 5 s "
           "of uninterrupted GCS answers", "gcs_recovery_s", timing=True),
    Metric("nodes_recovery_s", "s", "lower", "probe:gcs_recovery",
           "seconds from the kill until every worker alive before it is ALIVE with its node ID "
           "AND its raylet has reported to the new GCS (re-registered; a target that cannot "
           "tell leaves it unmeasured, an error, never assumed)", "nodes_recovery_s", timing=True),
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
           "counted as zero) as a fraction of baseline", timing=True),
    Metric("p95_latency_ms", "ms", "lower", "loads",
           "p95 latency of the loads' completions in the window",
           timing=True),
    Metric("p99_latency_ms", "ms", "lower", "loads",
           "p99 latency of the loads' completions in the window",
           timing=True),
    Metric("throughput_recovery_s", "s", "lower", "loads",
           "seconds after the end of chaos until a 3-second mean of throughput is back to "
           ">= 90% of baseline", timing=True),
    Metric("checksum_errors", "count", "lower", "loads",
           "blocks whose checksum did not match (corrupted) in the window"),
    Metric("blocks_lost_or_corrupted", "count", "lower", "loads",
           "output blocks that were corrupted (checksum mismatch) or lost (could not be "
           "fetched) in the window"),
    Metric("gpu_stranded_frac", "ratio", "lower", "loads",
           "mean fraction of allocated GPU capacity that sat idle in the window"),
    Metric("spilled_mb", "MB", "lower", "monitor",
           "most object-store megabytes spilled to disk at any moment in the window"),
    Metric("false_node_deaths", "count", "lower", "probe:false_node_deaths",
           "nodes the GCS marked DEAD while their raylet process was still running",
           "false_deaths"),
    Metric("resources_restored", "bool", "higher", "probe:resources_restored",
           "1 when, once the loads stopped, every node's available resources equal its totals",
           "restored"),
    Metric("job_history_preserved", "bool", "higher", "probe:job_history_preserved",
           "1 when every job the GCS knew before the fault is still in its job table",
           "preserved"),
    Metric("gcs_latency_p95_ms", "ms", "lower", "monitor",
           "p95 of the monitor's GCS round trips (one node-table request each) in the window",
           timing=True),
    Metric("node_deaths", "count", "lower", "monitor",
           "node IDs the GCS began to list DEAD in the window (false or not)"),
    Metric("health_check_failures", "count", "lower", "monitor",
           "health checks of raylets the GCS saw fail in the window (its own log lines)"),
    Metric("spill_mb_per_s", "MB/s", "lower", "monitor",
           "mean rate at which objects were spilled to disk in the window (all nodes)"),
    # spill and restore rates are not timing: a slower host spills and restores *less* per
    # second, so a rate past its bound is never the host's doing
    Metric("restore_mb_per_s", "MB/s", "lower", "monitor",
           "mean rate at which spilled objects were restored from disk in the window"),
    Metric("gpu_stranded_capacity_frac", "ratio", "lower", "gpu",
           "of the GPU-seconds of the nodes a load ran on (all nodes without load:), the share "
           "held by tasks waiting on their inputs or left free while its GPU demand pended"),
    Metric("gpu_pending_demand_s", "s", "lower", "gpu",
           "seconds GPU demand was pending while GPU capacity sat free (fragmented) beside it"),
    Metric("gpu_task_idle_frac", "ratio", "lower", "gpu",
           "share of held GPU-seconds whose task reported it was waiting (RUNNING_IN_RAY_GET)"),
    Metric("shm_backed_ratio", "ratio", "higher", "storage",
           "lowest share, at any moment of the window, of object stores Ray kept in /dev/shm "
           "(the rest it moved to disk)"),
    Metric("ramp_knee", "tasks/s", "higher", "probe:ramp_knee",
           "the last offered load of a ramp that kept p95, failures and throughput in bounds",
           "knee", timing=True),
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
#: load metrics read against the same load's baseline pace (a ratio to it, a time back to it)
BASELINE_PACE_METRICS = ("throughput_ratio", "throughput_recovery_s")


def probe_of(metric: str) -> str | None:
    """The probe whose evidence holds ``metric``, or None when a load/monitor produces it."""
    producer = METRICS[metric].producer
    return producer.split(":", 1)[1] if producer.startswith("probe:") else None
