"""Continuous sampling of the target into the timeline, the spine every verdict is read from.

The GCS sampler **never blocks**: a scheduler thread keeps a fixed beat of ``interval_s`` and
writes one ``sample`` record per beat, answered or not. Each beat it hands one question
(:meth:`~raychaos.targets.base.Target.observe`, with a deadline of ``DEADLINE_SHARE`` × the
interval) to an asker thread and waits for it until the deadline; a question not answered by
then is written as not answering (``gcs_up: false``, ``gcs_late: true``) *on time*, and while an
asker is still stuck on an earlier question every beat is written that way too, with
``gcs_blind: true`` (nothing was asked: the monitor saw nothing then; the stuck question's late
answer is dropped). A *late* sample (no answer, but no refusal either: a busy GCS)
is told apart from a GCS that refuses (its process is gone); :mod:`raychaos.observe.recovery`
reads them differently. So the timeline has a sample every interval during an outage as well, and
outage start and end are known to ± one interval. Samples carry ``t`` = the moment the question
was asked, ``gcs_up``, ``latency_ms``, and when the GCS answered ``nodes_alive``,
``nodes_total``, ``nodes_draining``, ``gpus_total``, ``alive_ids`` (workers, 12 hex digits),
``dead_ids`` (workers the GCS's table lists DEAD; left out when none),
``reported_ids`` (workers whose raylet reported to the current GCS incarnation — the
re-registration evidence — when the target can tell) and ``gcs_incarnation``.

The **job poller** (every second) reads each load job's status and new driver-log lines and
writes their ``RAYCHAOS_STATS`` lines as ``load`` records placed at their own timestamps.

Each answered sample's ``latency_ms`` is the GCS's round trip (``gcs_latency_p95_ms``); node IDs
going DEAD are watched as they happen, and the poller writes link rates and failed health checks
(:mod:`raychaos.observe.signals`). Beside them the host-noise sensor
(:mod:`raychaos.observe.hostnoise`) writes one ``host`` record per second, started and
stopped with the monitor.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from raychaos.catalog import stats_format
from raychaos.observe.hostnoise import HostNoise
from raychaos.observe.prometheus import resource_snapshot
from raychaos.observe.signals import DeathWatch, SignalSampler
from raychaos.results.store import Clock, Ev, Timeline
from raychaos.targets.base import Observation, Target

__all__ = ["DEADLINE_SHARE", "Monitor", "parse_stats", "sample_gaps"]

DEADLINE_SHARE = 0.8  # of the interval: a question's deadline


def parse_stats(line: str) -> dict[str, Any] | None:
    """The stats dict in a driver-log line (the one format, ``loads/_stats.py``), or None."""
    parsed: dict[str, Any] | None = stats_format().parse_line(line)
    return parsed


def sample_gaps(records: list[dict[str, Any]], lo: float = float("-inf"),
                hi: float = float("inf")) -> dict[str, Any]:
    """How evenly the monitor sampled between ``lo`` and ``hi`` (run clock): the largest gap
    between two consecutive samples, and samples written per second."""
    ts = sorted(float(r["t"]) for r in records if r.get("kind") == "sample"
                and lo <= float(r["t"]) <= hi)
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    span = ts[-1] - ts[0] if len(ts) > 1 else 0.0
    return {"max_gap_s": round(max(gaps), 3) if gaps else None,
            "samples_per_s": round((len(ts) - 1) / span, 2) if span else None}


def _raise_priority() -> None:
    """The sampler threads keep the run's clock: on a CPU-saturated box they go before the
    rest of the harness (and the loads) when they can (root: nice -5 for this thread)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -5)
    except (OSError, AttributeError):
        pass


class _Asker:
    """One thread that asks the target, one question at a time."""

    def __init__(self, target: Target) -> None:
        self.target = target
        self.cpu_seconds = 0.0
        self._questions: queue.Queue[tuple[float, queue.Queue[Observation]] | None] = \
            queue.Queue()
        self.busy = False
        self._thread = threading.Thread(target=self._loop, name="raychaos-gcs-asker",
                                        daemon=True)
        self._thread.start()

    def ask(self, deadline_s: float) -> queue.Queue[Observation]:
        answer: queue.Queue[Observation] = queue.Queue(maxsize=1)
        self.busy = True
        self._questions.put((deadline_s, answer))
        return answer

    def _loop(self) -> None:
        _raise_priority()
        while True:
            item = self._questions.get()
            if item is None:
                return
            deadline_s, answer = item
            cpu0 = time.thread_time()
            try:
                obs = self.target.observe(deadline_s)
            except Exception as exc:  # noqa: BLE001 - a target that raises answered "down"
                obs = Observation(False, error=f"{type(exc).__name__}: {exc}"[:300])
            self.cpu_seconds += time.thread_time() - cpu0
            self.busy = False
            answer.put(obs)

    def close(self) -> None:
        self._questions.put(None)


