"""The sentinel actor: a detached actor created before the fault and checked after it.

Its PID, node and counter surviving a head kill prove that the GCS kept its actor table (GCS
fault tolerance); a lost or restarted sentinel says exactly what a real detached actor (a Serve
controller, a parameter server) would have lost.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from raychaos.config.arguments import Range
from raychaos.context import current
from raychaos.errors import ProbeFailed
from raychaos.probes.jobs import run_job
from raychaos.targets.base import Target

__all__ = ["create_sentinel", "sentinel_preserved"]

PREFIX = "RAYCHAOS_SENTINEL "


def _state(lines: list[str]) -> dict[str, Any] | None:
    for line in reversed(lines):
        if PREFIX in line:
            try:
                state: dict[str, Any] = json.loads(line.split(PREFIX, 1)[1])
                return state
            except ValueError:
                return None
    return None


def create_sentinel(target: Target, timeout: float = 120.0) -> dict[str, Any]:
    status, lines = run_job(target, "python sentinel.py create", timeout)
    state = _state(lines)
    if status != "SUCCEEDED" or not state or not state.get("reachable"):
        raise ProbeFailed(f"could not create the sentinel actor (job {status}); "
                          f"last output: {lines[-3:] if lines else 'none'}")
    return state


def sentinel_preserved(timeout_s: Annotated[float, Range(0, 3600)] = 120.0) -> dict[str, Any]:
    """The detached sentinel actor is reachable with the same PID, node and counter.

    :param timeout_s: how long the check job may take.
    :returns: evidence: before/after state and what was preserved.
    """
    run = current()
    before = run.extras.get("sentinel")
    if not before:
        note = {"note": "no sentinel was created (extensions.raychaos.sentinel is false)"}
        run.record_probe("sentinel_preserved", "n/a", note)
        return note
    status, lines = run_job(run.target, "python sentinel.py check", timeout_s)
    after = _state(lines) or {"found": False, "job_status": status}
    evidence: dict[str, Any] = {
        "before": before, "after": after,
        "found": bool(after.get("found")), "reachable": bool(after.get("reachable")),
        "same_pid": after.get("pid") == before.get("pid"),
        "same_node": after.get("node_id") == before.get("node_id"),
        "state_preserved": after.get("count") == before.get("count"),
    }
    evidence["preserved"] = all(evidence[k] for k in ("found", "reachable", "same_pid",
                                                      "state_preserved"))
    run.record_probe("sentinel_preserved", "pass" if evidence["preserved"] else "fail", evidence)
    return evidence
