"""Drain Kubernetes nodes under a RayCluster: cordon, then evict its Ray pods via the Eviction API.

Why this shape: it is what ``kubectl drain`` does and what a cloud node upgrade or GPU node
preemption does to Ray — cordon (``PATCH spec.unschedulable``), then ``policy/v1`` evictions that
respect PodDisruptionBudgets. A 429 is retried with backoff until the deadline, then reported;
the common trap — a ``maxUnavailable`` PDB over KubeRay pods, whose ``disruptionsAllowed`` stays
0 forever because ``rayclusters`` has no scale subresource (KubeRay #2662) — is named
explicitly. DaemonSet and mirror pods are skipped. Undo uncordons only nodes we cordoned.
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from raychaos.errors import ConfigError, FaultFailed, KubeApiError, NothingMatched
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.safety import (
    CORDONED_BY,
    gpu_count,
    is_daemonset_pod,
    is_mirror_pod,
    refuse_protected,
)

__all__ = ["diagnose_pdbs", "drain_nodes", "select_nodes", "uncordon"]


def _select_nodes(api: ApiSession, selector: str | None, count: int | None,
                  pods_by_node: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    if selector:
        nodes = api.read(api.core.list_node, label_selector=selector)["items"]
        if not nodes:
            raise NothingMatched(f"drain_nodes: no node matches selector {selector!r}")
        return sorted(nodes, key=lambda n: n["metadata"]["name"])
    nodes = [n for n in api.read(api.core.list_node)["items"]
             if gpu_count(n) > 0 and not n.get("spec", {}).get("unschedulable")
             and pods_by_node.get(n["metadata"]["name"])
             and str(n["metadata"].get("labels", {}).get("raychaos.io/protected")) != "true"]
    if not nodes:
        raise NothingMatched("drain_nodes: no schedulable GPU node runs a pod of this RayCluster")
    nodes.sort(key=lambda n: n["metadata"]["name"])
    return nodes[: count or 1]


def select_nodes(api: ApiSession, ns: str, cluster: str, selector: str | None,
                 count: int | None) -> list[dict[str, Any]]:
    """The nodes a drain would cordon (NothingMatched when none); changes nothing."""
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in api.read(api.core.list_namespaced_pod, ns,
                        label_selector=f"ray.io/cluster={cluster}")["items"]:
        by_node.setdefault(pod.get("spec", {}).get("nodeName") or "", []).append(pod)
    return _select_nodes(api, selector, count, by_node)


def uncordon(api: ApiSession, names: list[str]) -> list[str]:
    """Make ``names`` schedulable again; a node that is gone is fine. Returns those patched."""
    done = []
    for name in names:
        body = {"spec": {"unschedulable": None}, "metadata": {"labels": {CORDONED_BY: None}}}
        try:
            api.write("PATCH", f"/api/v1/nodes/{name}", api.core.patch_node, name, body=body)
            done.append(name)
        except KubeApiError as exc:
            if exc.status != 404:
                raise
    return done


def diagnose_pdbs(api: ApiSession, ns: str, blocked: list[dict[str, Any]]) -> list[str]:
    """One sentence per PodDisruptionBudget that blocks ``blocked`` pods, naming the cause."""
    notes = []
    for pdb in api.read(api.policy.list_namespaced_pod_disruption_budget, ns)["items"]:
        match = pdb["spec"].get("selector", {}).get("matchLabels", {})
        hits = [p for p in blocked
                if all(p["metadata"]["labels"].get(k) == v for k, v in match.items())]
        if not hits:
            continue
        name = f"{ns}/{pdb['metadata']['name']}"
        allowed = pdb.get("status", {}).get("disruptionsAllowed", 0)
        owned = any(r.get("kind") == "RayCluster" for p in hits
                    for r in p["metadata"].get("ownerReferences") or [])
        if "maxUnavailable" in pdb["spec"] and owned and not allowed:
            notes.append(
                f"PodDisruptionBudget {name} uses maxUnavailable over RayCluster pods, so "
                f"disruptionsAllowed stays 0 and every eviction is refused (KubeRay issue "
                f"#2662); use an integer minAvailable instead")
        else:
            notes.append(f"PodDisruptionBudget {name} allows {allowed} disruption(s) now")
    return notes


def drain_nodes(api: ApiSession, ns: str, cluster: str, run_id: str, record: dict[str, Any], *,
                selector: str | None = None, count: int | None = None, evict: bool = True,
                deadline_s: float = 60.0, max_nodes: int = 1) -> dict[str, Any]:
    """Cordon the chosen nodes and evict this RayCluster's pods from them.

    ``selector`` (a node label selector) or ``count`` (that many GPU nodes running Ray pods)
    chooses nodes; more than ``max_nodes`` is refused. Raises FaultFailed when pods are still
    blocked at ``deadline_s`` (the record already holds the undo).
    """
    t0 = time.monotonic()
    ray_pods = api.read(api.core.list_namespaced_pod, ns,
                        label_selector=f"ray.io/cluster={cluster}")["items"]
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in ray_pods:
        by_node.setdefault(pod.get("spec", {}).get("nodeName") or "", []).append(pod)
    nodes = _select_nodes(api, selector, count, by_node)
    names = [n["metadata"]["name"] for n in nodes]
    if len(nodes) > max_nodes:
        raise ConfigError(f"drain_nodes: {len(nodes)} nodes match ({', '.join(names[:5])}…) but "
                          f"max_nodes_at_once is {max_nodes}")
    victims, skipped = [], []
    for name in names:
        for pod in by_node.get(name, []):
            why = ("DaemonSet" if is_daemonset_pod(pod) else
                   "mirror pod" if is_mirror_pod(pod) else
                   "terminating" if "deletionTimestamp" in pod["metadata"] else None)
            if why:
                skipped.append({"pod": pod["metadata"]["name"], "why": why})
            else:
                victims.append(pod)
    refuse_protected([n | {"kind": "Node"} for n in nodes]
                     + [p | {"kind": "Pod"} for p in victims], "drain_nodes")
    to_cordon = [n["metadata"]["name"] for n in nodes if not n["spec"].get("unschedulable")]
    record["undo"] = {"kind": "drain_nodes", "nodes": to_cordon}
    cordon = {"spec": {"unschedulable": True}, "metadata": {"labels": {CORDONED_BY: run_id}}}
    for name in to_cordon:
        api.write("PATCH", f"/api/v1/nodes/{name}", api.core.patch_node, name, body=cordon)
    evidence: dict[str, Any] = {
        "nodes": names, "cordoned": to_cordon, "skipped": skipped, "evicted": [],
        "blocked": [], "dry_run": api.gate.dry_run}
    if evict:
        evicted, blocked, attempts = _evict_all(api, ns, victims, t0 + deadline_s)
        evidence |= {"evicted": [p["metadata"]["name"] for p in evicted],
                     "blocked": [p["metadata"]["name"] for p in blocked],
                     "eviction_attempts": attempts}
        if blocked:
            notes = diagnose_pdbs(api, ns, blocked)
            evidence["pdb_diagnosis"] = notes
            record["evidence"] = evidence
            raise FaultFailed(
                f"drain_nodes: {len(blocked)} of {len(victims)} pods on "
                f"{', '.join(names)} could not be evicted within {deadline_s:g} s (HTTP 429): "
                + ("; ".join(notes) if notes else "no PodDisruptionBudget explains it"))
    evidence["seconds"] = round(time.monotonic() - t0, 4)
    return evidence


def _evict_all(api: ApiSession, ns: str, victims: list[dict[str, Any]], deadline: float
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Evict each pod; 429s are retried with exponential backoff until ``deadline``."""
    pending, evicted, attempts, backoff = list(victims), [], 0, 0.05
    while pending:
        still = []
        for pod in pending:
            name = pod["metadata"]["name"]
            body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
            attempts += 1
            try:
                api.write("POST", f"/api/v1/namespaces/{ns}/pods/{name}/eviction",
                          api.core.create_namespaced_pod_eviction, name, ns, body=body)
                evicted.append(pod)
            except KubeApiError as exc:
                if exc.status == 404:
                    evicted.append(pod)  # already gone: the goal is met
                elif exc.status == 429:
                    still.append(pod)
                else:
                    raise FaultFailed(f"drain_nodes: evicting {ns}/{name} failed: HTTP "
                                      f"{exc.status} {exc.reason}") from exc
        pending = still
        if not pending or time.monotonic() + backoff > deadline:
            break
        time.sleep(backoff)
        backoff = min(backoff * 2, 2.0)
    return evicted, pending, attempts
