"""Fault and probe logic against the in-process FakeTarget: ledger written ahead, evidence,
timeline events, undo, and the recovery probe's verdicts — no Ray, no API server."""

from __future__ import annotations

import threading
import time

import pytest

from raychaos.config.settings import RaychaosSettings
from raychaos.context import Run, activate, deactivate
from raychaos.errors import ConfigError, FaultFailed
from raychaos.faults.head import kill_head
from raychaos.faults.network import saturate_network
from raychaos.faults.rollback import undo_all
from raychaos.observe.monitor import Monitor
from raychaos.probes.gcs import gcs_recovery
from raychaos.results.store import Clock, Ledger, Timeline, read_timeline
from tests.unit.fake_target import FakeTarget

pytestmark = pytest.mark.unit


@pytest.fixture
def run(tmp_path):
    def make(**fake):
        target = FakeTarget(**fake)
        clock = Clock()
        run = Run(run_id="r1", run_dir=tmp_path, settings=RaychaosSettings(), target=target,
                  clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
                  ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()))
        monitor = Monitor(target, run.timeline, clock, interval_s=0.05)
        monitor.start()
        activate(run)
        made.append((run, monitor))
        return run

    made: list = []
    yield make
    for run, monitor in made:
        monitor.stop()
        deactivate()
        run.timeline.close()


def test_kill_head_writes_the_ledger_first_and_marks_the_kill_on_the_timeline(run):
    r = run(outage_s=0.3)
    evidence = kill_head(mode="gcs", wait_s=5)
    [record] = r.ledger.faults
    assert record["undo"] == {"kind": "ensure_head", "old_pid": 1000}
    assert evidence["head_back"]["back"] and evidence["landed"]
    assert evidence["workers_before"] == [w[:12] for w in r.target.worker_ids]
    events = [e["event"] for e in read_timeline(r.timeline.path) if e["kind"] == "event"]
    assert events[:4] == ["fault_start", "head_killed", "fault_applied", "fault_end"]
    assert undo_all()["undone"] == ["f1"]


def test_a_head_that_never_returns_fails_the_fault(run):
    run(outage_s=0.2, head_comes_back=False)
    with pytest.raises(FaultFailed, match="did not come back within 1 s"):
        kill_head(mode="head", wait_s=1)


def test_fault_arguments_are_checked_on_a_direct_call_too(run):
    run()
    with pytest.raises(ConfigError, match="kill_head: mode: expected one of 'head', 'pod', "
                                          "'gcs', got 'brain'"):
        kill_head(mode="brain")
    with pytest.raises(ConfigError, match="the fault would do nothing"):
        saturate_network(nodes=["worker-1"], bandwidth_mbit=0, flood=False)


def test_recovery_needs_a_stable_stretch_and_workers_back(run):
    run(outage_s=0.4)
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=10, stable_s=0.5)
    assert ev["recovered"] and 0.3 <= ev["gcs_recovery_s"] <= ev["nodes_recovery_s"]
    assert ev["gcs_down_samples"] > 0 and ev["workers_lost"] == []


def test_recovery_fails_when_workers_do_not_come_back(run):
    r = run(outage_s=0.3, lose_workers=True)
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=2, stable_s=0.3)
    assert not ev["recovered"] and ev["nodes_recovery_s"] is None
    assert r.probes[-1]["verdict"] == "fail"


def test_a_flapping_gcs_has_not_recovered(run):
    r = run(outage_s=0.2)
    kill_head(mode="head", wait_s=5)

    def flap() -> None:  # answers for 0.2 s at a time, then goes away again
        for _ in range(8):
            time.sleep(0.2)
            with r.target._lock:
                r.target.down_until = time.monotonic() + 0.15

    threading.Thread(target=flap, daemon=True).start()
    ev = gcs_recovery(timeout_s=1.5, stable_s=1.0)
    assert not ev["recovered"] and ev["gcs_recovery_s"] is None
    assert ev["gcs_flaps_after_first_answer"] >= 2


def test_press_object_store_is_a_job_undone_by_stopping_it(run):
    from raychaos.faults.resources import press_object_store

    r = run()
    ev = press_object_store(mb=64, selector={"raychaos.io/node": "worker-1"}, timeout_s=5)
    assert ev["landed"] and ev["held_mb"] == 64
    [record] = r.ledger.faults
    assert record["undo"] == {"kind": "stop_job", "job_id": ev["job_id"]}
    assert "--selector" in r.target.jobs[ev["job_id"]]["entry"]
    assert undo_all()["undone"] == ["f1"]
    assert r.target.job_status(ev["job_id"]) == "STOPPED"
    assert r.ledger.faults[0]["undo_result"]["status"] == "STOPPED"


def test_resize_dev_shm_and_the_probe_that_names_the_trap(run):
    from raychaos.faults.resources import resize_dev_shm
    from raychaos.probes.resources import dev_shm_check

    r = run()
    assert dev_shm_check(bench_s=0)["shm_backed_ratio"] == 1.0
    ev = resize_dev_shm(nodes=["worker-1"], size_mb=64)
    assert ev["landed"] and r.ledger.faults[0]["undo"] == {"kind": "dev_shm"}
    check = dev_shm_check(bench_s=0)
    assert check["trapped"] == ["worker-1"] and check["shm_backed_ratio"] == 0.5
    assert "on disk: its /dev/shm has 64 MB" in check["nodes"]["worker-1"]["ray_did"]
    assert [p["verdict"] for p in r.probes] == ["pass", "fail"]
    undo_all()
    assert dev_shm_check(bench_s=0)["trapped"] == []
