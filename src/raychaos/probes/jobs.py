"""Job probes: do the load jobs submitted before the fault survive it?

Drivers run on workers (``entrypoint_resources``): a driver on the head dies with it, and the
probe would then measure driver placement instead of the cluster's resilience.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from raychaos.catalog import loads_dir
from raychaos.config.arguments import Range
from raychaos.context import current
from raychaos.targets.base import Target

__all__ = ["job_survival", "run_job"]
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED", "MISSING"}
SURVIVED = {"RUNNING", "SUCCEEDED"}


def run_job(target: Target, entrypoint: str, timeout: float = 120.0,
            until: str | None = None) -> tuple[str, list[str]]:
    """Submit a short job from ``loads/`` and wait for it to end: (final status, log lines).

    The driver's last lines can reach its log a moment after the job reads as ended: with
    ``until`` (a marker the job prints), reading goes on briefly until a line carries it."""
    deadline = time.monotonic() + timeout
    while True:  # right after a head restart the Jobs API may not answer yet
        try:
            job_id = target.submit_job(entrypoint, working_dir=str(loads_dir()))
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
    lines: list[str] = []
    status = "PENDING"
    while time.monotonic() < deadline:
        status = target.job_status(job_id)
        lines += target.job_log_lines(job_id)
        if status in TERMINAL:
            break
        time.sleep(0.5)
    else:
        target.stop_job(job_id)
        status = "TIMEOUT"
    lines += target.job_log_lines(job_id)
    settle = time.monotonic() + 2.0
    while until and not any(until in line for line in lines) and time.monotonic() < settle:
        time.sleep(0.1)
        lines += target.job_log_lines(job_id)
    return status, lines


def since_fault(records: list[dict[str, Any]]) -> float | None:
    """From when a load must show progress to count as alive: the end of the last fault's
    effect (a kill: when the head was back) or, for a fault still applied (a throttle, a
    drain), the moment it landed. None: no fault landed."""
    from raychaos.results.store import Ev

    marks = [float(r["t"]) for r in records if r.get("kind") == "event"
             and r.get("event") in (Ev.FAULT_END, Ev.FAULT_APPLIED)]
    return max(marks) if marks else None


def _progress(run: Any, names: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    """For each load: did it complete work in a whole second that began after the fault
    (:func:`since_fault`)? Waits up to ``timeout_s``. A line from before the fault — read late
    from the driver log, or the last one a dead driver wrote — is no proof of life."""
    from raychaos.results.store import read_timeline

    deadline = time.monotonic() + timeout_s
    out: dict[str, dict[str, Any]] = {}
    while True:
        records = read_timeline(run.timeline.path)
        since = since_fault(records)
        now = run.clock.t()
        last: dict[str, float] = {}
        for r in records:
            # a stats line's t ends its second: the whole second must lie after the fault
            if r.get("kind") == "load" and r.get("count", 0) > 0 and (
                    since is None or float(r["t"]) - 1.0 >= since):
                name = str(r.get("load"))
                last[name] = max(last.get(name, float("-inf")), float(r["t"]))
        out = {n: {"last_progress_s_ago": round(now - last[n], 1) if n in last else None,
                   "progress_since_s": None if since is None else round(since, 3),
                   "progressing": n in last} for n in names}
        if all(v["progressing"] for v in out.values()) or time.monotonic() > deadline:
            return out
        run.timeline.wait(1.0)  # the next record (a load's stats line) may be the one


def job_survival(timeout_s: Annotated[float, Range(0, 3600)] = 90.0) -> dict[str, Any]:
    """Every load job submitted before the fault is RUNNING or SUCCEEDED now.

    :param timeout_s: how long to wait for the Jobs API to answer for every job (the dashboard
        comes back a little after the GCS).
    :returns: evidence: status per job, survivors, ratio.
    """
    run = current()
    jobs = dict(run.jobs)
    deadline = time.monotonic() + timeout_s
    states: dict[str, str] = {}
    while True:
        states = {name: _status(run.target, job_id) for name, job_id in jobs.items()}
        if all(s not in ("UNKNOWN", "PENDING") for s in states.values()) or \
                time.monotonic() > deadline:
            break
        time.sleep(1.0)
    # RUNNING is not enough: a job whose driver's node died can read RUNNING for a while. A
    # running load must also have made progress after the fault (completions in a second
    # that began after it).
    progress = _progress(run, [n for n, s in states.items() if s == "RUNNING"], timeout_s)
    survived = [n for n, s in states.items() if s == "SUCCEEDED" or (
        s == "RUNNING" and progress.get(n, {}).get("progressing", False))]
    evidence = {"jobs": {n: {"job_id": jobs[n], "status": s, **progress.get(n, {})}
                         for n, s in states.items()},
                "survived": len(survived), "total": len(jobs),
                "ratio": len(survived) / len(jobs) if jobs else None,
                "lost": sorted(set(jobs) - set(survived))}
    unseen = sorted(n for n, s in states.items() if s == "UNKNOWN")
    if unseen:  # not observed is not lost, and certainly not survived: say so
        evidence["unobserved"] = unseen
        evidence["lost"] = sorted(set(jobs) - set(survived) - set(unseen))
    verdict = ("n/a" if not jobs else "unknown" if unseen
               else "pass" if len(survived) == len(jobs) else "fail")
    run.record_probe("job_survival", verdict, evidence)
    return evidence


def _status(target: Any, job_id: str) -> str:
    try:
        return str(target.job_status(job_id))
    except Exception:  # the Jobs API did not answer: that is UNKNOWN, not a crash
        return "UNKNOWN"
