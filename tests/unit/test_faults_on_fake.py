"""Fault and probe logic against the in-process FakeTarget: ledger written ahead, evidence,
timeline events, undo, and the recovery probe's verdicts — no Ray, no API server."""

from __future__ import annotations

import itertools
import time

import pytest

from raychaos.config.settings import RaychaosSettings, SloProfile, SloSpec
from raychaos.context import Run, activate, deactivate
from raychaos.errors import ConfigError, NotRecovered
from raychaos.faults.head import kill_head
from raychaos.faults.network import saturate_network
from raychaos.faults.rollback import undo_all
from raychaos.observe.monitor import Monitor
from raychaos.observe.slo import evaluate
from raychaos.probes.gcs import gcs_recovery
from raychaos.results.store import Clock, Ledger, Timeline, read_timeline
from raychaos.targets.base import Observation
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


def test_a_head_that_never_returns_is_not_recovered_not_a_fault_that_failed(run):
    r = run(outage_s=0.2, head_comes_back=False, undo_wait_s=0.3)
    with pytest.raises(NotRecovered, match="did not come back within 1 s"):
        kill_head(mode="head", wait_s=1)
    [record] = r.ledger.faults
    assert record["state"] == "applied" and record["error"] is None
    assert "did not come back" in record["not_recovered"]
    events = [e["event"] for e in read_timeline(r.timeline.path) if e["kind"] == "event"]
    assert "not_recovered" in events and "fault_end" not in events
    # the rollback still waits for the head; one that never comes is not a rollback failure
    result = undo_all()
    assert result == {"undone": [], "not_recovered": ["f1"]}
    assert record["state"] == "not_recovered" and r.ledger.outstanding() == []


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


def test_workers_back_as_new_nodes_are_gone_for_good_and_the_probe_does_not_wait_for_them(run):
    """A GCS without fault tolerance: it comes back empty, the old raylets exit and the workers
    return as new nodes. The old IDs can never be ALIVE again, so the probe fails as soon as the
    GCS has recovered and the new GCS's table lacks them — not a timeout later."""
    r = run(outage_s=0.3, new_workers=True)
    kill_head(mode="head", wait_s=5)
    t0 = time.monotonic()
    ev = gcs_recovery(timeout_s=60, stable_s=0.3)
    assert time.monotonic() - t0 < 30, "it waited for workers that cannot come back"
    assert not ev["recovered"] and r.probes[-1]["verdict"] == "fail"
    assert ev["workers_lost"] == ev["workers_before"] and len(ev["workers_before"]) == 2
    assert set(ev["workers_gone"]) == set(ev["workers_before"])
    assert {g["how"] for g in ev["workers_gone"].values()} == {
        "not in the table of the GCS that came back"}
    assert ev["nodes_settled_s"] >= ev["gcs_recovery_s"]
    assert set(ev["workers_after"]).isdisjoint(ev["workers_before"])  # the new nodes
    from raychaos.run.verdict import _probe_reason

    assert "gone for good: not in the table of the GCS that came back" in _probe_reason(
        "gcs_recovery", "fail", ev)


def test_workers_dead_in_the_table_end_the_wait_with_a_fail(run):
    r = run(outage_s=0.3, lose_workers=True)
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=60, stable_s=0.3)
    assert not ev["recovered"] and r.probes[-1]["verdict"] == "fail"
    assert {g["how"] for g in ev["workers_gone"].values()} == {"DEAD in the GCS's table"}
    assert ev["nodes_settled_s"] is not None


def test_workers_missing_from_a_gcs_not_known_to_be_another_one_are_waited_for(run):
    """Without incarnations (a target that cannot number them), a table that lacks the old
    workers may be the same GCS answering partly: not "gone", the probe waits its timeout."""
    r = run(outage_s=0.3, new_workers=True, reports_known=False)
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=1.5, stable_s=0.3)
    assert ev["workers_gone"] == {} and ev["nodes_settled_s"] is None
    assert ev["workers_lost"] == ev["workers_before"] and r.probes[-1]["verdict"] == "fail"


def test_a_flapping_gcs_has_not_recovered(run):
    r = run(outage_s=0.2)
    kill_head(mode="head", wait_s=5)
    answer = r.target.observe
    answers = itertools.count()
    asked = []

    def flapping(deadline_s: float = 0.1) -> Observation:
        """From the first answer on, two samples in three find the GCS gone again (one alone
        would read as a slow answer), so no two answers in a row: no run of answers lasts at all,
        however far apart a busy box takes its samples (with two answers in a row, a CI lane
        that sampled once a second read them as a second of stability)."""
        seen = answer(deadline_s)
        asked.append(seen.up)
        if seen.up and next(answers) % 3 != 0:
            return Observation(False, error="fake: the GCS went away again")
        return seen

    r.target.observe = flapping  # type: ignore[method-assign]
    # the monitor's samples, not the clock, decide when there is enough to judge: two full
    # cycles of answer-gone-gone after the first answer (a minute is only the give-up)
    deadline = time.monotonic() + 60
    while sum(asked) < 7 and time.monotonic() < deadline:
        time.sleep(0.05)
    ev = gcs_recovery(timeout_s=0.5, stable_s=1.0)
    assert not ev["recovered"] and ev["gcs_recovery_s"] is None
    assert ev["gcs_flaps_after_first_answer"] >= 2


def test_reregistration_is_measured_and_workers_listed_alive_but_silent_fail(run):
    r = run(outage_s=0.3, reregister=False)  # the restored table says ALIVE; no raylet reports
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=2, stable_s=0.3)
    assert ev["reregistration"] == "measured"
    assert ev["gcs_recovery_s"] is not None and ev["nodes_recovery_s"] is None
    assert ev["workers_lost"] == [], "every worker reads ALIVE ..."
    assert ev["workers_not_reregistered"] == ev["workers_before"], "... none re-registered"
    assert r.probes[-1]["verdict"] == "fail"


