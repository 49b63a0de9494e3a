"""Locust plugin: turn Locust's ``events.request`` into raychaos ``RAYCHAOS_STATS`` lines.

Why: SLO code reads one stats format (CONVENTIONS item 9, ``_stats.py``), and Locust's own CSV
and console tables are not it. This file is loaded *inside the Locust process only* -- the
runner passes it as ``-f loads/_locust_stats.py,LOCUSTFILE`` -- so no process that imports Ray
ever imports Locust.

Each second the emitting process prints one line::

    RAYCHAOS_STATS {"load": "locust:serve_users", "ts": ..., "count": 97, "failures": 1,
                    "p50_ms": ..., "p95_ms": ..., "p99_ms": ..., "max_ms": ...,
                    "rps": 98, "users": 10,
                    "endpoints": {"GET /predict": {"count": 97, "failures": 1, "p95_ms": 4.2}}}

``count`` is successful requests completed in that second, ``failures`` failed ones, ``rps`` both
together; latencies are over the successes, and ``hist`` is their histogram (``_stats.histogram``:
workers ship raw latencies, the master bins the merged second). ``offered`` (only from a
locustfile that calls :func:`count_offered`, e.g. the open-loop ``serve_users.py``) is arrivals
started in that second, completed or not. Standalone or master processes emit; a worker ships
its per-second buckets to the master with its regular report (``report_to_master``), and the
master emits a second once every worker has had time to report it (``MASTER_LAG_S``). Seconds
with no requests are emitted as zero lines so a stall is visible. The load name comes from
``RAYCHAOS_LOAD_NAME`` (default ``locust``).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gevent  # noqa: E402
import locust.runners as _runners  # noqa: E402
from _stats import PREFIX, histogram, percentile  # noqa: E402
from locust import events  # noqa: E402
from locust.runners import MasterRunner, WorkerRunner  # noqa: E402

MASTER_LAG_S = 5  # workers report every 3 s (locust WORKER_REPORT_INTERVAL); keep a margin

# Heartbeats (one a second) a worker may miss before the master sets it missing; the master
# stops the whole test when the last one goes. Locust's 3 is too few for a load generator run
# niced beside the cluster it measures: a make test beside a cold Go build starved both workers
# past 3 s, the master stopped the test, and the load vanished for the rest of the run — a
# stall a verdict would read as the system's. A worker that comes back within this many
# seconds keeps its users (Locust's own HEARTBEAT_LIVENESS, set before any runner exists).
HEARTBEAT_LIVENESS = int(os.environ.get("RAYCHAOS_LOCUST_HEARTBEAT_LIVENESS", "30"))
_runners.HEARTBEAT_LIVENESS = HEARTBEAT_LIVENESS
LOAD_NAME = os.environ.get("RAYCHAOS_LOAD_NAME", "locust")

# second -> endpoint -> {"lat": [ms, ...], "fail": n}
Buckets = dict[int, dict[str, dict]]


class _Collector:
    def __init__(self) -> None:
        self.buckets: Buckets = {}
        self.next_second: int | None = None  # first second not yet emitted
        self.environment = None
        self.users_at: dict[int, int] = {}  # second -> user count seen then (master lags)
        self.offered: dict[int, int] = {}  # second -> arrivals started then (open-loop users)
        self.offers = False  # a locustfile counts arrivals: every line carries "offered"

    def offer(self, second: int, n: int = 1) -> None:
        self.offers = True
        self.offered[second] = self.offered.get(second, 0) + n

    def record(self, second: int, endpoint: str, latency_ms: float | None, failed: bool) -> None:
        ep = self.buckets.setdefault(second, {}).setdefault(endpoint, {"lat": [], "fail": 0})
        if failed:
            ep["fail"] += 1
        elif latency_ms is not None:
            ep["lat"].append(float(latency_ms))

    def merge(self, shipped: dict) -> None:
        for second, endpoints in shipped.items():
            for endpoint, data in endpoints.items():
                ep = self.buckets.setdefault(int(second), {}).setdefault(
                    endpoint, {"lat": [], "fail": 0}
                )
                ep["lat"].extend(data["lat"])
                ep["fail"] += data["fail"]

    def merge_offered(self, shipped: dict) -> None:
        for second, n in shipped.items():
            self.offer(int(second), int(n))

    def take_offered(self) -> dict:
        out = {str(k): v for k, v in self.offered.items()}
        self.offered = {}
        return out

    def take_all(self) -> dict:
        out = {str(k): v for k, v in self.buckets.items()}
        self.buckets = {}
        return out

    def emit_until(self, end_second: int) -> None:
        """Emit every second < end_second (zero lines for empty ones)."""
        if self.next_second is None:
            return
        while self.next_second < end_second:
            self._emit(self.next_second, self.buckets.pop(self.next_second, {}))
            self.next_second += 1
        for late in [s for s in self.buckets if s < self.next_second]:
            self.buckets.pop(late)  # a report that arrived after its second was emitted
        for late in [s for s in self.offered if s < self.next_second]:
            self.offered.pop(late)

    def _emit(self, second: int, endpoints: dict) -> None:
        all_lat: list[float] = []
        failures = 0
        per_endpoint = {}
        for endpoint, data in sorted(endpoints.items()):
            lat = sorted(data["lat"])
            all_lat.extend(lat)
            failures += data["fail"]
            per_endpoint[endpoint] = {
                "count": len(lat),
                "failures": data["fail"],
                "p95_ms": percentile(lat, 95),
            }
        all_lat.sort()
        runner = self.environment.runner if self.environment else None
        users = self.users_at.pop(second, runner.user_count if runner is not None else None)
        line = {
            "load": LOAD_NAME,
            "ts": float(second + 1),
            "count": len(all_lat),
            "failures": failures,
            "p50_ms": percentile(all_lat, 50),
            "p95_ms": percentile(all_lat, 95),
            "p99_ms": percentile(all_lat, 99),
            "max_ms": all_lat[-1] if all_lat else None,
            "hist": histogram(all_lat),
            "rps": len(all_lat) + failures,
            "users": users,
            "endpoints": per_endpoint,
        }
        if self.offers:
            line["offered"] = self.offered.pop(second, 0)
        sys.stdout.write(PREFIX + json.dumps(line) + "\n")
        sys.stdout.flush()


_collector = _Collector()


def _emitter(lag_s: int) -> None:
    while True:
        now = time.time()
        gevent.sleep(math.floor(now) + 1.02 - now)
        runner = _collector.environment.runner
        if runner is not None:
            _collector.users_at[math.floor(time.time()) - 1] = runner.user_count
        _collector.emit_until(math.floor(time.time()) - lag_s)


def _on_request(request_type, name, response_time, response_length, exception=None, **_kw):
    _collector.record(
        math.floor(time.time()), f"{request_type} {name}", response_time, exception is not None
    )


def count_offered(n: int = 1) -> None:
    """Count ``n`` arrivals started now (an open-loop locustfile calls it per arrival)."""
    _collector.offer(math.floor(time.time()), n)


def _on_report_to_master(client_id, data, **_kw):
    data["raychaos_buckets"] = _collector.take_all()
    data["raychaos_offered"] = _collector.take_offered()


def _on_worker_report(client_id, data, **_kw):
    _collector.merge(data.get("raychaos_buckets", {}))
    _collector.merge_offered(data.get("raychaos_offered", {}))


def _on_test_start(environment, **_kw):
    if _collector.next_second is None:
        _collector.next_second = math.floor(time.time())


def _on_quitting(environment, **_kw):
    if isinstance(environment.runner, WorkerRunner):
        return
    if _collector.buckets and _collector.next_second is None:
        _collector.next_second = min(_collector.buckets)
    _collector.emit_until(max(_collector.buckets, default=math.floor(time.time()) - 1) + 1)


def _on_init(environment, **_kw):
    _collector.environment = environment
    if isinstance(environment.runner, WorkerRunner):
        events.report_to_master.add_listener(_on_report_to_master)
        return
    if isinstance(environment.runner, MasterRunner):
        events.worker_report.add_listener(_on_worker_report)
        gevent.spawn(_emitter, MASTER_LAG_S)
    else:
        gevent.spawn(_emitter, 0)
    events.test_start.add_listener(_on_test_start)
    events.quitting.add_listener(_on_quitting)


# Idempotent: a locustfile may also `import _locust_stats`; hook the events only once.
if not getattr(events, "_raychaos_stats_hooked", False):
    events._raychaos_stats_hooked = True
    events.request.add_listener(_on_request)
    events.init.add_listener(_on_init)