class Monitor:
    def __init__(self, target: Target, timeline: Timeline, clock: Clock, interval_s: float = 0.2,
                 jobs: Callable[[], dict[str, str]] | None = None):
        self.target = target
        self.timeline = timeline
        self.clock = clock
        self.interval_s = interval_s
        self.deadline_s = DEADLINE_SHARE * interval_s
        self.jobs = jobs or (lambda: {})
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._asker: _Asker | None = None
        self.samples = 0
        self.unanswered = 0
        self.last: dict[str, Any] = {}
        self.job_states: dict[str, str] = {}
        self.extra_sources: list[Callable[[], list[dict[str, Any]]]] = []
        self._cpu = 0.0
        self._events_since = clock.wall0
        self.resources: dict[str, Any] = {}
        self.job_every_s = 1.0  # the Jobs API is slower and load stats come per second
        self.deaths = DeathWatch(target, timeline)
        self.signals = SignalSampler(target, timeline)
        # how busy the host is, beside the cluster: a slow host is not a slow cluster
        self.host = HostNoise(timeline, target.sut_cpu_seconds)

    @property
    def cpu_seconds(self) -> float:
        """CPU the monitor's own threads spent, the host-noise sensor's included (the target's
        client threads not)."""
        return (self._cpu + (self._asker.cpu_seconds if self._asker else 0.0)
                + self.host.cpu_seconds)

    def start(self) -> None:
        self._asker = _Asker(self.target)
        self.host.start()
        for fn, name in ((self._sample_loop, "raychaos-gcs-sampler"),
                         (self._job_loop, "raychaos-job-poller")):
            thread = threading.Thread(target=fn, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        self.host.stop()
        for thread in self._threads:
            thread.join(timeout=10)
        if self._asker is not None:
            self._asker.close()
        self._poll_jobs()  # the last lines written before the loads stopped

    def record(self, obs: Observation, t: float | None = None, blind: bool = False
               ) -> dict[str, Any]:
        """Write one sample of ``obs`` (asked at ``t``; ``blind``: nothing was asked)."""
        record: dict[str, Any] = {"gcs_up": obs.up, "latency_ms": round(obs.latency_s * 1e3, 1),
                                  **self.resources}
        if not obs.up:
            record["gcs_error"] = obs.error
            if obs.late:
                record["gcs_late"] = True
            if blind:
                record["gcs_blind"] = True
        elif obs.nodes is None:
            record["nodes_unknown"] = True
        else:
            alive = [n for n in obs.nodes if n.state in ("ALIVE", "DRAINING")]
            record.update(nodes_alive=len(alive), nodes_total=len(obs.nodes),
                          nodes_draining=sum(n.state == "DRAINING" for n in obs.nodes),
                          gpus_total=sum(n.gpus for n in alive),
                          alive_ids=sorted(n.node_id[:12] for n in alive if not n.is_head))
            dead = sorted(n.node_id[:12] for n in obs.nodes if n.state == "DEAD"
                          and not n.is_head)
            if dead:
                record["dead_ids"] = dead
            self.deaths.observe(obs.nodes)
            if obs.reported is not None:
                record["reported_ids"] = sorted(n.node_id[:12] for n in alive
                                                if not n.is_head and n.node_id in obs.reported)
        if obs.incarnation is not None:
            record["gcs_incarnation"] = obs.incarnation
        self.last = record
        return self.timeline.write("sample", t=t, **record)

    def sample_once(self) -> dict[str, Any]:
        """Ask once and write the sample (waiting at most the deadline for the answer)."""
        t = self.clock.t()
        asker = self._asker
        if asker is None:  # not started: ask in this thread
            return self.record(self.target.observe(self.deadline_s), t)
        if asker.busy:  # still stuck on an earlier question: down, on time
            self.unanswered += 1
            return self.record(Observation(False, error="no answer: an earlier question is "
                                                        "still unanswered", late=True), t,
                               blind=True)
        answer = asker.ask(self.deadline_s)
        try:
            obs = answer.get(timeout=self.deadline_s + 0.02)
        except queue.Empty:
            self.unanswered += 1
            obs = Observation(False, error=f"no answer within {self.deadline_s:g} s",
                              latency_s=self.deadline_s, late=True)
        return self.record(obs, t)

    def _sample_loop(self) -> None:
        _raise_priority()
        next_at = time.monotonic()
        while not self._stop.is_set():
            cpu0 = time.thread_time()
            try:
                self.sample_once()
                self.samples += 1
            except Exception as exc:  # never let the monitor die silently
                self.timeline.event(Ev.MONITOR_ERROR, "gcs-sampler", error=repr(exc))
            self._cpu += time.thread_time() - cpu0
            # a fixed beat: a late beat is not made up by a burst, and never drifts
            next_at = max(next_at + self.interval_s, time.monotonic() - self.interval_s / 2)
            self._stop.wait(max(0.0, next_at - time.monotonic()))

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
            self._cpu += time.thread_time() - cpu0
