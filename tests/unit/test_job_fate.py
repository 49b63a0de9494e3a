"""``job_status_consistent``: a job's fate read from the RayJob, the Jobs API and the driver,
against the FakeTarget — passing when they agree, failing on planted disagreements of the kinds
seen in the field (kuberay#3903, ray#65025), judged against the submission mode's expectation."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from raychaos.config.settings import RaychaosSettings
from raychaos.context import Run, activate, deactivate
from raychaos.probes.jobfate import driver_fate, job_status_consistent, judge, rayjob_fate
from raychaos.results.store import Clock, Ledger, Timeline
from tests.unit.fake_target import FakeTarget

pytestmark = pytest.mark.unit
DONE = 'RAYCHAOS_PROGRESS {"step": 5, "of": 5, "done": true}'


@pytest.fixture
def fake(tmp_path):
    target = FakeTarget()
    clock = Clock()
    run = Run(run_id="r1", run_dir=tmp_path, settings=RaychaosSettings(), target=target,
              clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
              ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()))
    activate(run)
    job_id = target.submit_job("python train_steps.py --name train")
    target.workload = {"kind": "rayjob", "name": "train", "job_id": job_id,
                       "job_status": "RUNNING", "job_deployment_status": "Running",
                       "submission_mode": "HTTPMode"}
    yield target, job_id, run
    deactivate()
    run.timeline.close()


def _finish(target: FakeTarget, job_id: str, api_status: str) -> None:
    target.jobs[job_id].update(oneshot=True, status=api_status, lines=[DONE])


def test_an_agreeing_run_passes(fake):
    target, job_id, run = fake
    target.jobs[job_id]["last"] = time.time() - 3  # the driver has printed for 3 s
    ev = job_status_consistent(expect="running", timeout_s=2)
    job = ev["jobs"]["rayjob/train"]
    assert job["readings"] == {"rayjob": "running", "jobs_api": "running", "driver": "running"}
    assert run.probes[-1]["verdict"] == "pass" and ev["disagreeing"] == []


def test_a_rayjob_stuck_running_after_the_job_ended_fails(fake):  # kuberay#3903
    target, job_id, run = fake
    _finish(target, job_id, "SUCCEEDED")
    ev = job_status_consistent(timeout_s=1.5)
    job = ev["jobs"]["rayjob/train"]
    assert job["readings"] == {"rayjob": "running", "jobs_api": "succeeded",
                               "driver": "succeeded"}
    assert run.probes[-1]["verdict"] == "fail" and ev["disagreeing"] == ["rayjob/train"]
    assert "the readings disagree: rayjob running, jobs_api succeeded, driver succeeded" in \
        job["why"]


def test_a_job_marked_failed_although_its_driver_finished_fails(fake):  # ray#65025
    target, job_id, run = fake
    _finish(target, job_id, "FAILED")
    target.workload.update(job_status="FAILED", job_deployment_status="Failed",
                           reason="AppFailed")
    ev = job_status_consistent(timeout_s=1)
    assert ev["jobs"]["rayjob/train"]["readings"]["driver"] == "succeeded"
    assert run.probes[-1]["verdict"] == "fail"


def test_k8sjobmode_expectation_judges_the_rayjob_on_its_own(fake):
    target, job_id, run = fake
    target.jobs[job_id]["last"] = time.time() - 3
    target.workload.update(job_deployment_status="Failed", reason="SubmissionFailed",
                           submission_mode="K8sJobMode")
    ev = job_status_consistent(expect="running", expect_rayjob="failed", timeout_s=1)
    assert run.probes[-1]["verdict"] == "pass", ev
    target.workload.update(job_deployment_status="Running")  # KubeRay did not fail it
    ev = job_status_consistent(expect="running", expect_rayjob="failed", timeout_s=1)
    assert run.probes[-1]["verdict"] == "fail"
    assert ev["jobs"]["rayjob/train"]["why"] == ["the RayJob reads 'running', expected 'failed'"]


def test_without_a_rayjob_the_load_jobs_are_judged_on_the_other_two(tmp_path):
    target = FakeTarget()
    clock = Clock()
    run = Run(run_id="r1", run_dir=tmp_path, settings=RaychaosSettings(), target=target,
              clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
              ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()))
    activate(run)
    try:
        run.jobs["storm"] = target.submit_job("python task_storm.py --name storm")
        run.timeline.write("load", load="storm", count=10, failures=0)
        ev = job_status_consistent(expect="running", timeout_s=1)
        assert ev["jobs"]["storm"]["readings"] == {"jobs_api": "running", "driver": "running"}
        assert run.probes[-1]["verdict"] == "pass"
    finally:
        deactivate()
        run.timeline.close()


def test_the_readings_and_the_rules():
    assert rayjob_fate({"job_deployment_status": "Failed", "job_status": "RUNNING"}) == "failed"
    assert rayjob_fate({"job_deployment_status": "Initializing", "job_status": ""}) == "pending"
    assert rayjob_fate({"error": "HTTP 403"}) == "unknown"
    now = 1000.0
    line = "RAYCHAOS_PROGRESS " + json.dumps({"step": 3, "of": 9, "ts": now - 60})
    assert driver_fate([line], now, now, 15)[0] == "silent"  # its own ts, not arrival
    assert driver_fate([], None, now, 15)[0] == "unknown"
    assert judge({"jobs_api": "succeeded", "driver": "silent"}, "succeeded", "same") == (
        "pass", [])  # a driver that exited is silent
    assert judge({"jobs_api": "running", "driver": "silent"}, "any", "same")[0] == "fail"
    assert judge({"jobs_api": "unknown", "driver": "running"}, "any", "same")[0] == "unknown"


def test_on_a_rayservice_target_no_serve_application_is_deployed_or_removed(tmp_path):
    """The Serve app in the experiment is for the local target; a RayService serves its own."""
    from raychaos.config.experiment import find_experiment, load_experiment
    from raychaos.observe.monitor import Monitor
    from raychaos.run.loads import LoadSet

    exp = load_experiment(find_experiment(Path("rayservice-head-kill")))
    target = FakeTarget()
    target.workload = {"kind": "rayservice", "name": "chat", "serves_own_apps": True}
    clock = Clock()
    run = Run(run_id="r1", run_dir=tmp_path, settings=exp.settings, target=target, clock=clock,
              timeline=Timeline(tmp_path / "timeline.jsonl", clock),
              ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()))
    said: list[str] = []
    loads = LoadSet(exp, run, Monitor(target, run.timeline, clock), said.append)
    try:
        loads.start()
    finally:
        loads.stop()
        run.timeline.close()
    assert not [c for c in target.calls if c[0] == "submit_job"], target.calls
    assert "serve_app" not in run.extras
    assert any("serves its own applications; deploying (and removing) nothing" in s
               for s in said)
