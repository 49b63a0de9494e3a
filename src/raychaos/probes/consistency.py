"""Post-failover consistency: nothing leaked, nothing forgotten.

- :func:`resources_restored` — once the loads stop, every node's available CPU, GPU, memory,
  custom resources and placement-group bundle resources equal its totals again. A lease the GCS
  lost track of across a failover keeps a GPU "in use" forever (ray#66199); it shows here as a
  node whose GPU never comes back, named with the amount.
- :func:`job_history_preserved` — the jobs the GCS knew before the fault (captured when the run
  started) are still in its job table after it (ray#44218): a GCS restarted without persistence
  forgets them all, which is this probe's negative control.

Both read the target's GCS view (``node_resources``, ``job_history``); what a target cannot see
is reported as not observed, never as a pass.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from raychaos.config.arguments import Range
from raychaos.context import current
from raychaos.targets.base import NodeInfo, Target

__all__ = ["job_history_preserved", "resources_restored", "snapshot_job_history"]

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED", "MISSING")
IGNORED = ("object_store_memory",)  # objects a driver still holds are not a leaked lease


def _leaks(nodes: list[NodeInfo]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for node in nodes:
        short = {k: round(total - (node.available or {}).get(k, 0.0), 4)
                 for k, total in node.resources.items()
                 if k not in IGNORED and not k.startswith("node:")
                 and (node.available or {}).get(k, 0.0) < total - 1e-6}
        if short:
            out[node.name] = short
    return out


def resources_restored(timeout_s: Annotated[float, Range(0, 3600)] = 60.0,
                       stop_loads: bool = True) -> dict[str, Any]:
    """Every ALIVE node's available resources equal its totals again, once the loads stop.

    :param timeout_s: how long to wait for every resource to be released.
    :param stop_loads: stop the run's load jobs first (what holds resources on purpose); put
        this probe last in the method, after the probes that need the loads.
    :returns: evidence: what is still held, per node and resource (the leak), the placement-group
        bundle resources still defined, seconds waited.
    """
    run = current()
    stopped = []
    if stop_loads:
        for name, job_id in run.jobs.items():
            run.target.stop_job(job_id)
            stopped.append(name)
        end = time.monotonic() + 30
        while time.monotonic() < end and any(
                run.target.job_status(j) not in TERMINAL for j in run.jobs.values()):
            run.wait(0.5)
    t0 = time.monotonic()
    nodes: list[NodeInfo] = []
    leaks: dict[str, dict[str, float]] = {}
    error = None
    while True:
        try:
            nodes = run.target.node_resources(timeout=5.0)
            leaks, error = _leaks(nodes), None
        except Exception as exc:  # noqa: BLE001 - the GCS busy: ask again until the deadline
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
        unseen = [n.name for n in nodes if n.available is None]
        if (nodes and not leaks and not unseen) or time.monotonic() - t0 > timeout_s:
            break
        run.wait(1.0)
    bundles = sorted({k for n in nodes for k in n.resources if "_group_" in k})
    evidence: dict[str, Any] = {
        "restored": bool(nodes) and not leaks and not unseen, "held": leaks,
        "nodes": len(nodes), "waited_s": round(time.monotonic() - t0, 2),
        "loads_stopped": stopped, "placement_group_resources": bundles}
    if unseen or not nodes:
        evidence["unobserved"] = unseen or [error or "the node table"]
    verdict = "unknown" if "unobserved" in evidence else "pass" if evidence["restored"] \
        else "fail"
    run.record_probe("resources_restored", verdict, evidence)
    return evidence


def snapshot_job_history(target: Target) -> dict[str, Any]:
    """What the GCS's job table holds now (the session takes it before the first fault)."""
    try:
        return {"jobs": target.job_history(timeout=5.0), "ts": time.time()}
    except Exception as exc:  # noqa: BLE001 - said in the probe's evidence
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}


def job_history_preserved(timeout_s: Annotated[float, Range(0, 3600)] = 60.0
                          ) -> dict[str, Any]:
    """Every job the GCS knew before the fault is still in its job table.

    :param timeout_s: how long to wait for the GCS to answer.
    :returns: evidence: jobs before and after, the ones lost (ID and submission ID).
    """
    run = current()
    before = run.extras.get("job_history_before") or {}
    deadline = time.monotonic() + timeout_s
    after: list[dict[str, Any]] | None = None
    error = None
    while after is None:
        try:
            after = run.target.job_history(timeout=5.0)
        except Exception as exc:  # noqa: BLE001 - the GCS coming back: ask again
            error = f"{type(exc).__name__}: {str(exc)[:200]}"
            if time.monotonic() > deadline:
                break
            run.wait(1.0)
    evidence: dict[str, Any] = {"before": len(before.get("jobs") or []),
                                "after": None if after is None else len(after)}
    if "jobs" not in before or after is None:
        evidence["unobserved"] = before.get("error") or error or "no job table before the fault"
        run.record_probe("job_history_preserved", "unknown", evidence)
        return evidence
    now = {j["job_id"] for j in after}
    lost = [j for j in before["jobs"] if j["job_id"] not in now]
    evidence.update(lost=[{"job_id": j["job_id"], "submission_id": j.get("submission_id")}
                          for j in lost], preserved=not lost)
    run.record_probe("job_history_preserved", "fail" if lost else "pass", evidence)
    return evidence
