"""The sentinel actor: a detached actor created before the fault and checked after it.

Its PID, node and counter surviving a head kill prove that the GCS kept its actor table (GCS
fault tolerance); a lost or restarted sentinel says exactly what a real detached actor (a Serve
controller, a parameter server) would have lost.

One long-lived driver (``sentinel.py watch``, started with the loads) creates the actor and then
looks it up by name through the GCS every second, printing its state with a sequence number; the
probe reads the first answer from a lookup that began after it started from that driver's log —
no new job per check.
When the watcher has no fresh answer that shows the sentinel preserved (its driver died with
the fault, or it says the actor is gone), a one-off ``sentinel.py check`` job gives the answer,
as before: a negative verdict always rests on a fresh driver's lookup.
"""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

from raychaos.catalog import loads_dir
from raychaos.config.arguments import Range
from raychaos.context import current
from raychaos.errors import ProbeFailed
from raychaos.probes.jobs import TERMINAL, run_job
from raychaos.targets.base import Target

__all__ = ["await_sentinel", "create_sentinel", "sentinel_preserved", "start_sentinel"]

PREFIX = "RAYCHAOS_SENTINEL "
FRESH_WAIT_S = 15.0  # how long the probe waits for the watcher's next answer


def _states(lines: list[str]) -> list[dict[str, Any]]:
    out = []
    for line in lines:
        if PREFIX in line:
            try:
                state = json.loads(line.split(PREFIX, 1)[1])
            except ValueError:
                continue
            if isinstance(state, dict):
                out.append(state)
    return out


def _state(lines: list[str]) -> dict[str, Any] | None:
    states = _states(lines)
    return states[-1] if states else None


def create_sentinel(target: Target, timeout: float = 120.0) -> dict[str, Any]:
    """Create the sentinel with a one-off job and return its state (no watcher)."""
    status, lines = run_job(target, "python sentinel.py create", timeout, until=PREFIX)
    state = _state(lines)
    if status != "SUCCEEDED" or not state or not state.get("reachable"):
        raise ProbeFailed(f"could not create the sentinel actor (job {status}); "
                          f"last output: {lines[-3:] if lines else 'none'}")
    return state


def start_sentinel(target: Target) -> dict[str, Any]:
    """Submit the watcher job; returns the watch record the probe reads (``job_id``, lines)."""
    job_id = target.submit_job("python sentinel.py watch", working_dir=str(loads_dir()))
    return {"job_id": job_id, "states": []}


def _read(target: Target, watch: dict[str, Any]) -> list[dict[str, Any]]:
    new = _states(target.job_log_lines(watch["job_id"]))
    watch["states"] = (watch["states"] + new)[-50:]
    return new


def await_sentinel(target: Target, watch: dict[str, Any], timeout: float = 120.0
                   ) -> dict[str, Any]:
    """The sentinel's state once the watcher created it; ProbeFailed when it does not."""
    deadline = time.monotonic() + timeout
    next_status = 0.0
    status = "PENDING"
    while time.monotonic() < deadline:
        for state in _read(target, watch):
            if state.get("reachable"):
                return {k: v for k, v in state.items() if k not in ("ts", "check")}
        if time.monotonic() >= next_status:  # a job that ended will never answer
            status = target.job_status(watch["job_id"])
            if status in TERMINAL:
                _read(target, watch)
                break
            next_status = time.monotonic() + 1.0
        time.sleep(0.2)
    last = watch["states"][-1] if watch["states"] else None
    raise ProbeFailed(f"could not create the sentinel actor (watcher job {status}); "
                      f"last answer: {last or 'none'}")


def _matches(before: dict[str, Any], after: dict[str, Any]) -> bool:
    return bool(after.get("found") and after.get("reachable")
                and after.get("pid") == before.get("pid")
                and after.get("count") == before.get("count"))


def _from_watcher(target: Target, watch: dict[str, Any], before: dict[str, Any],
                  wait_s: float) -> dict[str, Any] | None:
    """The watcher's first answer showing the sentinel preserved from a lookup that began after
    this call (two checks on from the last one already printed: no clock is compared), or
    None."""
    _read(target, watch)
    seen = max((int(s.get("check") or 0) for s in watch["states"]), default=0)
    deadline = time.monotonic() + wait_s
    next_status = time.monotonic() + 1.0
    while True:
        for state in _read(target, watch):
            if int(state.get("check") or 0) >= seen + 2 and _matches(before, state):
                return state
        if time.monotonic() >= deadline:
            return None
        if time.monotonic() >= next_status:
            if target.job_status(watch["job_id"]) in TERMINAL:
                return None  # the watcher's driver did not survive: ask with a new job
            next_status = time.monotonic() + 1.0
        time.sleep(0.2)


def sentinel_preserved(timeout_s: Annotated[float, Range(0, 3600)] = 120.0) -> dict[str, Any]:
    """The detached sentinel actor is reachable with the same PID, node and counter.

    :param timeout_s: how long the check may take (the watcher's answer, else a check job).
    :returns: evidence: before/after state, what was preserved, and who asked (``watcher``:
        the long-lived driver's lookup after the probe started; ``job``: a new driver).
    """
    run = current()
    before = run.extras.get("sentinel")
    if not before:
        note = {"note": "no sentinel was created (extensions.raychaos.sentinel is false)"}
        run.record_probe("sentinel_preserved", "n/a", note)
        return note
    watch = run.extras.get("sentinel_watch")
    after = None
    if watch:
        after = _from_watcher(run.target, watch, before, min(timeout_s, FRESH_WAIT_S))
    checked_by = "watcher"
    if after is None:
        checked_by = "job"
        status, lines = run_job(run.target, "python sentinel.py check", timeout_s, until=PREFIX)
        after = _state(lines) or {"found": False, "job_status": status}
    evidence: dict[str, Any] = {
        "before": before, "after": after, "checked_by": checked_by,
        "found": bool(after.get("found")), "reachable": bool(after.get("reachable")),
        "same_pid": after.get("pid") == before.get("pid"),
        "same_node": after.get("node_id") == before.get("node_id"),
        "state_preserved": after.get("count") == before.get("count"),
    }
    if watch and checked_by == "job":
        evidence["watcher_last"] = watch["states"][-1] if watch["states"] else None
    evidence["preserved"] = all(evidence[k] for k in ("found", "reachable", "same_pid",
                                                      "state_preserved"))
    run.record_probe("sentinel_preserved", "pass" if evidence["preserved"] else "fail", evidence)
    return evidence
