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


def _progress(run: Any, names: list[str], timeout_s: float, recent_s: float = 15.0
              ) -> dict[str, dict[str, Any]]:
    """For each load: did it complete work within ``recent_s`` (waiting up to ``timeout_s``)?"""
    from raychaos.results.store import read_timeline

    deadline = time.monotonic() + timeout_s
    out: dict[str, dict[str, Any]] = {}
    while True:
        now = run.clock.t()
        last: dict[str, float] = {}
        for r in read_timeline(run.timeline.path):
            if r.get("kind") == "load" and r.get("count", 0) > 0:
                name = str(r.get("load"))
                last[name] = max(last.get(name, 0.0), float(r["t"]))
        out = {n: {"last_progress_s_ago": round(now - last[n], 1) if n in last else None,
                   "progressing": n in last and now - last[n] <= recent_s} for n in names}
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
    # running load must also be making progress (a stats line with completions lately).
    progress = _progress(run, [n for n, s in states.items() if s == "RUNNING"], timeout_s)
    survived = [n for n, s in states.items() if s == "SUCCEEDED" or (
        s == "RUNNING" and progress.get(n, {}).get("progressing", True))]
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
