"""LocustProcess against a loopback HTTP server: stats stream while it runs, and stop() leaves
no process behind (checked by PID and by process group)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from raychaos.loads.locust_runner import LocustProcess

pytestmark = pytest.mark.unit

TINY = Path(__file__).parent / "locustfiles" / "tiny_users.py"
FIELDS = {"load", "ts", "count", "failures", "p50_ms", "p95_ms", "p99_ms", "max_ms", "rps"}


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def _collect(load: LocustProcess, want: int, timeout: float) -> list[dict]:
    lines: list[dict] = []
    deadline = time.monotonic() + timeout
    while len(lines) < want and time.monotonic() < deadline:
        lines += load.poll_stats()
        time.sleep(0.1)
    return lines


def test_runner_module_does_not_import_locust():
    code = "import sys, raychaos.loads.locust_runner; assert 'locust' not in sys.modules"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=30)


def test_standalone_streams_stats_while_running(loopback_http, tmp_path):
    stats = tmp_path / "tiny.stats"
    with LocustProcess(TINY, loopback_http, users=4, spawn_rate=4, duration_s=20,
                       stats_path=stats) as load:
        lines = _collect(load, want=2, timeout=15)
        assert load.running(), "stats must arrive while Locust still runs"
        pids = load.pids
    assert len(lines) >= 2
    assert all(line["load"] == "locust:tiny_users" for line in lines)
    assert FIELDS <= set(lines[0])
    busy = [line for line in lines if line["count"] > 0]
    assert busy, lines
    endpoints = set().union(*(line["endpoints"] for line in lines))
    assert {"GET /ok", "GET /fail"} <= endpoints
    assert sum(line["failures"] for line in lines) > 0
    assert all(line["rps"] == line["count"] + line["failures"] for line in lines)
    assert all(_gone(pid) for pid in pids)
    assert _group_gone(pids[0])


def test_stop_ends_a_long_run_at_once(loopback_http, tmp_path):
    load = LocustProcess(TINY, loopback_http, users=2, spawn_rate=2, duration_s=300,
                         stats_path=tmp_path / "long.stats")
    load.start()
    try:
        assert _collect(load, want=1, timeout=15)
    finally:
        t0 = time.monotonic()
        load.stop()
    assert time.monotonic() - t0 < 11
    assert all(_gone(pid) for pid in load.pids)
    assert _group_gone(load.pids[0])


def test_run_time_cap_ends_the_run_by_itself(loopback_http, tmp_path):
    load = LocustProcess(TINY, loopback_http, users=2, spawn_rate=2, duration_s=2,
                         stats_path=tmp_path / "capped.stats")
    with load:
        load.wait(timeout=20)
        assert not load.running()
        assert load.returncode is not None
    assert load.poll_stats(), "the final flush on quit must still produce stats lines"


def test_distributed_master_aggregates_worker_stats(loopback_http, tmp_path):
    load = LocustProcess(TINY, loopback_http, users=4, spawn_rate=4, duration_s=4, workers=2,
                         stats_path=tmp_path / "dist.stats")
    with load:
        assert len(load.pids) == 3
        load.wait(timeout=45)
    lines = load.poll_stats()
    assert sum(line["count"] for line in lines) > 0, load.log_path.read_text()
    assert all(_gone(pid) for pid in load.pids)
    assert _group_gone(load.pids[0])
