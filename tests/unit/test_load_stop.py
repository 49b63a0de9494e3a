"""Stopping the loads is confirmed, not assumed: a stop request lost while the dashboard was
being replaced is sent again, a job that stays RUNNING is named as left behind (the run errs),
and a cluster that does not answer is not waited for."""

from __future__ import annotations

from pathlib import Path

import pytest

from raychaos.config.experiment import load_experiment
from raychaos.context import Run
from raychaos.observe.monitor import Monitor
from raychaos.results.store import Clock, Ledger, Timeline, read_timeline
from raychaos.run.loads import LoadSet, stop_and_confirm
from tests.unit.fake_target import FakeTarget

pytestmark = pytest.mark.unit

EXP = Path(__file__).resolve().parent / "experiments" / "fake-head-kill.yaml"


class Jobs:
    """A Jobs API whose first ``lose`` stop requests per job are lost (accepted, not acted on),
    and whose ``stuck`` jobs never stop; ``down`` answers nothing."""

    def __init__(self, ids: list[str], lose: int = 0, stuck: tuple[str, ...] = (),
                 down: bool = False):
        self.status = dict.fromkeys(ids, "RUNNING")
        self.requests: dict[str, int] = dict.fromkeys(ids, 0)
        self.lose, self.stuck, self.down = lose, stuck, down

    def stop_job(self, job_id: str) -> None:
        self.requests[job_id] += 1
        if self.requests[job_id] > self.lose and job_id not in self.stuck and not self.down:
            self.status[job_id] = "STOPPED"

    def job_status(self, job_id: str) -> str:
        return "UNKNOWN" if self.down else self.status[job_id]


def test_a_lost_stop_request_is_sent_again_until_the_job_is_stopped():
    api = Jobs(["a", "b"], lose=1)
    ended = stop_and_confirm(api, {"storm": "a", "users": "b"}, within_s=5, resend_s=0.2)
    assert {n: (r["status"], r["stop_requests"]) for n, r in ended.items()} == {
        "storm": ("STOPPED", 2), "users": ("STOPPED", 2)}
    assert all(0.2 <= r["s"] < 5 for r in ended.values()), ended
    assert api.requests == {"a": 2, "b": 2}


def test_a_job_that_stays_running_is_returned_by_name():
    api = Jobs(["a", "b"], stuck=("b",))
    ended = stop_and_confirm(api, {"storm": "a", "users": "b"}, within_s=0.8, resend_s=0.2)
    assert ended["users"]["s"] is None and ended["users"]["status"] == "RUNNING"
    assert ended["storm"]["status"] == "STOPPED" and ended["storm"]["s"] is not None
    assert api.requests["a"] == 1 and api.requests["b"] >= 2, api.requests


def test_a_cluster_that_does_not_answer_is_not_waited_for():
    api = Jobs(["a"], down=True)
    ended = stop_and_confirm(api, {"storm": "a"}, within_s=30, resend_s=5)
    assert ended["storm"]["status"] == "UNKNOWN" and ended["storm"]["s"] < 5
    assert api.requests == {"a": 1}


def test_a_load_job_left_running_is_a_run_error_that_names_it(tmp_path, monkeypatch):
    monkeypatch.setattr("raychaos.run.loads.STOP_CONFIRM_S", 1.0)
    clock, target = Clock(), FakeTarget()
    run = Run(run_id="r1", run_dir=tmp_path, settings=load_experiment(EXP).settings,
              target=target, clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
              ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()))
    job_id = target.submit_job("python task_storm.py --name task_storm")
    run.jobs["task_storm"] = job_id
    target.jobs[job_id]["status"] = "RUNNING"  # planted: it ignores the stop
    monitor = Monitor(target, run.timeline, clock)
    loads = LoadSet(load_experiment(EXP), run, monitor, lambda *a, **k: None)
    try:
        loads.stop()
    finally:
        run.timeline.close()
    [error] = run.errors
    [ended] = [r for r in read_timeline(run.timeline.path) if r.get("event") == "loads_ended"]
    assert ended["detail"]["jobs"]["task_storm"]["s"] is None
    assert f"task_storm ({job_id})" in error and "still PENDING/RUNNING" in error, error
    assert target.jobs[job_id]["stopped"], "the stop was sent"
