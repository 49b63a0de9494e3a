"""Resource faults: a node's object store filled by someone else, a /dev/shm too small for it.

- :func:`press_object_store` — a noisy neighbour: a job whose actor holds ``mb`` of objects in
  one node's object store, mapped into its own memory so Ray can neither evict nor spill them.
  A working set that fitted stops fitting: the store spills and restores (``spilled``/``restored``
  on the timeline), tasks wait on their inputs and throughput drops. Target-independent — it is
  a Ray job — and undone by stopping the job, which frees the objects.
- :func:`resize_dev_shm` — pods restarted with a ``/dev/shm`` of ``size_mb`` (a pod template
  rolled out without its shared-memory volume): Ray moves an object store that does not fit
  onto disk. The evidence names what Ray did on every node.
"""

from __future__ import annotations

import json
import shlex
import time
from typing import Annotated, Any

from raychaos.catalog import loads_dir
from raychaos.config.arguments import Range, fault_action
from raychaos.context import current
from raychaos.errors import FaultFailed
from raychaos.faults.network import node_names
from raychaos.observe.prometheus import resource_snapshot

__all__ = ["BALLAST_PREFIX", "press_object_store", "resize_dev_shm"]

BALLAST_PREFIX = "RAYCHAOS_BALLAST "
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED", "MISSING")


def _store_used_mb(run: Any) -> float | None:
    snap = resource_snapshot(run.target.metrics_texts(timeout=1.0))
    value = snap.get("object_store_used_mb")
    return float(value) if value is not None else None


@fault_action()
def press_object_store(mb: Annotated[float, Range(1, 1_000_000)] = 64.0,
                       selector: dict[str, str] | None = None,
                       timeout_s: Annotated[float, Range(5, 3600)] = 90.0) -> dict[str, Any]:
    """Fill ``mb`` of one node's object store with objects nothing can spill, until rolled back.

    :param mb: megabytes to hold (in 4 MB objects).
    :param selector: Ray node labels of the node to press, e.g.
        ``{"raychaos.io/node": "worker-1"}`` (default: any node Ray picks).
    :param timeout_s: how long the ballast job may take to hold it all.
    :returns: evidence: the node, megabytes held, the cluster's object store use before/after.
    """
    run = current()
    args = {"mb": mb, "selector": selector, "timeout_s": timeout_s}
    with run.fault("press_object_store", args) as record:
        before = _store_used_mb(run)
        entry = ["python", "object_store_ballast.py", "--mb", f"{mb:g}"]
        if selector:
            entry += ["--selector", shlex.quote(json.dumps(selector))]
        record["undo"] = {"kind": "stop_job", "job_id": None}
        job_id = run.target.submit_job(" ".join(entry), working_dir=str(loads_dir()),
                                       metadata={"raychaos_run": run.run_id,
                                                 "raychaos_fault": record["id"]})
        record["undo"] = {"kind": "stop_job", "job_id": job_id}  # written before it holds
        held: dict[str, Any] | None = None
        lines: list[str] = []
        deadline = time.monotonic() + timeout_s
        while held is None and time.monotonic() < deadline:
            for line in run.target.job_log_lines(job_id):
                lines.append(line)
                if line.startswith(BALLAST_PREFIX):
                    held = json.loads(line[len(BALLAST_PREFIX):])
            status = run.target.job_status(job_id)
            if held is None and status in TERMINAL:
                break
            time.sleep(0.5)
        if held is None:
            run.target.stop_job(job_id)
            raise FaultFailed(f"press_object_store: the ballast job {job_id} did not hold "
                              f"{mb:g} MB within {timeout_s:g} s: {' | '.join(lines[-3:])}")
        after = _store_used_mb(run)
        evidence = {"job_id": job_id, **held, "store_used_mb_before": before,
                    "store_used_mb_after": after,
                    "landed": held.get("held_mb", 0) >= mb * 0.9}
        if not evidence["landed"]:
            raise FaultFailed(f"press_object_store: the ballast holds {held.get('held_mb')} MB, "
                              f"not {mb:g} MB")
        run.ledger.update(record, evidence=evidence)
    return evidence


@fault_action(rules=[node_names("nodes", required=True)])
def resize_dev_shm(nodes: list[str] | None = None,
                   size_mb: Annotated[float, Range(1, 1_048_576)] = 64.0) -> dict[str, Any]:
    """Restart ``nodes`` with a /dev/shm of ``size_mb``, until rolled back.

    :param nodes: node names, e.g. ``["worker-1"]`` (the default).
    :param size_mb: the new size of each pod's /dev/shm in megabytes (Kubernetes' container
        default is 64).
    :returns: evidence per node: the object store's size, where Ray put it before and after,
        ``trap`` (the store is larger than /dev/shm) and what Ray did (``ray_did``).
    """
    nodes = ["worker-1"] if nodes is None else nodes
    run = current()
    with run.fault("resize_dev_shm", {"nodes": nodes, "size_mb": size_mb}) as record:
        evidence = run.target.resize_dev_shm(nodes=nodes, size_mb=size_mb, record=record)
        run.ledger.update(record, evidence=evidence)
    return evidence
