"""GCS probes: is the GCS healthy, and how long did it take to recover from a head kill?

Recovery is read from the monitor's timeline, not from an ad-hoc timer: the start of the first
stretch of at least 5 s in which every sample found the GCS answering (a GCS that answers once
and then goes away again has not recovered; the first answer and the flaps are reported too), and
the first sample in which every worker that was alive before the fault (same node IDs:
re-registered, not replaced) was ALIVE again.
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.errors import ProbeFailed
from raychaos.results import read_timeline
from raychaos.runtime import current

__all__ = ["gcs_healthy", "gcs_recovery"]

STABLE_S = 5.0  # recovered = answering for this long without a miss


def _stable_since(samples: list[dict[str, Any]], hold: float) -> float | None:
    """Start of the first run of up-samples lasting ``hold`` seconds (or to the end)."""
    start = None
    for r in samples:
        if r.get("gcs_up"):
            start = r["t"] if start is None else start
            if r["t"] - start >= hold:
                return start
        else:
            start = None
    return start


def _flaps(samples: list[dict[str, Any]], since: float | None) -> int:
    """Up→down transitions after the first answer: a GCS that answers, then goes away again."""
    if since is None:
        return 0
    ups = [r.get("gcs_up") for r in samples if r["t"] >= since]
    return sum(1 for a, b in zip(ups, ups[1:]) if a and not b)


def gcs_healthy(timeout_s: float = 30.0) -> bool:
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


def gcs_recovery(timeout_s: float = 180.0) -> dict[str, Any]:
    """Seconds from the last head/GCS kill to a healthy GCS and to all workers back.

    :param timeout_s: how long to wait for full recovery before judging.
    :returns: evidence: ``gcs_recovery_s``, ``nodes_recovery_s``, worker IDs before/after,
        head identities, the sampling interval (the resolution of both figures).
    """
    run = current()
    kills = run.extras.get("kills") or []
    if not kills:
        raise ProbeFailed("gcs_recovery: no head or GCS kill happened in this run before the "
                          "probe (put it after a kill_head action in the method)")
    kill = kills[-1]
    workers_before = set(kill.get("workers_before") or [])
    deadline = time.monotonic() + timeout_s
    workers_after: set[str] = set()
    while time.monotonic() < deadline:
        if run.target.gcs_alive(timeout=1.0):
            try:
                workers_after = {n.node_id[:12] for n in run.target.nodes(timeout=2.0)
                                 if n.state == "ALIVE" and not n.is_head}
            except Exception:
                workers_after = set()
            if workers_before <= workers_after:
                break
        time.sleep(0.5)
    time.sleep(2 * run.settings.monitor.interval_s)  # the monitor's sample of the same moment
    t_kill = kill["t"]
    samples = [r for r in read_timeline(run.timeline.path)
               if r.get("kind") == "sample" and r["t"] >= t_kill]
    first_answer = next((r["t"] for r in samples if r.get("gcs_up")), None)
    gcs_back = _stable_since(samples, STABLE_S)
    # workers count as back once the GCS has recovered (not at a first answer it then lost)
    nodes_back = None if gcs_back is None else next(
        (r["t"] for r in samples if r["t"] >= gcs_back and r.get("gcs_up")
         and workers_before <= set(r.get("alive_ids") or [])), None)
    down = [r for r in samples if not r.get("gcs_up")]
    evidence = {
        "mode": kill.get("mode"),
        "killed_at": kill.get("killed_at"),
        "gcs_recovery_s": None if gcs_back is None else round(gcs_back - t_kill, 3),
        "gcs_first_answer_s": None if first_answer is None else round(first_answer - t_kill, 3),
        "gcs_flaps_after_first_answer": _flaps(samples, first_answer),
        "nodes_recovery_s": None if nodes_back is None else round(nodes_back - t_kill, 3),
        "gcs_down_samples": len(down),
        "sample_interval_s": run.settings.monitor.interval_s,
        "workers_before": sorted(workers_before),
        "workers_after": sorted(workers_after),
        "workers_lost": sorted(workers_before - workers_after),
        "old_head": kill.get("old"),
        "new_head": run.target.head_identity(),
    }
    evidence["head_replaced"] = (evidence["new_head"].get("pid") != (kill.get("old") or {}).get(
        "pid")) if evidence["new_head"].get("pid") else None
    evidence["recovered"] = gcs_back is not None and nodes_back is not None
    run.record_probe("gcs_recovery", "pass" if evidence["recovered"] else "fail", evidence)
    return evidence
