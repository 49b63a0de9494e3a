"""jobs_api_users.py against a fake Ray Jobs REST API on loopback (real HTTP, no patches):
submit-to-finish latency arrives as its own endpoint in the stats lines, failed jobs as
failures."""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from raychaos.loads.locust_runner import LOADS_DIR, LocustProcess

pytestmark = pytest.mark.unit


class _FakeJobsApi(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ids = itertools.count()
    polls: dict[str, int] = {}

    def _reply(self, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        job = f"raysubmit_{next(self.ids)}"
        self.polls[job] = 0
        self._reply({"job_id": job, "submission_id": job})

    def do_GET(self):  # noqa: N802
        job = self.path.rsplit("/", 1)[-1]
        self.polls[job] = self.polls.get(job, 0) + 1
        number = int(job.split("_")[-1])
        done = "FAILED" if number % 3 == 2 else "SUCCEEDED"
        self._reply({"submission_id": job, "status": "RUNNING" if self.polls[job] < 2 else done})

    def log_message(self, *args):
        pass


def _jobs(lines: list[dict]) -> list[dict]:
    return [line["endpoints"]["JOB submit_to_finish"] for line in lines
            if "JOB submit_to_finish" in line["endpoints"]]


def _enough(lines: list[dict]) -> bool:
    jobs = _jobs(lines)
    return (sum(j["count"] for j in jobs) > 0 and sum(j["failures"] for j in jobs) > 0
            and any(j["p95_ms"] and j["p95_ms"] >= 100 for j in jobs))


def test_job_latency_and_failures_are_reported(tmp_path: Path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeJobsApi)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # until a finished job, a failed one and a p95 past two polls are in (at most 60 s):
        # a fixed 4 s run on a busy box ended with 3 requests and no job finished
        load = LocustProcess(LOADS_DIR / "jobs_api_users.py",
                             f"http://127.0.0.1:{server.server_address[1]}", users=3,
                             spawn_rate=3, duration_s=60, stats_path=tmp_path / "jobs.stats",
                             env={"RAYCHAOS_JOB_POLL_S": "0.1"})
        lines: list[dict] = []
        with load:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and load.running() and not _enough(lines):
                time.sleep(0.5)
                lines += load.poll_stats()
        lines += load.poll_stats()
    finally:
        server.shutdown()
        server.server_close()
    jobs = _jobs(lines)
    assert sum(j["count"] for j in jobs) > 0, lines
    assert sum(j["failures"] for j in jobs) > 0
    assert any(j["p95_ms"] and j["p95_ms"] >= 100 for j in jobs)  # two polls at 0.1 s
    endpoints = set().union(*(line["endpoints"] for line in lines))
    assert {"POST /api/jobs/", "GET /api/jobs/[id]"} <= endpoints
