"""What the monitor adds for network and health faults: node deaths as they happen, link rates
and the GCS's failed health checks — so one timeline shows the link, the checks and the deaths.

- :class:`DeathWatch` sees each node ID go from ALIVE (or DRAINING) to DEAD in the GCS's table
  and asks the target, at that moment, whether the node's raylet process is still running: a
  node marked DEAD with a live raylet died *falsely* (a partition, a saturated link, a GCS that
  gave up too early) — an ``node_dead`` event with ``raylet_alive``.
- :class:`SignalSampler` turns the target's cumulative link byte counters into Mbit/s per node
  and reads the head's count of ``Health check failed for node`` log lines: one ``signals``
  record per call (the monitor calls it once a second).

Neither blocks the GCS sampler for long: the raylet check runs only when a death is seen, the
counters are files and incremental log reads on the local target (``{}`` where not available).
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.config.rayflags import HEALTH_CHECK_FAILED_LINE
from raychaos.results.store import Ev, Timeline
from raychaos.targets.base import NodeInfo, Target

__all__ = ["FAULT_METRICS", "DeathWatch", "SignalSampler", "fault_metric"]

#: the SLO metrics read here (see :mod:`raychaos.config.metrics` for their definitions)
PROBE_METRICS = {"false_node_deaths": ("false_node_deaths", "false_deaths"),
                 "resources_restored": ("resources_restored", "restored"),
                 "job_history_preserved": ("job_history_preserved", "preserved")}
FAULT_METRICS = (*PROBE_METRICS, "gcs_latency_p95_ms", "node_deaths", "health_check_failures")


class DeathWatch:
    """ALIVE -> DEAD transitions of GCS node IDs, each written as a ``node_dead`` event."""

    def __init__(self, target: Target, timeline: Timeline):
        self.target, self.timeline = target, timeline
        self.states: dict[str, str] = {}
        self.deaths = 0

    def observe(self, nodes: list[NodeInfo]) -> list[dict[str, Any]]:
        newly = [n for n in nodes if n.state == "DEAD"
                 and self.states.get(n.node_id) in ("ALIVE", "DRAINING")]
        self.states.update({n.node_id: n.state for n in nodes})
        if not newly:
            return []
        try:
            alive = self.target.raylet_alive([n.node_id for n in newly])
        except Exception as exc:  # noqa: BLE001 - unknown is an answer; the sampler goes on
            alive = {}
            self.timeline.event(Ev.MONITOR_ERROR, "raylet-alive", error=repr(exc))
        out = []
        for node in newly:
            detail = {"node_id": node.node_id, "raylet_alive": alive.get(node.node_id),
                      "is_head": node.is_head}
            self.timeline.event(Ev.NODE_DEAD, node.name, **detail)
            out.append({"name": node.name, **detail})
        self.deaths += len(out)
        return out


class SignalSampler:
    """Link rates (Mbit/s per node) and the GCS's failed health checks, as ``signals`` records."""

    def __init__(self, target: Target, timeline: Timeline, head: str = "head"):
        self.target, self.timeline, self.head = target, timeline, head
        self._last: tuple[float, dict[str, dict[str, int]]] | None = None

    def sample(self) -> dict[str, Any] | None:
        now = time.monotonic()
        counters = self.target.network_counters()
        record: dict[str, Any] = {}
        if counters and self._last is not None:
            t0, before = self._last
            dt = max(now - t0, 1e-3)
            record["links"] = {
                node: {f"{way}_mbit": round((c[f"{way}_bytes"] - before[node][f"{way}_bytes"])
                                            * 8 / dt / 1e6, 3) for way in ("in", "out")}
                for node, c in counters.items() if node in before}
        self._last = (now, counters) if counters else self._last
        checks = self.target.ray_log_counts([self.head], [HEALTH_CHECK_FAILED_LINE])
        if self.head in checks:
            record["health_check_failures"] = checks[self.head].get(HEALTH_CHECK_FAILED_LINE, 0)
        if not record:
            return None
        return self.timeline.write("signals", **record)


def fault_metric(metric: str, window: str, records: list[dict[str, Any]],
                 wins: dict[str, tuple[float, float]], probes: dict[str, dict[str, Any]]
                 ) -> tuple[float | None, dict[str, Any]]:
    """The value of one of :data:`FAULT_METRICS` in ``window``, with where it came from."""
    if metric in PROBE_METRICS:
        probe, key = PROBE_METRICS[metric]
        value = probes.get(probe, {}).get("evidence", {}).get(key)
        return (None if value is None else float(value)), {"probe": probe}
    if window not in wins:
        return None, {"note": f"the run has no {window} window (no fault was applied)"}
    lo, hi = wins[window]
    inside = [r for r in records if lo <= r.get("t", -1) < hi]
    if metric == "gcs_latency_p95_ms":
        values = sorted(float(r["gcs_ms"]) for r in inside if r.get("kind") == "sample"
                        and isinstance(r.get("gcs_ms"), (int, float)))
        if not values:
            return None, {"samples": 0}
        return values[min(len(values) - 1, int(0.95 * len(values)))], {"samples": len(values)}
    if metric == "node_deaths":
        dead = [r for r in inside if r.get("kind") == "event" and r.get("event") == Ev.NODE_DEAD]
        return float(len(dead)), {"nodes": sorted({str(r.get("name")) for r in dead})}
    counts = [int(r["health_check_failures"]) for r in records if r.get("kind") == "signals"
              and isinstance(r.get("health_check_failures"), int)]
    if not counts:
        return None, {"note": "the target reports no health checks"}
    before = [int(r["health_check_failures"]) for r in records if r.get("kind") == "signals"
              and isinstance(r.get("health_check_failures"), int) and r["t"] < lo]
    upto = [int(r["health_check_failures"]) for r in records if r.get("kind") == "signals"
            and isinstance(r.get("health_check_failures"), int) and r["t"] < hi]
    first = before[-1] if before else 0
    return float((upto[-1] if upto else first) - first), {"signals": len(counts)}
