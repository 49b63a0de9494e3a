"""What the monitor adds for network and health faults: node deaths as they happen, link rates
and the GCS's failed health checks — so one timeline shows the link, the checks and the deaths.

- :class:`DeathWatch` sees each node ID go from ALIVE (or DRAINING) to DEAD in the GCS's table
  and asks the target, at that moment, whether the node's raylet process is still running: a
  node marked DEAD with a live raylet died *falsely* (a partition, a saturated link, a GCS that
  gave up too early) — an ``node_dead`` event with ``raylet_alive``.
- :class:`SignalSampler` turns the target's cumulative link byte counters into Mbit/s per node
  and reads the head's count of ``Health check failed for node`` log lines: one ``signals``
  record per call (the monitor calls it once a second).

Neither blocks the GCS sampler: the raylet check runs only when a death is seen, in a thread
of its own (the event keeps the moment the death was seen); the counters are files and
incremental log reads on the local target (``{}`` where not available).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from raychaos.catalog import stats_format
from raychaos.config.rayflags import HEALTH_CHECK_FAILED_LINE, MARKED_DEAD_LINE
from raychaos.results.store import Ev, Timeline
from raychaos.targets.base import NodeInfo, Target

__all__ = ["MONITOR_METRICS", "DeathWatch", "SignalSampler", "monitor_metric"]

#: the monitor's SLO metrics read here (:mod:`raychaos.config.metrics` defines them)
MONITOR_METRICS = ("gcs_latency_p95_ms", "node_deaths", "health_check_failures")


class DeathWatch:
    """ALIVE -> DEAD transitions of GCS node IDs, each written as a ``node_dead`` event."""

    def __init__(self, target: Target, timeline: Timeline):
        self.target, self.timeline = target, timeline
        self.states: dict[str, str] = {}
        self.deaths = 0
        #: each worker's count of MARKED_DEAD_LINE when the watch began (read once, off the
        #: sampler's thread): a raylet gone by the time its death is seen, with a line more
        #: than that, was alive when the GCS declared it dead
        self.logged: dict[str, int] | None = None
        self._baseline: threading.Thread | None = None

    def _marked_dead(self, names: list[str]) -> dict[str, int]:
        try:
            return {n: int(c.get(MARKED_DEAD_LINE, 0)) for n, c in
                    self.target.ray_log_counts(names, [MARKED_DEAD_LINE]).items()}
        except Exception:  # noqa: BLE001 - corroboration only: unknown stays unknown
            return {}

    def _read_baseline(self, names: list[str]) -> None:
        self.logged = self._marked_dead(names)
        self.timeline.write("signals", marked_dead_baseline=self.logged)

    def observe(self, nodes: list[NodeInfo]) -> list[NodeInfo]:
        """Note the states; each node newly DEAD is reported from a thread of its own (the
        raylet check reads the process table: the sampler's beat must not wait for it)."""
        if self._baseline is None:
            self._baseline = threading.Thread(
                target=self._read_baseline, args=([n.name for n in nodes if not n.is_head],),
                daemon=True, name="raychaos-death-baseline")
            self._baseline.start()
        newly = [n for n in nodes if n.state == "DEAD"
                 and self.states.get(n.node_id) in ("ALIVE", "DRAINING")]
        self.states.update({n.node_id: n.state for n in nodes})
        if newly:
            self.deaths += len(newly)
            seen_at = self.timeline.clock.t()
            threading.Thread(target=self.report, args=(newly, seen_at), daemon=True,
                             name="raychaos-death-watch").start()
        return newly

    def report(self, newly: list[NodeInfo], seen_at: float | None = None
               ) -> list[dict[str, Any]]:
        """Ask whether each node's raylet still runs; write a ``node_dead`` event for each."""
        try:
            alive = self.target.raylet_alive([n.node_id for n in newly])
        except Exception as exc:  # noqa: BLE001 - unknown is an answer; the sampler goes on
            alive = {}
            self.timeline.event(Ev.MONITOR_ERROR, "raylet-alive", error=repr(exc))
        # exited already, or no answer (an exec that timed out): the log can still say
        gone = [n.name for n in newly if alive.get(n.node_id) is not True and not n.is_head]
        told: dict[str, bool | None] = {}
        before: dict[str, int] = {}
        if gone:  # did it say the GCS had marked it dead?
            if self._baseline is not None:
                self._baseline.join(timeout=10)
            now, before = self._marked_dead(gone), self.logged or {}
            told = {n: now[n] > before[n] if n in now and n in before else None for n in gone}
        out = []
        for node in newly:
            detail = {"node_id": node.node_id, "raylet_alive": alive.get(node.node_id),
                      "is_head": node.is_head}
            if node.name in told:
                detail["told_marked_dead"] = told[node.name]
                if told[node.name] is None:  # say which count is missing
                    detail["told_unknown"] = ("its logs were not read when the watch began"
                                              if node.name not in before else
                                              "its logs could not be read after it died")
            self.timeline.write("event", t=seen_at, event=Ev.NODE_DEAD, name=node.name,
                                detail=detail)
            out.append({"name": node.name, **detail})
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


def monitor_metric(metric: str, records: list[dict[str, Any]], window: tuple[float, float]
                   ) -> tuple[float | None, str, dict[str, Any]]:
    """The value of one of :data:`MONITOR_METRICS` in ``window``: (value, the verdict when there
    is none, evidence) — the shape of :func:`raychaos.observe.slo.metric_value`."""
    lo, hi = window
    inside = [r for r in records if lo <= r.get("t", -1) < hi]
    if metric == "gcs_latency_p95_ms":  # a late answer counts at its deadline: a lower bound
        samples = [r for r in inside if r.get("kind") == "sample"]
        timed = [(float(r["latency_ms"]), not r.get("gcs_up")) for r in samples
                 if (r.get("gcs_up") or r.get("gcs_late"))
                 and isinstance(r.get("latency_ms"), (int, float)) and r["latency_ms"] > 0]
        if not samples:
            return None, "error", {"samples": 0, "note": "not measured: no GCS samples"}
        if not timed:
            return None, "fail", {"samples": len(samples),
                                  "note": "the GCS answered no sample in the window"}
        timed.sort()  # the one percentile definition (nearest rank, loads/_stats.py)
        value = stats_format().percentile([v for v, _ in timed], 95)
        late = next(x for v, x in timed if v == value)
        evidence: dict[str, Any] = {"samples": len(timed), "late": sum(x[1] for x in timed)}
        if late:
            evidence["lower_bound"] = "the p95 sample was late: the GCS took longer than the "
            evidence["lower_bound"] += "sampler's deadline (the gcs_latency probe waits longer)"
        return value, "fail", evidence
    if metric == "node_deaths":
        dead = [r for r in inside if r.get("kind") == "event" and r.get("event") == Ev.NODE_DEAD]
        return float(len(dead)), "fail", {"nodes": sorted({str(r.get("name")) for r in dead})}
    counted = [r for r in records if r.get("kind") == "signals"
               and isinstance(r.get("health_check_failures"), int)]
    if not counted:
        return None, "error", {"note": "not measured: the target reports no health checks"}
    before = [int(r["health_check_failures"]) for r in counted if r["t"] < lo]
    upto = [int(r["health_check_failures"]) for r in counted if r["t"] < hi]
    first = before[-1] if before else 0
    return float((upto[-1] if upto else first) - first), "fail", {"signals": len(counted)}
