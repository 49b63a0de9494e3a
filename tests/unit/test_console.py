"""The console: library log lines go to harness.log, progress says phase, time and what is
waited for, a live status line on a terminal, plain lines in CI, key figures in the verdict."""

from __future__ import annotations

import io
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _runs import DEFAULT_PROBES, DEFAULT_SLOS

from raychaos.run.console import RunConsole, terminal_stderr
from raychaos.run.progress import Progress, verdict_table

pytestmark = pytest.mark.unit

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def test_fd2_goes_to_harness_log_whoever_writes_it(tmp_path: Path, capfd) -> None:
    # made before the run, as Ray's is at import, on fd 2 (pytest replaced sys.stderr itself)
    handler = logging.StreamHandler(open(2, "w", closefd=False))  # noqa: SIM115
    log = logging.getLogger("test_console.ray_like")
    log.addHandler(handler)
    log.propagate = False
    try:
        with RunConsole(tmp_path / "harness.log"):
            os.write(2, b"[2026-12-01 09:07:01] (gcs) rpc_client.h:153: Failed to connect\n")
            log.warning("dashboard_sdk.py:423 -- Package already exists, skipping upload")
            subprocess.run(["sh", "-c", "echo child says hello >&2"], check=True)
            print("second Ctrl-C: still rolling back", file=terminal_stderr(), flush=True)
    finally:
        log.removeHandler(handler)
    seen = capfd.readouterr()
    text = (tmp_path / "harness.log").read_text()
    for line in ("rpc_client.h:153", "dashboard_sdk.py:423", "child says hello"):
        assert line in text and line not in seen.err + seen.out
    assert "still rolling back" in seen.err and "still rolling back" not in text
    os.write(2, b"after the run\n")  # fd 2 is given back
    assert "after the run" in capfd.readouterr().err


def _records(progress: Progress, *records: dict) -> None:
    for r in records:
        progress.observe(r)


def test_lines_say_time_phase_and_what_is_waited_for() -> None:
    out = io.StringIO()
    say = Progress(stream=out, tty=False)
    say("waiting for the loads to report")
    assert say.waiting_for() == "waiting for the loads to report"
    _records(say, {"kind": "event", "event": "phase", "name": "method", "t": 1.0},
             {"kind": "event", "event": "activity_start", "name": "kill-head", "t": 1.0},
             {"kind": "event", "event": "fault_start", "name": "kill_head", "t": 1.0},
             {"kind": "event", "event": "head_killed", "name": "head", "t": 1.1},
             {"kind": "sample", "gcs_up": False, "t": 1.2},
             {"kind": "load", "load": "task_storm", "count": 0, "t": 2.0})
    say("method: injecting faults", phase=True)
    assert re.search(r"^\[\s+\d+\.\ds\] setup {6}waiting for the loads to report$",
                     out.getvalue(), re.M)
    assert re.search(r"^\[\s+\d+\.\ds\] method {5}method: injecting faults$", out.getvalue(),
                     re.M)
    assert re.match(r"kill-head: waiting for the head to come back \(\d+s\)$", say.waiting_for())
    assert re.search(r"^\[\s+\d+\.\ds\] method {9}head killed; waiting for it to come back$",
                     out.getvalue(), re.M), out.getvalue()
    status = say.status()
    assert "GCS DOWN" in status and "task_storm 0/s" in status
    _records(say, {"kind": "sample", "gcs_up": True, "nodes_alive": 3, "nodes_total": 3,
                   "t": 3.0},
             {"kind": "load", "load": "task_storm", "count": 50, "t": 2.5})
    assert "waiting for the head and its workers" in say.waiting_for()
    assert re.search(r"method {9}the GCS answers again \(down \d+\.\ds\)$", out.getvalue(),
                     re.M), out.getvalue()
    assert "GCS up · nodes 3/3 · task_storm 100/s" in say.status()
    _records(say, {"kind": "event", "event": "activity_end", "name": "kill-head", "t": 4.0},
             {"kind": "event", "event": "phase", "name": "rollbacks", "t": 5.0})
    assert say.phase == "rollbacks" and say.waiting_for() is None


def test_quiet_keeps_phase_and_essential_lines() -> None:
    out = io.StringIO()
    say = Progress(quiet=True, stream=out, tty=False)
    say("load task_storm: Ray job 1")
    say("method: injecting faults", phase=True)
    say("results: here", essential=True)
    text = out.getvalue()
    assert "task_storm" not in text and "method" in text and "results" in text
    assert say.tick_every_s is None  # the session's own ticker is not needed


