"""The verdict from every source, on hand-made runs: a probe that raised, a hypothesis not met
before the method, a system that did not recover, a fault that did not land, a GCS that flapped
after recovering — each gives the verdict and exit code the issue demands, and the checks the
CLI, JUnit and pytest show say the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from raychaos.config.experiment import load_experiment
from raychaos.config.settings import SloProfile, SloSpec
from raychaos.context import Run
from raychaos.results.store import Clock, Ledger, Timeline
from raychaos.run.verdict import summarize
from tests.unit.fake_target import FakeTarget

pytestmark = pytest.mark.unit

EXP = Path(__file__).resolve().parent / "experiments" / "fake-head-kill.yaml"
PROFILE = SloProfile(name="p", slos=[
    SloSpec(name="jobs-survive", metric="job_survival_ratio", op=">=", threshold=1.0)])


def _run(tmp_path: Path, profile: SloProfile | None = PROFILE) -> Run:
    clock = Clock()
    target = FakeTarget()
    return Run(run_id="r1", run_dir=tmp_path, settings=load_experiment(EXP).settings,
               target=target, clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
               ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()),
               slo_profile=profile)


def _good_probes(run: Run) -> None:
    run.record_probe("gcs_recovery", "pass", {"gcs_recovery_s": 3.0, "nodes_recovery_s": 4.0})
    run.record_probe("sentinel_preserved", "pass", {"preserved": True})
    run.record_probe("job_survival", "pass", {"ratio": 1.0, "lost": [], "total": 1})


def _activity(kind: str, name: str, func: str, status: str = "succeeded",
              error: str | None = None, module: str = "raychaos.probes.gcs") -> dict[str, Any]:
    run: dict[str, Any] = {"activity": {"type": kind, "name": name, "provider": {
        "type": "python", "module": module, "func": func}}, "status": status}
    if error:
        run["exception"] = ["Traceback ...\n", f"chaoslib.exceptions.ActivityFailed: {error}\n"]
    return run


def _journal(run: list[dict[str, Any]] | None = None, before_met: bool = True,
             before: list[dict[str, Any]] | None = None, deviated: bool = False,
             status: str = "completed") -> dict[str, Any]:
    probes = before if before is not None else [
        {**_activity("probe", "gcs-answers", "gcs_healthy"), "tolerance_met": True}]
    return {"status": status, "deviated": deviated, "run": run or [], "rollbacks": [],
            "steady_states": {"before": {"steady_state_met": before_met, "probes": probes},
                              "after": None}}


def _summary(exp_run: Run, journal: dict[str, Any] | None) -> dict[str, Any]:
    try:
        return summarize(load_experiment(EXP), exp_run, journal, "completed", [], None, None)
    finally:
        exp_run.timeline.close()


def _check(summary: dict[str, Any], kind: str, name: str) -> dict[str, Any]:
    return next(c for c in summary["checks"] if c["kind"] == kind and c["name"] == name)


def test_every_check_passed_is_a_pass(tmp_path):
    run = _run(tmp_path)
    _good_probes(run)
    s = _summary(run, _journal())
    assert (s["verdict"], s["exit_code"]) == ("pass", 0)
    assert {c["verdict"] for c in s["checks"]} == {"pass"}
    assert [c["name"] for c in s["checks"]] == ["run", "gcs_recovery", "sentinel_preserved",
                                                 "job_survival", "jobs-survive"]


def test_a_probe_that_raised_is_an_error_even_without_an_slo_for_it(tmp_path):
    run = _run(tmp_path, profile=None)  # no SLO reads gcs_recovery: it used to pass
    run.record_probe("sentinel_preserved", "pass", {"preserved": True})
    run.record_probe("job_survival", "pass", {"ratio": 1.0})
    raised = _activity("probe", "gcs-recovery", "gcs_recovery", "failed",
                       "raychaos.errors.ProbeFailed: gcs_recovery: the timeline is unreadable")
    s = _summary(run, _journal([raised]))
    assert (s["verdict"], s["exit_code"]) == ("error", 2)
    check = _check(s, "probe", "gcs_recovery")
    assert check["verdict"] == "error"
    assert check["message"] == ("probe gcs-recovery (gcs_recovery) raised: raychaos.errors."
                                "ProbeFailed: gcs_recovery: the timeline is unreadable")
    assert _check(s, "run", "run")["verdict"] == "pass"


def test_a_probe_that_recorded_nothing_is_not_judged_and_errors(tmp_path):
    run = _run(tmp_path)
    run.record_probe("gcs_recovery", "pass", {"gcs_recovery_s": 3.0})
    s = _summary(run, _journal())
    assert s["verdict"] == "error"
    assert "probe sentinel_preserved recorded no verdict" in _check(
        s, "probe", "sentinel_preserved")["message"]
    slo = _check(s, "slo", "jobs-survive")
    assert slo["verdict"] == "error" and "job_survival probe recorded nothing" in slo["message"]


def test_a_hypothesis_not_met_before_the_method_fails_and_the_rest_is_part_of_it(tmp_path):
    run = _run(tmp_path)  # the method never ran: no probe recorded anything
    missed = [{**_activity("probe", "gcs-answers", "gcs_healthy"), "tolerance_met": False,
               "output": False}]
    s = _summary(run, _journal(before_met=False, before=missed))
    assert (s["verdict"], s["exit_code"]) == ("fail", 1)
    run_check = _check(s, "run", "run")
    assert run_check["verdict"] == "fail"
    assert "not met before the method (probe gcs-answers): the method did not run" in \
        run_check["message"]
    assert {c["verdict"] for c in s["checks"]} == {"fail"}, "unobserved because it failed"


def test_a_hypothesis_probe_that_raised_is_an_error(tmp_path):
    run = _run(tmp_path)
    raised = [{**_activity("probe", "gcs-answers", "gcs_healthy", "failed",
                           "raychaos.errors.TargetUnavailable: no cluster"),
               "tolerance_met": False}]
    s = _summary(run, _journal(before_met=False, before=raised, status="failed"))
    assert s["verdict"] == "error"
    assert "steady-state probe (before the method) gcs-answers (gcs_healthy) raised" in \
        _check(s, "run", "run")["message"]


def test_deviated_after_the_method_fails(tmp_path):
    run = _run(tmp_path)
    _good_probes(run)
    s = _summary(run, _journal(deviated=True))
    assert s["verdict"] == "fail"
    assert "deviated after the method" in _check(s, "run", "run")["message"]


def test_a_system_that_did_not_recover_fails_and_what_it_hid_is_a_failure_too(tmp_path):
    run = _run(tmp_path)
    record = run.ledger.begin("kill_head", {"mode": "head"})
    run.ledger.update(record, state="undone",  # it came back later, in the rollback
                      not_recovered="NotRecovered: kill_head: the head did not come back "
                                    "within 10 s")
    run.record_probe("job_survival", "unknown", {"unobserved": ["task_storm"]})
    raised = [_activity("action", "kill-head", "kill_head", "failed",
                        "raychaos.errors.NotRecovered: kill_head: the head did not come back",
                        module="raychaos.faults.head"),
              _activity("probe", "gcs-recovery", "gcs_recovery", "failed",
                        "raychaos.errors.ProbeFailed: nothing to read")]
    s = _summary(run, _journal(raised))
    assert (s["verdict"], s["exit_code"]) == ("fail", 1), s["checks"]
    run_check = _check(s, "run", "run")
    assert run_check["verdict"] == "fail"
    assert "fault f1 kill_head: the system did not recover" in run_check["message"]
    jobs = _check(s, "probe", "job_survival")
    assert jobs["verdict"] == "fail" and "after the system failed" in jobs["message"]
    assert _check(s, "probe", "gcs_recovery")["verdict"] == "fail"


def test_a_fault_that_did_not_land_is_an_error_even_when_the_system_did_not_recover(tmp_path):
    run = _run(tmp_path)
    _good_probes(run)
    r1 = run.ledger.begin("saturate_network", {})
    run.ledger.update(r1, state="failed", error="FaultFailed: no effect measured")
    r2 = run.ledger.begin("kill_head", {})
    run.ledger.update(r2, state="not_recovered", not_recovered="NotRecovered: gone")
    s = _summary(run, _journal())
    assert s["verdict"] == "error"
    assert "fault f1 saturate_network did not land: FaultFailed" in _check(
        s, "run", "run")["message"]


def _gone_again(tmp_path, gone: int, *, refused: bool = True,
                host: tuple[float, float] | None = None):
    """A GCS back after a kill, then ``gone`` samples (0.2 s apart) without an answer — refused,
    or deadlines missed — then back; with ``host``, the sensor's (unrelated CPUs, timer lag ms)
    every second of the run."""
    run = _run(tmp_path)
    _good_probes(run)
    tl = run.timeline
    tl.write("event", t=1.0, event="head_killed", name="head", detail={"workers_before": []})
    ups = [True] * 5 + [False] * 5 + [True] * 30 + [False] * gone + [True] * 30
    for i, up in enumerate(ups):
        tl.write("sample", t=i * 0.2, gcs_up=up, alive_ids=[], nodes_alive=1,
                 gcs_late=not up and not refused and i > 10)
    foreign, lag = host or (0.0, 0.0)
    for t in range(int(len(ups) * 0.2) if host else 0):
        tl.write("host", t=t + 0.5, foreign_cpus=foreign, busy_cpus=2.0, timer_lag_ms_p95=lag,
                 timer_lag_ms_max=lag, sut_known=True)
    return _summary(run, _journal())


def test_a_gcs_that_went_down_again_after_recovering_fails(tmp_path):
    s = _gone_again(tmp_path, 3)
    assert s["verdict"] == "fail"
    assert s["recovery"]["gcs_flaps_after_recovery"] == 1
    assert "went down 1 time(s) again after it had recovered" in _check(
        s, "run", "run")["message"]


def test_a_gcs_refused_again_after_recovering_fails_however_busy_the_host(tmp_path):
    s = _gone_again(tmp_path, 30, host=(0.9, 1200.0))
    assert s["verdict"] == "fail" and s["recovery"]["gcs_flap_spans"][0]["refused"] is True
    assert "again after it had recovered" in _check(s, "run", "run")["message"]


def test_missed_deadlines_after_recovery_on_a_starved_harness_are_inconclusive(tmp_path):
    s = _gone_again(tmp_path, 30, refused=False, host=(0.9, 1200.0))
    run = _check(s, "run", "run")
    assert (s["verdict"], s["exit_code"], run["verdict"]) == ("inconclusive", 3, "inconclusive")
    assert "only by missed deadlines" in run["message"] and "host busy" in run["message"], run
    # the same silence on a quiet host is the GCS's
    (tmp_path / "quiet").mkdir()
    quiet = _gone_again(tmp_path / "quiet", 30, refused=False, host=(0.02, 3.0))
    assert quiet["verdict"] == "fail", _check(quiet, "run", "run")


def test_an_interrupted_run_is_an_error_whatever_else_happened(tmp_path):
    run = _run(tmp_path)
    _good_probes(run)
    try:
        s = summarize(load_experiment(EXP), run, None, "interrupted", [], "SIGTERM", None)
    finally:
        run.timeline.close()
    assert (s["verdict"], s["exit_code"]) == ("error", 2)
    assert _check(s, "run", "run")["message"].startswith("the run interrupted: SIGTERM")
