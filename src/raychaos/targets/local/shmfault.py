"""The /dev/shm trap on the local target: restart pods with a /dev/shm smaller than their store.

On Kubernetes this happens when a pod template loses its ``/dev/shm`` volume (the container
default is 64 MiB) or gets a ``sizeLimit`` below ``object-store-memory``: the pods are recreated
and Ray, finding too little shared memory, puts the object store in its temp dir on disk with
one warning (or, for a store of 10 GB and more, refuses to start). The fault changes the size in
the nodes' plans and restarts them, as a rollout of the new template would; the evidence is
what Ray made of it, read from each new raylet: ``plasma_directory`` before and after. Undo
restores the size and restarts them again.
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.errors import FaultFailed, NothingMatched, RollbackFailed
from raychaos.results.store import checkpoint
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.storage import node_storage

__all__ = ["resize_dev_shm", "storage_facts", "undo_resize_dev_shm"]

RESTART_TIMEOUT_S = 90.0


def storage_facts(cluster: LocalCluster) -> list[dict[str, Any]]:
    plans = {p.name: p.to_dict() for p in cluster.plans()}
    return node_storage(dict(cluster.status().get("nodes", {})), plans)


def _set_shm(cluster: LocalCluster, sizes: dict[str, int]) -> None:
    desired = cluster.require()
    for entry in desired["nodes"]:
        if entry["plan"]["name"] in sizes:
            entry["plan"]["shm_bytes"] = sizes[entry["plan"]["name"]]
    cluster.write(desired)


def _restart(cluster: LocalCluster, names: list[str], timeout: float) -> dict[str, Any]:
    """Stop and start ``names``; wait until each new raylet reports where its store is."""
    before = {n: cluster.status().get("nodes", {}).get(n, {}).get("incarnation", 0)
              for n in names}
    cluster.set_desired(names, False)
    cluster.wait_stopped(names, 30.0)
    cluster.set_desired(names, True, 0.5)
    deadline = time.monotonic() + timeout
    facts: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline:
        nodes = cluster.status().get("nodes", {})
        fresh = [n for n in names if nodes.get(n, {}).get("incarnation", 0) > before[n]
                 and nodes[n].get("state") == "running"]
        facts = {f["node"]: f for f in storage_facts(cluster) if f["node"] in fresh
                 and f.get("plasma_directory")}
        if len(facts) == len(names):
            alive = {n.name for n in cluster.nodes(timeout=2.0) if n.state == "ALIVE"}
            if set(names) <= alive:
                return {"facts": facts, "up": True}
        time.sleep(0.5)
    return {"facts": facts, "up": False}


def _log_tail(cluster: LocalCluster, name: str, lines: int = 3) -> list[str]:
    log = cluster.status().get("nodes", {}).get(name, {}).get("log")
    try:
        text = open(log, encoding="utf-8", errors="replace").read() if log else ""
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def resize_dev_shm(cluster: LocalCluster, *, nodes: list[str], size_mb: float,
                   record: dict[str, Any]) -> dict[str, Any]:
    pods = cluster.pods()
    unknown = [n for n in nodes if n not in pods]
    if unknown:
        raise NothingMatched(f"resize_dev_shm: no node named {unknown[0]!r} in local cluster "
                             f"'{cluster.name}' (nodes: {sorted(pods)})")
    before = {f["node"]: f for f in storage_facts(cluster) if f["node"] in nodes}
    record["undo"] = {"kind": "dev_shm", "nodes": nodes,
                      "sizes": {n: int(pods[n].get("shm_bytes") or 0) for n in nodes}}
    checkpoint(record)
    _set_shm(cluster, {n: int(size_mb * 2**20) for n in nodes})
    result = _restart(cluster, nodes, RESTART_TIMEOUT_S)
    after = result["facts"]
    evidence: dict[str, Any] = {"size_mb": size_mb, "nodes": {}}
    for name in nodes:
        fact = after.get(name, {})
        store = fact.get("object_store_mb") or round(pods[name]["object_store_bytes"] / 2**20)
        entry = {"before": {k: before.get(name, {}).get(k) for k in
                            ("plasma_directory", "shm_mb", "on_shm")},
                 "after": {k: fact.get(k) for k in ("plasma_directory", "shm_mb", "on_shm")},
                 "object_store_mb": store, "trap": size_mb < store}
        if not fact:
            entry["ray_did"] = "the node did not come up: " + " | ".join(_log_tail(cluster, name))
        elif fact.get("on_shm"):
            entry["ray_did"] = "kept the object store in /dev/shm"
        else:
            entry["ray_did"] = (f"moved the object store to {fact.get('plasma_directory')} "
                                f"(disk): /dev/shm has {fact.get('shm_mb')} MB for a "
                                f"{store:g} MB store")
        evidence["nodes"][name] = entry
    evidence["landed"] = all(
        e["after"].get("shm_mb") is not None and abs(e["after"]["shm_mb"] - size_mb) < 1
        for e in evidence["nodes"].values())
    if not evidence["landed"] and result["up"]:
        raise FaultFailed(f"resize_dev_shm: {nodes} restarted but their /dev/shm is not "
                          f"{size_mb:g} MB: {evidence['nodes']}")
    return evidence


def undo_resize_dev_shm(cluster: LocalCluster, undo: dict[str, Any]) -> dict[str, Any]:
    desired = cluster.desired()
    if desired is None or not cluster.is_up():
        return {"undone": True, "note": "the cluster is gone"}
    sizes = {n: int(v) for n, v in undo["sizes"].items()}
    current = {e["plan"]["name"]: int(e["plan"].get("shm_bytes") or 0) for e in desired["nodes"]}
    if all(current.get(n) == v for n, v in sizes.items()) and all(
            e.get("desired", True) for e in desired["nodes"] if e["plan"]["name"] in sizes):
        return {"undone": True, "note": "already at the original size"}
    _set_shm(cluster, sizes)
    result = _restart(cluster, list(sizes), RESTART_TIMEOUT_S)
    if not result["up"]:
        raise RollbackFailed(f"resize_dev_shm undo: {sorted(sizes)} did not come back with "
                             f"their original /dev/shm within {RESTART_TIMEOUT_S:g} s")
    return {"undone": True, "restored_mb": {n: v / 2**20 for n, v in sizes.items()},
            "after": result["facts"]}
