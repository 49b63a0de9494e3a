"""LocustProcess against a loopback HTTP server: stats stream while it runs, and stop() leaves
no process behind (checked by PID and by process group)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
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


#: How long a test waits for what Locust does by itself. Generous: every wait ends as soon as
#: it is met, and in make test's unit lane Locust runs at nice 19 beside a real Ray cluster,
#: where its start (gevent and Locust's imports) took longer than a 15 s wait (CI).
PATIENCE_S = 150


def _collect(load: LocustProcess, want: int, timeout: float = PATIENCE_S,
             until: Callable[[list[dict]], bool] = lambda _: True) -> list[dict]:
    """Stats lines, until there are ``want`` and ``until`` holds of them (or the timeout)."""
    lines: list[dict] = []
    deadline = time.monotonic() + timeout
    while not (len(lines) >= want and until(lines)) and time.monotonic() < deadline:
        lines += load.poll_stats()
        time.sleep(0.1)
    return lines


def _both_endpoints_answered(lines: list[dict]) -> bool:
    """Both users' endpoints seen, the failing one failing (a first line can precede them)."""
    seen = set().union(*(line["endpoints"] for line in lines))
    return {"GET /ok", "GET /fail"} <= seen and sum(line["failures"] for line in lines) > 0


def test_runner_module_does_not_import_locust():
    code = "import sys, raychaos.loads.locust_runner; assert 'locust' not in sys.modules"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=30)


def test_standalone_streams_stats_while_running(loopback_http, tmp_path):
    stats = tmp_path / "tiny.stats"
    with LocustProcess(TINY, loopback_http, users=4, spawn_rate=4, duration_s=PATIENCE_S + 30,
                       stats_path=stats) as load:
        lines = _collect(load, want=2, until=_both_endpoints_answered)
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
        assert _collect(load, want=1)
    finally:
        t0 = time.monotonic()
        load.stop()
    # "at once" is against the run's 300 s, not a stopwatch: SIGTERM, at most the 10 s grace,
    # SIGKILL and the reaping, which a starved light lane (nice 19) once stretched to 15 s
    assert time.monotonic() - t0 < 60, "stop waited for the run's duration"
    assert all(_gone(pid) for pid in load.pids)
    assert _group_gone(load.pids[0])


def test_run_time_cap_ends_the_run_by_itself(loopback_http, tmp_path):
    # 6 s of users, not 2: in make test's light lane (nice 19) beside a busy box, a 2 s cap once
    # ended the run before a request was answered, and a run with no request has no stats
    load = LocustProcess(TINY, loopback_http, users=2, spawn_rate=2, duration_s=6,
                         stats_path=tmp_path / "capped.stats")
    with load:
        load.wait(timeout=PATIENCE_S)
        assert not load.running()
        assert load.returncode is not None
    assert load.poll_stats(), "the final flush on quit must still produce stats lines"


def test_distributed_master_aggregates_worker_stats(loopback_http, tmp_path):
    # a run long enough for slow workers to connect and spawn (nice 19 in make test's unit
    # lane), stopped once the master's lines count their requests
    load = LocustProcess(TINY, loopback_http, users=4, spawn_rate=4, duration_s=PATIENCE_S + 30,
                         workers=2, stats_path=tmp_path / "dist.stats")
    with load:
        assert len(load.pids) == 3
        lines = _collect(load, want=1, until=lambda ls: sum(line["count"] for line in ls) > 0)
    lines += load.poll_stats()
    assert sum(line["count"] for line in lines) > 0, load.log_path.read_text()
    assert all(_gone(pid) for pid in load.pids)
    assert _group_gone(load.pids[0])


def _stall_workers(liveness: str | None, loopback_http: str, tmp_path: Path
                   ) -> tuple[list[dict], str]:
    """A distributed run whose workers are stopped (SIGSTOP) for 8 s once requests flow, as a
    starved load generator is; the lines after they resume, and the master's log."""
    import signal

    env = {} if liveness is None else {"RAYCHAOS_LOCUST_HEARTBEAT_LIVENESS": liveness}
    load = LocustProcess(TINY, loopback_http, users=2, spawn_rate=2, duration_s=PATIENCE_S + 60,
                         workers=2, stats_path=tmp_path / f"stall{liveness}.stats", env=env)
    with load:
        _collect(load, want=1, until=lambda ls: sum(line["count"] for line in ls) > 0)
        workers = load.pids[1:]
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)
        time.sleep(8)
        for pid in workers:
            os.kill(pid, signal.SIGCONT)
        resumed = time.time()
        # requests answered after the stall, or the master's word that the test stopped
        after = _collect(load, want=1, until=lambda ls: sum(
            line["count"] for line in ls if line["ts"] > resumed + 2) > 0
            or "stopping test" in load.log_path.read_text())
    return [line for line in after if line["ts"] > resumed + 2], load.log_path.read_text()


def test_a_distributed_run_rides_out_workers_stalled_past_locusts_3_heartbeats(loopback_http,
                                                                            tmp_path):
    """Locust drops a worker after 3 missed heartbeats (1 s each) and stops the test when the
    last goes: a make test beside a cold Go build lost a whole run that way. The plugin raises
    it to 30; the control keeps Locust's 3 and loses the run."""
    after, log = _stall_workers(None, loopback_http, tmp_path)
    assert sum(line["count"] for line in after) > 0 and "went missing" not in log, log[-2000:]
    after, log = _stall_workers("3", loopback_http, tmp_path)
    assert "The last worker went missing, stopping test" in log, log[-2000:]
    assert sum(line["count"] for line in after) == 0, after
