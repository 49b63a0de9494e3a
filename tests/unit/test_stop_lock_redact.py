"""The harness's own safety parts without a cluster: the stop switch (signals), the per-target
run lock, the abort conditions and secret redaction."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from raychaos.config.settings import AbortSpec
from raychaos.errors import TargetBusy
from raychaos.observe.abort import AbortWatch
from raychaos.results.redact import redact, redact_text
from raychaos.results.store import Clock, Ledger, Timeline, read_json, write_json_atomic
from raychaos.run.stopping import StopRequested, StopSwitch
from raychaos.targets.lock import FileLock


# --- stop switch ----------------------------------------------------------------------------
def test_first_signal_stops_second_only_reports(capsys):
    switch = StopSwitch(lambda: "f1 saturate_network")
    switch.install()
    try:
        with pytest.raises(StopRequested):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # the handler interrupts this sleep
        assert switch.status == "interrupted" and str(switch.error) == "interrupted by SIGTERM"
        os.kill(os.getpid(), signal.SIGINT)  # during the rollback: must not raise
        time.sleep(0.05)
    finally:
        switch.restore()
    err = capsys.readouterr().err
    assert "SIGINT again: still rolling back (f1 saturate_network)" in err
    assert "raychaos rollback" in err


def test_abort_wakes_the_main_thread_and_is_reported_as_aborted():
    import threading

    switch = StopSwitch(lambda: "")
    switch.install()
    try:
        threading.Timer(0.1, switch.abort, args=("gcs_down_s = 70 above 60",)).start()
        with pytest.raises(StopRequested):
            time.sleep(2)
    finally:
        switch.restore()
    assert switch.status == "aborted" and "gcs_down_s = 70" in str(switch.error)


# --- run lock ---------------------------------------------------------------------------------
def test_second_holder_is_refused_naming_the_first(tmp_path):
    first = FileLock(tmp_path / "run.lock", "local cluster 'hdx'")
    first.acquire("run-a")
    with pytest.raises(TargetBusy) as err:
        FileLock(tmp_path / "run.lock", "local cluster 'hdx'").acquire("run-b")
    assert f"local cluster 'hdx' is in use by run 'run-a' (PID {os.getpid()} on " \
           f"{socket.gethostname()}, since" in str(err.value)
    first.release()
    assert not (tmp_path / "run.lock").exists()


def test_stale_lock_of_a_dead_pid_is_taken_over(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    (tmp_path / "run.lock").write_text(json.dumps(
        {"pid": int(dead), "host": socket.gethostname(), "run_id": "crashed", "since": 1}))
    lock = FileLock(tmp_path / "run.lock", "x")
    lock.acquire("run-new")
    assert lock.taken_over["run_id"] == "crashed"
    assert read_json(tmp_path / "run.lock")["run_id"] == "run-new"
    assert not FileLock(tmp_path / "run.lock", "x").clear_stale("run-new"), "holder alive"


# --- abort_if -----------------------------------------------------------------------------------
def _samples(ups: list[bool], step: float = 1.0) -> list[dict]:
    return [{"t": i * step, "kind": "sample", "gcs_up": up, "nodes_total": 3,
             "nodes_alive": 3 if up else 2} for i, up in enumerate(ups)]


def test_gcs_down_must_hold_its_duration(tmp_path):
    watch = AbortWatch([AbortSpec(metric="gcs_down_s", above=3)], tmp_path / "t.jsonl")
    records = _samples([True, False, False, False])
    assert watch.check(records, now=3.0) is None  # down for 2 s
    records += _samples([False] * 6)[4:]
    reason = watch.check(records, now=5.0)
    assert reason == "abort_if[0]: gcs_down_s = 5 above 3"


def test_error_ratio_over_its_window(tmp_path):
    watch = AbortWatch([AbortSpec(metric="error_ratio", above=0.5, for_s=10)], tmp_path / "t")
    loads = [{"t": float(t), "kind": "load", "count": 10, "failures": 0} for t in range(10)]
    assert watch.check(loads, now=10.0) is None
    loads += [{"t": float(t), "kind": "load", "count": 1, "failures": 30} for t in range(10, 20)]
    assert watch.check(loads, now=19.0) == "abort_if[0]: error_ratio = 0.938 above 0.5 for 10 s"


# --- secrets -----------------------------------------------------------------------------------
SECRET = "s3cr3t-planted"


def test_every_results_writer_redacts(tmp_path):
    data = {"target": {"redis_address": f"redis://:{SECRET}@10.0.0.1:6379",
                       "kubeconfig_token": SECRET, "api": f"https://admin:{SECRET}@k8s:6443"},
            "secrets": {"k8s": {"KUBERNETES_TOKEN": SECRET, "nested": {"env": "X"}}},
            "errors": [f"connect to :{SECRET}@10.0.0.1:6379 refused"]}
    write_json_atomic(tmp_path / "summary.json", data)
    ledger = Ledger(tmp_path / "ledger.json", "r", data["target"])
    ledger.begin("x", {"password": SECRET})
    timeline = Timeline(tmp_path / "timeline.jsonl", Clock())
    timeline.event("phase", "start", redis=f"redis://:{SECRET}@h:1")
    timeline.close()
    for path in tmp_path.iterdir():
        assert SECRET not in path.read_text(), path
    summary = read_json(tmp_path / "summary.json")
    assert summary["target"]["redis_address"] == "redis://***@10.0.0.1:6379"
    assert summary["errors"] == ["connect to ***@10.0.0.1:6379 refused"]


def test_redaction_keeps_what_is_not_secret():
    assert redact_text("10.0.0.1:6379 and user@example.com") == "10.0.0.1:6379 and user@example.com"
    assert redact({"gcs_address": "1.2.3.4:6379", "count": 3}) == {
        "gcs_address": "1.2.3.4:6379", "count": 3}


def test_gcs_down_keeps_growing_while_the_sampler_is_stuck(tmp_path):
    """A sampler blocked on a dead GCS writes nothing; the run clock still moves on."""
    watch = AbortWatch([AbortSpec(metric="gcs_down_s", above=2)], tmp_path / "t",
                       now=lambda: 4.0)
    records = _samples([True]) + [{"t": 1.8, "kind": "sample", "gcs_up": False}]
    assert watch.check(records, now=watch.now()) == "abort_if[0]: gcs_down_s = 4 above 2"