def test_reregistration_times_come_after_the_gcs_is_back(run):
    run(outage_s=0.3, reregister_s=0.5)
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=10, stable_s=0.3)
    assert ev["recovered"] and ev["reregistration"] == "measured"
    assert set(ev["reregistered_s"]) == set(ev["workers_before"])
    assert min(ev["reregistered_s"].values()) >= ev["gcs_first_answer_s"] + 0.4
    assert ev["nodes_recovery_s"] >= max(ev["reregistered_s"].values())


def test_unknown_workers_before_the_kill_are_not_a_vacuous_pass(run, monkeypatch):
    r = run(outage_s=0.3)
    monkeypatch.setattr("raychaos.faults.head._workers_before", lambda _run: None)
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=5, stable_s=0.3)
    assert ev["workers_before"] is None and ev["nodes_recovery_s"] is None
    assert r.probes[-1]["verdict"] == "unknown", "not observed: the run errors"


def test_a_target_that_cannot_tell_reregistration_is_not_all_reregistered(run):
    """Like the Kubernetes target: only the restored node table, which lists the old workers
    ALIVE at once. The GCS figure is judged; the workers' is not observed (never a pass)."""
    r = run(outage_s=0.3, reports_known=False)
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=5, stable_s=0.3)
    assert ev["reregistration"] == "unknown" and ev["workers_not_reregistered"] is None
    assert ev["nodes_recovery_s"] is None, "ALIVE in a restored table is no re-registration"
    assert ev["nodes_alive_s"] is not None and ev["gcs_recovery_s"] is not None
    assert r.probes[-1]["verdict"] == "unknown", "not observed: the run errors"
    assert "re-registered" in ev["unobserved"][0]
    profile = SloProfile(name="p", slos=[
        SloSpec(name="gcs", metric="gcs_recovery_s", threshold=30),
        SloSpec(name="workers", metric="nodes_recovery_s", threshold=30)])
    rows, _ = evaluate(profile, read_timeline(r.timeline.path), r.probes)
    assert {row["name"]: row["verdict"] for row in rows} == {"gcs": "pass", "workers": "error"}
    assert "could not observe which workers re-registered" in rows[1]["evidence"]["note"]


def test_workers_visibly_lost_fail_where_reregistration_cannot_be_told(run):
    r = run(outage_s=0.3, reports_known=False, lose_workers=True)
    kill_head(mode="head", wait_s=5)
    ev = gcs_recovery(timeout_s=2, stable_s=0.3)
    assert ev["nodes_alive_s"] is None and ev["workers_lost"]
    assert r.probes[-1]["verdict"] == "fail", "what was seen lost is a fail, not an error"


@pytest.mark.parametrize("reports_known", [False, True])
def test_workers_alive_in_the_restored_table_then_dead_fail(run, reports_known):
    """Seen on the KubeRay world (head pod deleted): the new GCS listed both old workers ALIVE,
    then its health checks marked them DEAD; the probe passed on the first sample. Lost by the
    end is a fail, whether re-registration can be told or not."""
    r = run(outage_s=0.3, reports_known=reports_known)
    kill_head(mode="head", wait_s=5)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not any(
            x["kind"] == "sample" and x["t"] > 0.5 and x.get("alive_ids")
            for x in read_timeline(r.timeline.path) if x["t"] >= 0):
        time.sleep(0.05)
    time.sleep(0.6)  # the GCS has answered steadily, the workers read ALIVE
    r.target.lost = set(r.target.worker_ids)  # ... then DEAD
    time.sleep(0.3)
    ev = gcs_recovery(timeout_s=2, stable_s=0.3)
    assert ev["nodes_alive_s"] is not None and ev["workers_lost"] == ev["workers_before"]
    assert not ev["recovered"] and r.probes[-1]["verdict"] == "fail"
    from raychaos.run.verdict import _probe_reason

    assert _probe_reason("gcs_recovery", "fail", ev).startswith("workers lost: ")


def test_workers_before_come_from_the_monitor_when_the_gcs_is_slow(run, monkeypatch):
    r = run(outage_s=0.3)
    time.sleep(0.2)  # the monitor has sampled the cluster

    def slow(timeout: float = 1.0):
        from raychaos.errors import TargetUnavailable

        raise TargetUnavailable("fake: no answer within 2 s")

    monkeypatch.setattr(r.target, "nodes", slow)
    from raychaos.faults.head import _workers_before

    assert _workers_before(r) == [w[:12] for w in r.target.worker_ids]


def test_the_monitor_writes_a_sample_every_beat_while_the_target_blocks(run):
    r = run()
    time.sleep(0.3)
    r.target.observe_delay_s = 2.0  # every question now blocks for 2 s
    time.sleep(2.5)
    r.target.observe_delay_s = 0.0
    time.sleep(2.2)
    samples = [x for x in read_timeline(r.timeline.path) if x["kind"] == "sample"]
    gaps = [b["t"] - a["t"] for a, b in zip(samples, samples[1:], strict=False)]
    # a monitor that waited for its question would leave a 2 s hole; one that keeps its 50 ms
    # beat leaves none near it (a busy box delays a beat by a few hundred ms at worst: the
    # bound is on the design, not this machine's scheduling)
    assert max(gaps) < 1.0, f"the monitor waited for a blocked question: gap {max(gaps)} s"
    blocked = [x for x in samples if not x["gcs_up"]]
    assert len(blocked) >= 15, "unanswered questions are written as down, on time"
    assert all("no answer" in x["gcs_error"] for x in blocked)
    assert samples[-1]["gcs_up"], "and the monitor saw the answers again"


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
