"""Continuous sampling of the target into the timeline, the spine every verdict is read from.

Two threads, so a slow HTTP call can never blur the GCS signal:

- the **GCS sampler** asks the GCS for its node table every ``interval_s`` (≤ 200 ms) and writes
  ``sample`` records: ``gcs_up``, ``nodes_alive``, ``nodes_total``, ``nodes_draining``,
  ``gpus_total`` and the IDs of the alive workers;
- the **job poller** (every second) reads each load job's status and new driver-log lines and
  writes their ``RAYCHAOS_STATS`` lines as ``load`` records placed at their own timestamps.

Each sample also times its GCS question (``gcs_ms``) and watches for nodes going DEAD, and the
poller writes link rates and failed health checks (:mod:`raychaos.observe.signals`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from raychaos.catalog import stats_format
from raychaos.observe.prometheus import resource_snapshot
from raychaos.observe.signals import DeathWatch, SignalSampler
from raychaos.results.store import Clock, Ev, Timeline
from raychaos.targets.base import Target

__all__ = ["Monitor", "parse_stats"]

def parse_stats(line: str) -> dict[str, Any] | None:
    """The stats dict in a driver-log line (the one format, ``loads/_stats.py``), or None."""
    parsed: dict[str, Any] | None = stats_format().parse_line(line)
    return parsed


class Monitor:
    def __init__(self, target: Target, timeline: Timeline, clock: Clock, interval_s: float = 0.2,
                 jobs: Callable[[], dict[str, str]] | None = None):
        self.target = target
        self.timeline = timeline
        self.clock = clock
        self.interval_s = interval_s
        self.jobs = jobs or (lambda: {})
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.samples = 0
        self.last: dict[str, Any] = {}
        self.job_states: dict[str, str] = {}
        self.extra_sources: list[Callable[[], list[dict[str, Any]]]] = []
        self.cpu_seconds = 0.0
        self._events_since = clock.wall0
        self.resources: dict[str, Any] = {}
        self.job_every_s = 1.0  # the Jobs API is slower and load stats come per second
        self.deaths = DeathWatch(target, timeline)
        self.signals = SignalSampler(target, timeline)

    def start(self) -> None:
        for fn, name in ((self._sample_loop, "raychaos-gcs-sampler"),
                         (self._job_loop, "raychaos-job-poller")):
            thread = threading.Thread(target=fn, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10)
        self._poll_jobs()  # the last lines written before the loads stopped

    def sample_once(self) -> dict[str, Any]:
        # a dead GCS refuses at once; a busy one (2 loaded cores) may need a second
        asked = time.monotonic()
        up = self.target.gcs_alive(timeout=1.0)
        record: dict[str, Any] = {"gcs_up": up, **self.resources}
        if up:
            record["gcs_ms"] = round((time.monotonic() - asked) * 1000, 2)
            try:
                nodes = self.target.nodes(timeout=max(0.1, self.interval_s))
                alive = [n for n in nodes if n.state in ("ALIVE", "DRAINING")]
                record.update(nodes_alive=len(alive), nodes_total=len(nodes),
                              nodes_draining=sum(n.state == "DRAINING" for n in nodes),
                              gpus_total=sum(n.gpus for n in alive),
                              alive_ids=sorted(n.node_id[:12] for n in alive if not n.is_head))
                self.deaths.observe(nodes)
            except Exception:
                record["nodes_unknown"] = True
        self.last = record
        return self.timeline.write("sample", **record)

    def _sample_loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            cpu0 = time.thread_time()
            try:
                self.sample_once()
                self.samples += 1
            except Exception as exc:  # never let the monitor die silently
                self.timeline.event(Ev.MONITOR_ERROR, "gcs-sampler", error=repr(exc))
            self.cpu_seconds += time.thread_time() - cpu0
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))

    def _poll_jobs(self) -> None:
        for name, job_id in self.jobs().items():
            try:
                for line in self.target.job_log_lines(job_id):
                    stats = parse_stats(line)
                    if stats is not None:
                        stats.setdefault("load", name)
                        ts = float(stats.pop("ts", self.clock.wall()))
                        self.timeline.write("load", t=self.clock.t_of_wall(ts), **stats)
            except Exception as exc:
                self.timeline.event(Ev.MONITOR_ERROR, f"logs:{name}", error=repr(exc))
        try:  # what the operator did: restarts, replacements, pulls
            for ev in self.target.cluster_events(self._events_since):
                self._events_since = max(self._events_since, ev["ts"])
                detail = {k: v for k, v in ev.items() if k not in ("ts", "event", "node")}
                self.timeline.write("event", t=self.clock.t_of_wall(ev["ts"]),
                                    event=ev["event"], name=ev.get("node", ""), detail=detail)
        except Exception as exc:
            self.timeline.event(Ev.MONITOR_ERROR, "cluster-events", error=repr(exc))
        for source in self.extra_sources:
            try:
                for stats in source():
                    ts = float(stats.pop("ts", self.clock.wall()))
                    self.timeline.write("load", t=self.clock.t_of_wall(ts), **stats)
            except Exception as exc:
                self.timeline.event(Ev.MONITOR_ERROR, "extra-source", error=repr(exc))

    def _job_loop(self) -> None:
        while not self._stop.wait(self.job_every_s):
            cpu0 = time.thread_time()
            states = {}
            for name, job_id in self.jobs().items():
                try:
                    states[job_id] = self.target.job_status(job_id)
                except Exception as exc:  # a flaky target must not kill the poller
                    states[job_id] = "UNKNOWN"
                    self.timeline.event(Ev.MONITOR_ERROR, f"job:{name}", error=repr(exc))
            if states:
                self.job_states.update(states)
                self.timeline.write("jobs", jobs=states)
            try:  # object store, spill and GPU capacity, once a second
                self.resources = resource_snapshot(self.target.metrics_texts())
            except Exception as exc:
                self.timeline.event(Ev.MONITOR_ERROR, "metrics", error=repr(exc))
            try:  # link rates and the GCS's failed health checks
                self.signals.sample()
            except Exception as exc:
                self.timeline.event(Ev.MONITOR_ERROR, "signals", error=repr(exc))
            self._poll_jobs()
            self.cpu_seconds += time.thread_time() - cpu0
