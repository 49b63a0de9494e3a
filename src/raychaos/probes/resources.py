"""Resource probes: where each object store really lives, and how much GPU capacity stranded.

- :func:`dev_shm_check` names the /dev/shm trap: for every node, the object store's size, its
  pod's /dev/shm and the directory Ray actually put the store in (``/dev/shm``, or its temp dir
  on disk when /dev/shm is too small), with a side-by-side put/get bench of the nodes so the
  slowdown is a number; plus the resilience review's finding when the target can only declare
  sizes (Kubernetes).
- :func:`gpu_stranding` reads the GPU watch's series (:mod:`raychaos.observe.gpu`) and says
  per load how much of its GPU-seconds stranded and how long its demand waited beside free
  capacity — so a verdict shows which fraction strands capacity, and how much.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from raychaos.config.arguments import Range
from raychaos.context import current
from raychaos.observe.gpu import gpu_metrics
from raychaos.observe.windows import windows
from raychaos.probes.jobs import run_job
from raychaos.results.store import read_timeline

__all__ = ["dev_shm_check", "gpu_stranding"]

BENCH = "RAYCHAOS_BENCH "


def _bench(nodes: list[str], seconds: float) -> dict[str, Any]:
    run = current()
    status, lines = run_job(run.target, f"python object_store_bench.py --nodes "
                                        f"{','.join(nodes)} --seconds {seconds:g}", timeout=180)
    out = {}
    for line in lines:
        if line.startswith(BENCH):
            row = json.loads(line[len(BENCH):])
            out[row.pop("node")] = row
    return {"status": status, "nodes": out}


def dev_shm_check(bench_s: Annotated[float, Range(0, 60)] = 2.0) -> dict[str, Any]:
    """Is every object store in shared memory? Names each one that is not, and what Ray did.

    :param bench_s: seconds of put/get per node for the side-by-side bench (0: no bench).
    :returns: evidence: per node the store and /dev/shm sizes, the plasma directory, ``on_shm``
        and ``ray_did``; ``shm_backed_ratio`` (stores in /dev/shm / stores observed); the bench.
    """
    run = current()
    facts = [f for f in run.target.node_storage() if f.get("observed")]
    nodes: dict[str, dict[str, Any]] = {}
    for f in facts:
        entry = {k: f.get(k) for k in ("object_store_mb", "shm_mb", "plasma_directory",
                                       "on_shm", "spill_directory")}
        if f.get("on_shm") is False:
            entry["ray_did"] = (f"put the object store ({f.get('object_store_mb')} MB) in "
                                f"{f.get('plasma_directory')}, on disk: its /dev/shm has "
                                f"{f.get('shm_mb')} MB")
        nodes[str(f["node"])] = entry
    trapped = sorted(n for n, e in nodes.items() if e.get("on_shm") is False)
    evidence: dict[str, Any] = {
        "nodes": nodes, "trapped": trapped,
        "shm_backed_ratio": round(1 - len(trapped) / len(nodes), 4) if nodes else None}
    review = run.extras.get("review") or {}
    evidence["review"] = [f["message"] for f in review.get("findings", [])
                          if f.get("rule") == "dev-shm" and f.get("severity") != "info"]
    workers = sorted(n for n in nodes if n != "head")
    if bench_s and workers:
        bench = _bench(workers, bench_s)
        evidence["bench"] = bench["nodes"]
        good = [r["mb_per_s"] for n, r in bench["nodes"].items()
                if n not in trapped and r.get("mb_per_s")]
        for name in trapped:
            row = bench["nodes"].get(name, {})
            if row.get("mb_per_s") and good:
                evidence["nodes"][name]["slowdown"] = round(max(good) / row["mb_per_s"], 2)
    verdict = ("unknown" if not nodes else "fail" if trapped else "pass")
    run.record_probe("dev_shm_check", verdict,
                     evidence if nodes else {**evidence, "unobserved": "node storage"})
    return evidence


def gpu_stranding(window: Literal["baseline", "chaos", "recovery", "run"] = "run"
                  ) -> dict[str, Any]:
    """Per load: the fraction of its GPU-seconds stranded and its pending-demand seconds.

    :param window: the part of the run to judge (usually ``run``).
    :returns: evidence: per load ``gpu_stranded_capacity_frac``, ``gpu_pending_demand_s``,
        ``gpu_task_idle_frac``, GPU-seconds; ``worst``: the load that stranded most.
    """
    run = current()
    records = read_timeline(run.timeline.path)
    wins = windows(records)
    span = wins.get(window, wins["run"])
    names = sorted({n for r in records if r.get("kind") == "gpu" for n in r.get("loads", {})})
    loads = {n: gpu_metrics(records, span, n) for n in names}
    overall = gpu_metrics(records, span)
    ranked = sorted(loads, key=lambda n: loads[n]["gpu_stranded_capacity_frac"] or 0.0)
    evidence = {"window": window, "loads": loads, "cluster": overall,
                "worst": ranked[-1] if ranked else None}
    run.record_probe("gpu_stranding", "pass" if overall["samples"] else "unknown",
                     evidence if overall["samples"] else {**evidence,
                                                          "unobserved": "GPU samples"})
    return evidence
