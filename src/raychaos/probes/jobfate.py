"""The fate of a job read three ways, and compared: ``job_status_consistent``.

Why: after a head failover the readings of one job's fate disagree in the field — a RayJob
stuck ``Running`` after its submitter completed (kuberay#3903), jobs marked ``FAILED`` after a
GCS failover although their drivers finished (ray#65025, ray#65608). A platform team acts on the
RayJob's status (retries, alerts, the next pipeline step), so a disagreement is a failure of the
system even when the work itself survived. The three readings:

- ``rayjob``: the RayJob's ``jobStatus``/``jobDeploymentStatus``/``reason`` (``Target.owner``;
  absent when the target is not a RayJob — then the run's load jobs are judged on the other two);
- ``jobs_api``: Ray's Jobs API for the same job;
- ``driver``: the driver's own progress — its ``RAYCHAOS_PROGRESS`` lines (``done: true`` after
  its last step, see ``loads/train_steps.py``), or any output, fresh within ``stall_s``; for a
  load job, its stats lines on the timeline.

Each reading is a fate: ``pending``, ``running``, ``succeeded``, ``failed``, ``stopped``,
``silent`` (a driver that stopped reporting) or ``unknown`` (could not be read). The probe
polls until they agree — a job that just finished may be read ``running`` by one for a moment —
or ``timeout_s`` passes. How KubeRay's submission mode changes the RayJob's own reading is the
experiment's to state (``expect_rayjob``: that reading is then judged against the expectation
alone). Against KubeRay v1.5.0: in ``K8sJobMode`` (its default) a head container that restarts
fails the submitter's pod, whose retry follows the same job, so the RayJob keeps reading the
job (``same``); in ``SidecarMode`` a head pod that is gone fails the RayJob (``failed``).
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any, Literal

from raychaos.config.arguments import Range
from raychaos.context import current

__all__ = ["api_fate", "driver_fate", "job_status_consistent", "judge", "rayjob_fate"]

PROGRESS = "RAYCHAOS_PROGRESS "
Fate = Literal["pending", "running", "succeeded", "failed", "stopped", "any"]
_TERMINAL = {"succeeded", "failed", "stopped"}


def rayjob_fate(owner: dict[str, Any]) -> str:
    """A RayJob's fate from its status, as KubeRay writes it."""
    if owner.get("error"):
        return "unknown"
    deploy, status = owner.get("job_deployment_status", ""), owner.get("job_status", "")
    if deploy == "Failed":
        return "failed"
    return api_fate(status) if status else "pending"


def api_fate(status: str) -> str:
    return {"PENDING": "pending", "RUNNING": "running", "SUCCEEDED": "succeeded",
            "FAILED": "failed", "STOPPED": "stopped", "MISSING": "unknown"}.get(status,
                                                                               "unknown")


def driver_fate(lines: list[str], last_output_wall: float | None, now_wall: float,
                stall_s: float) -> tuple[str, dict[str, Any]]:
    """The driver's own account: done (its last progress line says so), still reporting, or
    silent; and the last progress it printed."""
    last: dict[str, Any] = {}
    for line in lines:
        at = line.find(PROGRESS)
        if at >= 0:
            try:
                last = dict(json.loads(line[at + len(PROGRESS):]))
            except ValueError:
                continue
    if last.get("done"):
        return "succeeded", last
    seen = float(last["ts"]) if isinstance(last.get("ts"), int | float) else last_output_wall
    if seen is None:
        return "unknown", last
    return ("running" if now_wall - seen <= stall_s else "silent"), last


def judge(readings: dict[str, str], expect: str, expect_rayjob: str
          ) -> tuple[str, list[str]]:
    """The verdict over one job's readings and why: ``pass``, ``fail`` or ``unknown``."""
    why: list[str] = []
    compared = {k: v for k, v in readings.items() if not (k == "rayjob" and
                                                           expect_rayjob != "same")}
    if "rayjob" in readings and expect_rayjob != "same" and readings["rayjob"] != expect_rayjob:
        why.append(f"the RayJob reads {readings['rayjob']!r}, expected {expect_rayjob!r}")
    if any(v == "unknown" for v in compared.values()):
        return "unknown", [f"{k} could not be read" for k, v in compared.items()
                           if v == "unknown"]
    others = {v for k, v in compared.items() if k != "driver"}
    if compared.get("driver") == "silent" and others and others <= _TERMINAL:
        compared.pop("driver")  # a driver that exited is silent: no disagreement with an end
    fates = set(compared.values())
    if len(fates) > 1:
        why.append("the readings disagree: " + ", ".join(f"{k} {v}"
                                                         for k, v in compared.items()))
    elif expect != "any" and fates and fates != {expect}:
        why.append(f"the job is {fates.pop()!r}, expected {expect!r}")
    return ("fail" if why else "pass"), why


