"""Node probes: false node deaths, and whether a drained node's capacity came back.

False node deaths: nodes the GCS marked DEAD while their raylet process was alive.

Users hit this in shuffles (ray#25231, ray#16945, ray#54035): a saturated or partitioned link
makes the GCS's health checks time out, the GCS declares the node dead, and a node whose raylet
was running fine loses every task and object on it (the raylet then exits by itself: "this node
manager has mistakenly been marked as dead"). The monitor checks, at the moment it sees a node ID
turn DEAD, whether that node's raylet process still runs (``node_dead`` events,
:mod:`raychaos.observe.signals`); this probe counts the ones that did. A raylet already gone
then, or one the check got no answer about (an exec that timed out on a loaded node), is false
too when it logged that line since the run began: the watch counts the lines at
once, and this probe counts them again (a restarting container's log may not be readable at
the moment of the death) against the watch's first read (the ``signals`` record
``marked_dead_baseline``). The SLO ``false_node_deaths == 0`` makes a blackout or a saturated
shuffle fail the run when the GCS's health-check settings (``target.local.health_check_*``) are
too eager.

Capacity restored (:func:`capacity_restored`): a drain with ``replace`` waits for the
replacement (the local supervisor's node, KubeRay's pod) as evidence; a replacement that never
became ALIVE (Ready, on Kubernetes) within the target's wait is the cluster's failure, judged
here, not the fault's: the drain landed when its node was DEAD.
"""

from __future__ import annotations

from typing import Annotated, Any

from raychaos.config.arguments import Range
from raychaos.config.rayflags import MARKED_DEAD_LINE
from raychaos.context import current
from raychaos.errors import ProbeFailed
from raychaos.results.store import Ev, read_timeline

__all__ = ["MARKED_DEAD_LINE", "capacity_restored", "false_node_deaths"]


def false_node_deaths(settle_s: Annotated[float, Range(0, 600)] = 2.0) -> dict[str, Any]:
    """Count nodes the GCS marked DEAD while their raylet was alive, so far in this run.

    :param settle_s: seconds to wait first, so the monitor sees a death that just happened.
    :returns: evidence: every death seen (node, ID, raylet alive or not), the false ones, and
        the raylets that logged they were wrongly marked dead.
    """
    run = current()
    run.wait(settle_s)
    records = read_timeline(run.timeline.path)
    deaths = [{"t": round(float(r["t"]), 3), "node": r.get("name"),
               **{k: (r.get("detail") or {}).get(k) for k in ("node_id", "raylet_alive",
                                                               "told_marked_dead")}}
              for r in records if r.get("kind") == "event" and r.get("event") == Ev.NODE_DEAD]
    nodes = sorted({str(d["node"]) for d in deaths} | {"head"})
    knew: dict[str, Any]
    try:
        knew = {n: c.get(MARKED_DEAD_LINE, 0)
                for n, c in run.target.ray_log_counts(nodes, [MARKED_DEAD_LINE]).items()}
    except Exception as exc:  # noqa: BLE001 - corroboration only
        knew = {"error": str(exc)[:200]}
    # the watch asked right after the death; a raylet that exited then may not have shown
    # its line yet (a restarting container's log, a status not caught up): asked again now,
    # a count above the watch's first read says it was alive when the GCS declared it dead
    before: dict[str, int] = next(
        (r["marked_dead_baseline"] for r in records if r.get("kind") == "signals"
         and isinstance(r.get("marked_dead_baseline"), dict)), {})
    for d in deaths:
        node = str(d["node"])
        if (d["raylet_alive"] is not True and not d.get("told_marked_dead") and node in before
                and isinstance(knew.get(node), int) and knew[node] > before[node]):
            d["told_marked_dead"] = True
            d["told_seen"] = (f"by this probe: {knew[node]} such lines now, "
                              f"{before[node]} when the watch began")
    # false: the raylet ran when the death was seen — or, gone or not asked in time (an exec
    # with no answer), it logged since the run began that the GCS marked it dead: it was alive
    # when the GCS declared it
    false = [d for d in deaths if d["raylet_alive"] is True or d.get("told_marked_dead")]
    unknown = [d for d in deaths if d["raylet_alive"] is None and not d.get("told_marked_dead")]
    evidence: dict[str, Any] = {
        "false_deaths": len(false), "deaths": len(deaths), "false": false,
        "raylet_not_alive": [d for d in deaths if d["raylet_alive"] is False
                             and not d.get("told_marked_dead")],
        "raylets_that_logged_it": {n: c for n, c in knew.items() if c}}
    if unknown:
        evidence["unobserved"] = [f"{d['node']} ({str(d['node_id'])[:12]})" for d in unknown]
    verdict = "fail" if false else "unknown" if unknown else "pass"
    run.record_probe("false_node_deaths", verdict, evidence)
    return evidence


#: each target's evidence of a drain's replacement: (came back, seconds, why not)
_REPLACEMENT_KEYS = {"local": ("replaced", "stop_to_replacement_s", "replacement_note"),
                     "kubernetes": ("replacements_ready", "drain_to_replacement_ready_s",
                                    "replacements_note")}


def capacity_restored() -> dict[str, Any]:
    """Judge whether every drained node of this run (``drain_gpu_nodes`` with ``replace``) got
    its replacement back within the target's wait: the GPU capacity a preemption takes must
    come back.

    :returns: evidence: per drain, the nodes, whether the replacement came, in how many seconds,
        and, when it did not, what was seen instead.
    """
    run = current()
    drains = [f for f in run.ledger.faults if f.get("fault") == "drain_gpu_nodes"
              and (f.get("args") or {}).get("replace", True) and f.get("evidence")]
    if not drains:
        raise ProbeFailed("capacity_restored: no drain with replace: true landed in this run "
                          "before the probe (put it after a drain_gpu_nodes action)")
    rows = []
    for f in drains:
        ev = f["evidence"]
        came, seconds, why = next(
            (keys for keys in _REPLACEMENT_KEYS.values() if keys[0] in ev),
            _REPLACEMENT_KEYS["local"])
        rows.append({"fault": f["id"], "nodes": ev.get("nodes") or ev.get("evicted"),
                     "replaced": ev.get(came) is True, "seconds": ev.get(seconds),
                     **({"why_not": ev.get(why)} if ev.get(came) is not True else {})})
    evidence: dict[str, Any] = {"drains": rows,
                                "not_replaced": [r["fault"] for r in rows if not r["replaced"]]}
    run.record_probe("capacity_restored", "fail" if evidence["not_replaced"] else "pass",
                     evidence)
    return evidence
