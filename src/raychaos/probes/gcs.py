"""GCS probes: is the GCS healthy, and how long did it take to recover from a head kill?

Recovery is read from the monitor's timeline, not from an ad-hoc timer: the start of the first
stretch of at least 5 s in which every sample found the GCS answering (a GCS that answers once
and then goes away again has not recovered; the first answer and the flaps are reported too), and
the first sample in which every worker that was alive before the fault (same node IDs: not
replaced) was ALIVE again and had re-registered — its raylet reported to the new GCS
incarnation (``reregistration: measured``). Where the target cannot tell which raylets reported
to the new GCS (``reregistration: unknown``: the Kubernetes target reads only the restored node
table, which lists the old workers ALIVE at once), and where the list of workers alive before
the kill is missing, the probe could not observe re-registration: ``nodes_recovery_s`` is None,
its verdict ``unknown`` (the run errors), never a vacuous pass — unless workers are visibly
lost (not ALIVE): that is a ``fail`` whatever else could not be seen.

The probe waits up to ``timeout_s`` for both figures, and no longer than it takes the outcome
to settle: once every worker of before the kill is back or gone for good (DEAD, or unknown to
the GCS incarnation that came back — a GCS without fault tolerance; see
:func:`raychaos.observe.recovery.recovery_figures`), with one gone, it is a fail at once
(``workers_gone`` says which and why). A control run without GCS FT thus ends when the GCS is
back, not a timeout later.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from raychaos.config.arguments import Range
from raychaos.context import current
from raychaos.errors import ProbeFailed
from raychaos.observe.recovery import STABLE_S, recovery_figures
from raychaos.results.store import read_timeline

__all__ = ["gcs_healthy", "gcs_recovery"]

def gcs_healthy(timeout_s: Annotated[float, Range(0, 3600)] = 30.0) -> bool:
    """True when the GCS answers within ``timeout_s`` (retrying), else False.

    :param timeout_s: how long to keep asking.
    """
    run = current()
    deadline = time.monotonic() + timeout_s
    while True:
        if run.target.gcs_alive(timeout=1.0):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)


def gcs_recovery(timeout_s: Annotated[float, Range(0, 3600)] = 180.0,
                 stable_s: Annotated[float, Range(0.2, 600)] = STABLE_S) -> dict[str, Any]:
    """Seconds from the last head/GCS kill to a healthy GCS and to all workers back.

    :param timeout_s: how long to wait for full recovery before judging.
    :param stable_s: how long the GCS must answer without a miss to count as recovered.
    :returns: evidence: ``gcs_recovery_s``, ``nodes_recovery_s``, worker IDs before/after,
        head identities, the sampling interval (the resolution of both figures).
    """
    run = current()
    kills = run.extras.get("kills") or []
    if not kills:
        raise ProbeFailed("gcs_recovery: no head or GCS kill happened in this run before the "
                          "probe (put it after a kill_head action in the method)")
    kill = kills[-1]
    known_before = kill.get("workers_before")
    workers_before = set(known_before or [])
    # wait on the timeline (the monitor's samples) until both figures exist: the GCS answering
    # for STABLE_S without a miss, and every worker of before the kill ALIVE again
    deadline = time.monotonic() + timeout_s
    while True:
        records = read_timeline(run.timeline.path)
        figures = recovery_figures(records, stable_s)
        done = figures["gcs_recovery_s"] is not None and figures["nodes_recovery_s"] is not None
        # every worker back or gone for good, some gone: a fail that waiting cannot change
        settled = figures["nodes_settled_s"] is not None
        blind = figures["gcs_recovery_s"] is not None and (
            figures["workers_before_unknown"] or figures["reregistration"] == "unknown"
            and figures["nodes_alive_s"] is not None)  # all that can be seen, seen
        if done or settled or blind or time.monotonic() > deadline:
            break
        run.timeline.wait(0.5)  # the monitor's next sample
    # the workers of the last answer since the kill (the very last sample may be a late one
    # from a busy GCS, or one without the node table: neither says anything about them)
    last: dict[str, Any] = next((r for r in reversed(records) if r.get("kind") == "sample"
                                 and "alive_ids" in r and r["t"] >= kill["t"]), {})
    workers_after = set(last.get("alive_ids") or [])
    evidence = {
        "mode": kill.get("mode"), "killed_at": kill.get("killed_at"),
        **{k: figures[k] for k in ("gcs_recovery_s", "gcs_first_answer_s", "nodes_recovery_s",
                                   "nodes_alive_s", "gcs_down_s", "gpus_back_s")},
        "gcs_flaps_after_first_answer": figures["gcs_flaps"],
        "reregistration": figures["reregistration"],
        "reregistered_s": figures["reregistered_s"],
        "gcs_down_samples": sum(1 for r in records if r.get("kind") == "sample"
                                and r["t"] >= kill["t"] and not r.get("gcs_up")),
        "sample_interval_s": run.settings.monitor.interval_s, "stable_s": stable_s,
        "workers_before": None if known_before is None else sorted(workers_before),
        "workers_after": sorted(workers_after),
        "workers_lost": sorted(workers_before - workers_after),
        "workers_gone": figures["workers_gone"], "nodes_settled_s": figures["nodes_settled_s"],
        "workers_not_reregistered": (sorted(workers_before - set(figures["reregistered_s"]))
                                     if figures["reregistration"] == "measured" else None),
        "old_head": kill.get("old"),
        "new_head": run.target.head_identity(),
    }
    evidence["head_replaced"] = (evidence["new_head"].get("pid") != (kill.get("old") or {}).get(
        "pid")) if evidence["new_head"].get("pid") else None
    # back, then gone by the end (the restored table's ALIVE until the GCS's health checks
    # said otherwise, or a worker that came back and died): lost is lost
    done = done and not evidence["workers_lost"]
    evidence["recovered"] = done
    verdict = "pass" if done else "fail"
    unobserved = []
    if known_before is None:
        unobserved.append("the workers alive before the kill (the GCS did not answer)")
    elif figures["reregistration"] == "unknown" and figures["gcs_recovery_s"] is not None:
        unobserved.append(f"which workers re-registered with the new GCS (the "
                          f"{run.target.kind} target cannot tell; its node table lists them "
                          f"ALIVE from before the kill)")
    if unobserved:
        # what could not be seen is not a pass; workers visibly lost are a fail all the same
        evidence["unobserved"] = unobserved
        evidence["unobserved_keys"] = ["nodes_recovery_s"]
        seen_lost = bool(evidence["workers_lost"]) or figures["nodes_alive_s"] is None
        verdict = "unknown" if figures["gcs_recovery_s"] is not None and not (
            known_before is not None and seen_lost) else "fail"
    run.record_probe("gcs_recovery", verdict, evidence)
    return evidence
