"""A flaky target: a dashboard on loopback that answers 5xx or hangs. The monitor writes "down"
and UNKNOWN on the timeline and keeps sampling, reads are retried with backoff, and a probe that
could not observe never turns into a pass (nor into a "lost" job)."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from raychaos.config.experiment import load_experiment
from raychaos.context import Run, activate, deactivate
from raychaos.observe.monitor import Monitor
from raychaos.probes.jobs import job_survival
from raychaos.results.store import Clock, Ledger, Timeline, read_timeline
from raychaos.run.verdict import summarize
from raychaos.targets.base import NodeInfo, Observation
from raychaos.targets.retry import with_backoff

BASE = Path(__file__).resolve().parent / "bad_inputs" / "_good-base.yaml"


class FlakyDashboard:
    """``mode``: ok | 5xx | hang; ``fail_next`` answers that many requests 503 first."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.fail_next = 0
        self.requests = 0
        dash = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                dash.requests += 1
                if dash.mode == "hang":
                    time.sleep(0.5)
                if dash.mode == "5xx" or dash.fail_next > 0:
                    dash.fail_next = max(0, dash.fail_next - 1)
                    self.send_response(503)
                    self.end_headers()
                    return
                body = json.dumps({"status": "RUNNING", "up": True}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class FlakyTarget:
    """The Target methods the monitor and probes use, over HTTP to the flaky dashboard."""

    kind = "fake"

    def __init__(self, url: str):
        self.url = url

    def _get(self, path: str, timeout: float) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + path, timeout=timeout) as resp:  # noqa: S310
            return json.loads(resp.read())

    def gcs_alive(self, timeout: float = 0.5) -> bool:
        try:
            return bool(self._get("/api/gcs", min(timeout, 0.2))["up"])
        except Exception:
            return False

    def nodes(self, timeout: float = 1.0) -> list[NodeInfo]:
        self._get("/api/nodes", 0.2)
        return [NodeInfo("h" * 12, "head", "127.0.0.1", "ALIVE", is_head=True),
                NodeInfo("w" * 12, "worker-1", "127.0.0.1", "ALIVE", gpus=1.0)]

    def observe(self, deadline_s: float = 0.1) -> Observation:
        if not self.gcs_alive(deadline_s):
            return Observation(False, error="no answer")
        try:
            return Observation(True, nodes=self.nodes(deadline_s))
        except Exception:
            return Observation(True)  # up, node table unknown

    def sut_cpu_seconds(self) -> float | None:
        return None  # the cluster behind the flaky dashboard runs nowhere

    def job_status(self, job_id: str) -> str:
        try:
            return with_backoff(lambda: self._get(f"/api/jobs/{job_id}", 0.2)["status"],
                                attempts=2, first_delay_s=0.02)
        except Exception:
            return "UNKNOWN"

    def job_log_lines(self, job_id: str) -> list[str]:
        raise ConnectionError("log endpoint unreachable")  # the poller must survive this

    def describe(self) -> dict[str, Any]:
        return {"kind": "fake", "dashboard_url": self.url}


@pytest.fixture
def dashboard():
    dash = FlakyDashboard()
    try:
        yield dash
    finally:
        dash.close()


def test_monitor_records_down_and_unknown_and_keeps_sampling(dashboard, tmp_path):
    clock = Clock()
    timeline = Timeline(tmp_path / "timeline.jsonl", clock)
    monitor = Monitor(FlakyTarget(dashboard.url), timeline, clock, interval_s=0.05,
                      jobs=lambda: {"storm": "job-1"})
    monitor.job_every_s = 0.1
    path = tmp_path / "timeline.jsonl"

    def seen(what, since: float, timeout: float = 20.0) -> bool:
        """Until a record after ``since`` (run clock) satisfies ``what``: each phase lasts
        until the monitor saw it, not a fixed time a loaded machine may not give it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if any(what(r) for r in read_timeline(path) if r.get("t", -1) >= since):
                    return True
            except ValueError:  # a line being written
                pass
            time.sleep(0.02)
        return False

    def sample(up: bool):
        return lambda r: r["kind"] == "sample" and r["gcs_up"] is up

    def unknown(r) -> bool:
        return r["kind"] == "jobs" and "UNKNOWN" in r["jobs"].values()

    monitor.start()
    try:
        for mode, wanted in (("ok", [sample(True)]), ("5xx", [sample(False), unknown]),
                             ("hang", []), ("ok", [sample(True)])):
            dashboard.mode, since = mode, clock.t()
            for what in wanted:
                assert seen(what, since), f"the monitor never recorded {mode}"
            if not wanted:
                time.sleep(0.4)
        time.sleep(0.2)  # a few more answered samples: a late one from the hang is behind us
    finally:
        monitor.stop()
        timeline.close()
    records = read_timeline(tmp_path / "timeline.jsonl")
    ups = [r["gcs_up"] for r in records if r["kind"] == "sample"]
    assert True in ups and False in ups, "down is recorded as down"
    # the last phase (answering again): sampled all along and answered. Not "the very last
    # sample is up": at a 50 ms interval the deadline is 40 ms, which a loaded box's answer
    # may miss (a late sample, rightly not "up") — seen in a full run
    last = [r for r in records if r["kind"] == "sample" and r["t"] >= since]
    assert len(last) >= 3 and any(r["gcs_up"] for r in last), \
        "the monitor kept sampling and saw the recovery"
    states = [s for r in records if r["kind"] == "jobs" for s in r["jobs"].values()]
    assert "UNKNOWN" in states
    assert any(r.get("event") == "monitor_error" for r in records), "errors are on the timeline"


def test_reads_are_retried_with_backoff(dashboard):
    delays: list[float] = []
    dashboard.fail_next = 2
    target = FlakyTarget(dashboard.url)
    # a generous read deadline: a loaded box once answered the third request after 0.5 s, the
    # client gave up on it and asked a fourth time (the backoff is under test, not the deadline)
    value = with_backoff(lambda: target._get("/api/jobs/x", 30.0)["status"], attempts=4,
                         first_delay_s=0.01, sleep=lambda d: delays.append(d))
    assert value == "RUNNING" and dashboard.requests == 3
    assert delays == [0.01, 0.02], "exponential backoff"


def test_unobserved_job_is_neither_survived_nor_lost_and_the_verdict_is_error(dashboard,
                                                                              tmp_path):
    dashboard.mode = "5xx"
    clock = Clock()
    timeline = Timeline(tmp_path / "timeline.jsonl", clock)
    exp = load_experiment(BASE)
    run = Run(run_id="r1", run_dir=tmp_path, settings=exp.settings,
              target=FlakyTarget(dashboard.url),  # type: ignore[arg-type]
              clock=clock, timeline=timeline,
              ledger=Ledger(tmp_path / "ledger.json", "r1", {"kind": "fake"}))
    run.jobs["storm"] = "job-1"
    activate(run)
    try:
        evidence = job_survival(timeout_s=0.1)
    finally:
        deactivate()
    assert evidence["unobserved"] == ["storm"] and evidence["lost"] == []
    assert run.probes[0]["verdict"] == "unknown"
    summary = summarize(exp, run, None, "completed", [], None, None)
    timeline.close()
    assert summary["verdict"] == "error" and summary["exit_code"] == 2
    assert any("could not observe storm" in e for e in summary["errors"])