def job_status_consistent(
        expect: Fate = "any", expect_rayjob: Literal["same", "running", "succeeded", "failed",
                                                     "stopped"] = "same",
        timeout_s: Annotated[float, Range(0, 3600)] = 60.0,
        stall_s: Annotated[float, Range(1, 3600)] = 15.0) -> dict[str, Any]:
    """The job's fate reads the same from the RayJob, the Jobs API and the driver itself.

    :param expect: the fate the job should have (``any``: only agreement is judged).
    :param expect_rayjob: ``same``: the RayJob must agree with the others; else the fate the
        RayJob should read (K8sJobMode after a head loss: ``failed``), judged on its own.
    :param timeout_s: how long to wait for the readings to agree (and the dashboard to answer).
    :param stall_s: a driver with no output for this long is ``silent``.
    :returns: evidence: each reading per job, the driver's last progress, the reasons.
    """
    run = current()
    target = run.target
    owner = target.owner()
    if owner.get("job_id"):
        jobs = {f"{owner.get('kind')}/{owner.get('name')}": str(owner["job_id"])}
    else:
        jobs = dict(run.jobs)
    lines: dict[str, list[str]] = {j: [] for j in jobs.values()}
    last_out: dict[str, float | None] = {j: None for j in jobs.values()}
    deadline = time.monotonic() + timeout_s
    while True:
        evidence: dict[str, Any] = {"jobs": {}, "expect": expect,
                                    "expect_rayjob": expect_rayjob}
        verdicts: list[str] = []
        for name, job_id in jobs.items():
            readings: dict[str, str] = {}
            if owner.get("job_id"):
                owner = target.owner()
                readings["rayjob"] = rayjob_fate(owner)
            readings["jobs_api"] = api_fate(_status(target, job_id))
            progress = _driver(run, name, job_id, lines, last_out, owner)
            fate, last = driver_fate(lines[job_id], progress, time.time(), stall_s)
            readings["driver"] = fate
            verdict, why = judge(readings, expect, expect_rayjob)
            verdicts.append(verdict)
            evidence["jobs"][name] = {"job_id": job_id, "readings": readings,
                                      "last_progress": last, "verdict": verdict, "why": why,
                                      **({"rayjob": {k: owner.get(k) for k in (
                                          "job_status", "job_deployment_status", "reason",
                                          "submission_mode", "cluster")}}
                                         if "rayjob" in readings else {})}
        done = all(v == "pass" for v in verdicts)
        if done or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    verdict = ("n/a" if not jobs else "fail" if "fail" in verdicts
               else "unknown" if "unknown" in verdicts else "pass")
    if verdict == "unknown":
        evidence["unobserved"] = sorted(n for n, e in evidence["jobs"].items()
                                        if e["verdict"] == "unknown")
    evidence["disagreeing"] = sorted(n for n, e in evidence["jobs"].items()
                                     if e["verdict"] == "fail")
    run.record_probe("job_status_consistent", verdict, evidence)
    return evidence


def _status(target: Any, job_id: str) -> str:
    try:
        return str(target.job_status(job_id))
    except Exception:  # noqa: BLE001 - the Jobs API did not answer: that is UNKNOWN
        return "UNKNOWN"


def _driver(run: Any, name: str, job_id: str, lines: dict[str, list[str]],
            last_out: dict[str, float | None], owner: dict[str, Any]) -> float | None:
    """When the driver last said something (wall clock). The RayJob's driver log is read here
    (nothing else reads it); a load's stats lines are the monitor's, on the timeline."""
    if owner.get("job_id"):
        try:
            fresh = run.target.job_log_lines(job_id)
        except Exception:  # noqa: BLE001 - an unreachable dashboard: nothing new
            fresh = []
        if fresh:
            lines[job_id] += fresh
            last_out[job_id] = time.time()
        return last_out[job_id]
    from raychaos.results.store import read_timeline

    last = [float(r["t"]) for r in read_timeline(run.timeline.path)
            if r.get("kind") == "load" and r.get("load") == name and r.get("count", 0) > 0]
    return time.time() - (run.clock.t() - max(last)) if last else None