def _until(done, timeout: float = 10.0) -> None:  # noqa: ANN001
    """Wait for the progress thread to have done something, however slow the host."""
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline:
        time.sleep(0.01)


def test_a_terminal_gets_a_live_status_line_and_ci_plain_lines(monkeypatch) -> None:
    out = io.StringIO()
    live = Progress(stream=out, tty=True)
    monkeypatch.setattr(live, "redraw_every_s", 0.02)
    live.observe({"kind": "sample", "gcs_up": True, "nodes_alive": 2, "nodes_total": 3, "t": 0})
    live.start()
    _until(lambda: "\x1b[7m" in out.getvalue())  # the status line is drawn (a loaded box:
    live("a line")  # a fixed sleep once ended before the first draw, at nice 19 beside a build)
    live.stop()
    text = out.getvalue()
    assert "\r\x1b[2K\x1b[7m[" in text and "GCS up · nodes 2/3" in text
    assert "\r\x1b[2K[" in text and text.endswith("\r\x1b[2K")  # a line, then the status
    ci = io.StringIO()
    plain = Progress(stream=ci, tty=False)
    monkeypatch.setattr(plain, "ci_every_s", 0.05)
    plain("baseline: 5s")
    plain.start()
    _until(lambda: len(ci.getvalue().splitlines()) >= 3)
    plain.stop()
    assert "\x1b" not in ci.getvalue()
    assert re.search(r"^\[\s+\d+\.\ds\] setup {6}baseline: 5s$", ci.getvalue(), re.M)
    assert len(ci.getvalue().splitlines()) >= 3  # the periodic status lines


def test_verdict_table_shows_each_probes_key_figure() -> None:
    probes = DEFAULT_PROBES + [
        {"name": "gcs_recovery", "verdict": "pass",
         "evidence": {"gcs_recovery_s": 6.111, "nodes_recovery_s": 7.0, "workers_lost": []}},
        {"name": "job_survival", "verdict": "fail",
         "evidence": {"survived": 0, "total": 1, "lost": ["task_storm"], "ratio": 0.0}},
        {"name": "sentinel_preserved", "verdict": "fail",
         "evidence": {"found": True, "preserved": False, "before": {"pid": 5, "count": 3},
                      "after": {"pid": 9, "count": 0}}}]
    table = verdict_table({"probes": probes, "slos": DEFAULT_SLOS})
    lines = {line.split("  ")[0]: line for line in table.splitlines()}
    assert "GCS back in 6.1 s, workers in 7.0 s" in lines["probe gcs_recovery"]
    assert "0/1 jobs survived; lost task_storm" in lines["probe job_survival"]
    assert "PID 5 → 9, state 3 → 0" in lines["probe sentinel_preserved"]
    assert "error: dashboard timed out" in lines["probe gcs-recovery"]
    assert re.search(r"storm-p99\s+chaos\s+40 ms\s+<= 25 ms\s+over by 15 ms", table)
    assert re.search(r"jobs-survive\s+recovery\s+not measured\s+>= 100%", table)
    for line in table.splitlines()[2:]:
        assert not re.search(r"\s-\s", line), line


def test_a_whole_run_keeps_library_lines_off_the_console(tmp_path: Path) -> None:
    """A run on the fake target through ``raychaos run``: the console has raychaos's lines only
    (each with time and phase); what the process wrote to fd 2 is in harness.log."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}",
               RAYCHAOS_TARGET_FACTORY="tests.unit.fake_target:from_spec",
               RAYCHAOS_FAKE='{"outage_s": 0.6}')
    proc = subprocess.run(
        [sys.executable, "-c", "import os, sys; from raychaos.cli import main; "
         "import raychaos.run.session as s; start = s.Session.start\n"
         "def noisy(self):\n"
         "    run = start(self); os.write(2, b'rpc_client.h:153: Failed to connect to GCS\\n')\n"
         "    return run\n"
         "s.Session.start = noisy; sys.exit(main(sys.argv[1:]))",
         "run", str(HERE / "experiments" / "fake-head-kill.yaml"), "--results",
         str(tmp_path / "results")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    [run_dir] = list((tmp_path / "results").iterdir())
    assert "rpc_client.h" in (run_dir / "harness.log").read_text()
    assert "rpc_client.h" not in proc.stdout + proc.stderr
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert progress and all(re.match(r"\[\s+\d+\.\ds\] (setup|hypothesis|method|rollbacks|"
                                     r"finish)\s", line) for line in progress), progress
    assert any("recovery window: watching for" in line for line in progress)
    assert re.search(r"^probe gcs_recovery\s+run\s+GCS back in", proc.stdout, re.M), proc.stdout
