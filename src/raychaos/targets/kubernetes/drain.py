"""Drain Kubernetes nodes under a RayCluster with ``kubectl drain``'s semantics, and watch the
Ray pods come back.

Why this shape: it is what a node upgrade or a GPU node preemption does to Ray. Cordon
(``PATCH spec.unschedulable``), then evict through ``policy/v1`` every pod on the node — not
only this RayCluster's: a drain empties the node — except DaemonSet and mirror pods, as
``kubectl drain`` does; a pod no controller would recreate is refused before anything changes
(kubectl needs ``--force`` for it), and pods whose ``emptyDir`` data is lost (KubeRay's
``shared-mem``: the object store in ``/dev/shm``) are named. A 429 is retried with backoff until
the deadline and then explained (:mod:`.pdb`). "Landed" means the evicted pods are *gone* (a
watch, not a poll), and the evidence follows each replacement KubeRay creates: when it appeared,
whether it sat Pending/Unschedulable and why, where it was scheduled, when it was Ready.

Victims: nodes matching ``selector`` (``count`` of them), or ``count`` nodes with
``nvidia.com/gpu`` running this cluster's pods; a cluster with no such node (kind) falls back to
nodes whose Ray workers declare GPUs (``--num-gpus``), then to any node running one of its
workers — and the evidence says which rule chose. Undo uncordons only nodes we cordoned.
"""

from __future__ import annotations

import re
import time
from typing import Any

from kubernetes import client

from raychaos.errors import FaultFailed, KubeApiError, NothingMatched
from raychaos.results.store import checkpoint
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.informer import watch_until
from raychaos.targets.kubernetes.pdb import diagnose_pdbs, pending_reason
from raychaos.targets.kubernetes.raycluster import pod_ready
from raychaos.targets.kubernetes.safety import (
    CORDONED_BY,
    gpu_count,
    is_daemonset_pod,
    is_mirror_pod,
    is_protected,
    refuse_protected,
)

__all__ = ["drain_nodes", "select_nodes", "uncordon", "wait_replaced"]

GONE_EXTRA_S = 30.0  # beyond the longest grace period, for the kubelet to finish a pod
REPLACEMENT_WAIT_S = 240.0


def _logical_gpus(pod: dict[str, Any]) -> bool:
    """A Ray container started with ``--num-gpus=N>0`` (logical GPUs, as on kind)."""
    text = " ".join(" ".join([*(c.get("args") or []), *(c.get("command") or []),
                              *[str(e.get("value", "")) for e in c.get("env") or []]])
                    for c in (pod.get("spec") or {}).get("containers") or [])
    return any(float(n) > 0 for n in re.findall(r"--num-gpus[= ]['\"]?([0-9.]+)", text))


def select_nodes(api: ApiSession, ns: str, cluster: str, selector: str | None,
                 count: int) -> tuple[list[dict[str, Any]], str]:
    """The nodes a drain would cordon and the rule that chose them; changes nothing."""
    pods = api.read(api.core.list_namespaced_pod, ns,
                    label_selector=f"ray.io/cluster={cluster}")["items"]
    by_node: dict[str, list[dict[str, Any]]] = {}
    for pod in pods:
        by_node.setdefault((pod.get("spec") or {}).get("nodeName") or "", []).append(pod)
    nodes = api.read(api.core.list_node, **({"label_selector": selector} if selector
                                            else {}))["items"]
    usable = sorted((n for n in nodes if not (n.get("spec") or {}).get("unschedulable")
                     and not is_protected(n)), key=lambda n: (
        not by_node.get(n["metadata"]["name"]), n["metadata"]["name"]))

    def workers_on(n: dict[str, Any]) -> list[dict[str, Any]]:
        return [p for p in by_node.get(n["metadata"]["name"], [])
                if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]

    if selector:
        if not nodes:
            raise NothingMatched(f"drain_nodes: no node matches selector {selector!r}")
        chosen, rule = usable, f"label selector {selector}"
    elif any(gpu_count(n) > 0 for n in nodes):  # a cluster with GPUs: only GPU nodes
        chosen, rule = [n for n in usable if gpu_count(n) > 0
                        and by_node.get(n["metadata"]["name"])], "nvidia.com/gpu capacity"
        if not chosen:
            raise NothingMatched(f"drain_nodes: no schedulable, unprotected GPU node runs a "
                                 f"pod of RayCluster {ns}/{cluster}")
    else:  # kind, minikube: logical GPUs at best
        chosen, rule = [n for n in usable if any(_logical_gpus(p) for p in workers_on(n))
                        ], "no node has nvidia.com/gpu: Ray workers started with --num-gpus"
        if not chosen:
            chosen, rule = [n for n in usable if workers_on(n)], \
                "no node has nvidia.com/gpu and no Ray worker declares GPUs: a worker's node"
        if not chosen:
            raise NothingMatched(f"drain_nodes: no schedulable node runs a worker pod of "
                                 f"RayCluster {ns}/{cluster}")
    if count > len(chosen):
        raise NothingMatched(f"drain_nodes: count is {count} but only {len(chosen)} "
                             f"schedulable node(s) qualify ({rule}): "
                             f"{', '.join(n['metadata']['name'] for n in chosen) or 'none'}")
    return chosen[:count], rule


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


def _victims(api: ApiSession, ns: str, names: list[str], allowed: list[str]
             ) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Every pod a ``kubectl drain`` of ``names`` evicts, and those it skips (with why)."""
    victims, skipped, foreign, unmanaged = [], [], [], []
    for name in names:
        for pod in api.read(api.core.list_pod_for_all_namespaces,
                            field_selector=f"spec.nodeName={name}")["items"]:
            meta = pod["metadata"]
            why = ("DaemonSet" if is_daemonset_pod(pod) else "mirror pod" if is_mirror_pod(pod)
                   else "terminating" if "deletionTimestamp" in meta else None)
            if why:
                skipped.append({"pod": f"{meta['namespace']}/{meta['name']}", "why": why})
                continue
            if allowed and meta["namespace"] not in {ns, *allowed}:
                foreign.append(f"{meta['namespace']}/{meta['name']}")
            if not meta.get("ownerReferences") and (pod.get("status") or {}).get("phase") \
                    not in ("Succeeded", "Failed"):
                unmanaged.append(f"{meta['namespace']}/{meta['name']}")
            victims.append(pod)
    if foreign:
        raise FaultFailed(f"drain_nodes: {', '.join(names)} also run(s) {', '.join(foreign[:5])}"
                          f", outside allowed_namespaces {sorted({ns, *allowed})}; a drain "
                          f"would evict them")
    if unmanaged:
        raise FaultFailed(f"drain_nodes: {', '.join(unmanaged[:5])} on {', '.join(names)} "
                          f"has no controller, so evicting it would delete it for good "
                          f"(kubectl drain refuses it without --force)")
    return victims, skipped


def _emptydir(pod: dict[str, Any]) -> list[str]:
    return [v["name"] + (" (/dev/shm: the Ray object store)" if v["name"] == "shared-mem"
                         else "")
            for v in (pod.get("spec") or {}).get("volumes") or [] if "emptyDir" in v]


def drain_nodes(api: ApiSession, ns: str, cluster: str, run_id: str, record: dict[str, Any], *,
                selector: str | None = None, count: int = 1, evict: bool = True,
                deadline_s: float = 60.0, max_nodes: int = 1,
                allowed_namespaces: list[str] | None = None) -> dict[str, Any]:
    """Cordon the chosen nodes, evict what runs on them, wait until it is gone and until the
    RayCluster's replacements are Ready (or say why not).

    Raises FaultFailed when pods are still blocked at ``deadline_s`` (the record already holds
    the undo, so the rollback uncordons)."""
    t0, wall0 = time.monotonic(), time.time()
    nodes, rule = select_nodes(api, ns, cluster, selector, count)
    names = [n["metadata"]["name"] for n in nodes]
    if len(nodes) > max_nodes:
        raise FaultFailed(f"drain_nodes: {len(nodes)} nodes would be drained "
                          f"({', '.join(names[:5])}) but max_nodes_at_once is {max_nodes}")
    victims, skipped = _victims(api, ns, names, list(allowed_namespaces or []))
    refuse_protected([n | {"kind": "Node"} for n in nodes]
                     + [p | {"kind": "Pod"} for p in victims], "drain_nodes")
    before = {p["metadata"]["uid"] for p in api.read(
        api.core.list_namespaced_pod, ns, label_selector=f"ray.io/cluster={cluster}")["items"]}
    to_cordon = [n["metadata"]["name"] for n in nodes if not n["spec"].get("unschedulable")]
    record["undo"] = {"kind": "drain_nodes", "nodes": to_cordon}
    checkpoint(record)
    cordon = {"spec": {"unschedulable": True}, "metadata": {"labels": {CORDONED_BY: run_id}}}
    for name in to_cordon:
        api.write("PATCH", f"/api/v1/nodes/{name}", api.core.patch_node, name, body=cordon)
    evidence: dict[str, Any] = {
        "nodes": names, "chosen_by": rule, "cordoned": to_cordon, "skipped": skipped,
        "evicted": [], "blocked": [], "dry_run": api.gate.dry_run, "started_at": wall0,
        "emptydir_data_lost": {f"{p['metadata']['namespace']}/{p['metadata']['name']}": e
                               for p in victims if (e := _emptydir(p))}}
    if not evict:
        return evidence
    evicted, blocked, attempts = _evict_all(api, victims, t0 + deadline_s)
    evidence |= {"evicted": [p["metadata"]["name"] for p in evicted],
                 "blocked": [p["metadata"]["name"] for p in blocked],
                 "eviction_attempts": attempts, "evicted_s": round(time.monotonic() - t0, 3)}
    if api.gate.dry_run:  # the evictions were recorded, not sent: nothing will go
        return evidence
    if blocked:
        pending = [p for p in api.read(api.core.list_namespaced_pod, ns, label_selector=(
            f"ray.io/cluster={cluster}"))["items"] if pending_reason(p)]
        notes = sorted({n for nsx in {p["metadata"]["namespace"] for p in blocked}
                        for n in diagnose_pdbs(api, nsx, blocked, pending)})
        evidence["pdb_diagnosis"] = notes
        record["evidence"] = evidence
        raise FaultFailed(
            f"drain_nodes: {len(blocked)} of {len(victims)} pods on {', '.join(names)} could "
            f"not be evicted within {deadline_s:g} s (HTTP 429): "
            + ("; ".join(notes) if notes else "no PodDisruptionBudget explains it"))
    evidence |= _wait_gone(api, ns, evicted, t0)
    evidence |= wait_replaced(api, ns, cluster, before, evicted, t0)
    evidence["seconds"] = round(time.monotonic() - t0, 3)
    return evidence


def _evict_all(api: ApiSession, victims: list[dict[str, Any]], deadline: float
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """Evict each pod; 429s are retried with exponential backoff until ``deadline``."""
    pending, evicted, attempts, backoff = list(victims), [], 0, 0.05
    while pending:
        still = []
        for pod in pending:
            name, pns = pod["metadata"]["name"], pod["metadata"]["namespace"]
            body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=pns))
            attempts += 1
            try:
                api.write("POST", f"/api/v1/namespaces/{pns}/pods/{name}/eviction",
                          api.core.create_namespaced_pod_eviction, name, pns, body=body)
                evicted.append(pod | {"evicted_at": time.monotonic()})
            except KubeApiError as exc:
                if exc.status == 404:
                    evicted.append(pod | {"evicted_at": time.monotonic()})  # already gone
                elif exc.status == 429:
                    still.append(pod)
                else:
                    raise FaultFailed(f"drain_nodes: evicting {pns}/{name} failed: HTTP "
                                      f"{exc.status}: {exc.message}") from exc
        pending = still
        if not pending or time.monotonic() + backoff > deadline:
            break
        time.sleep(backoff)
        backoff = min(backoff * 2, 2.0)
    return evicted, pending, attempts


def _wait_gone(api: ApiSession, ns: str, evicted: list[dict[str, Any]], t0: float
               ) -> dict[str, Any]:
    """Watch until every evicted pod of ``ns`` is gone; FaultFailed naming those that stay."""
    grace = max([float((p.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
                 for p in evicted] or [0.0])
    uids = {p["metadata"]["uid"]: p["metadata"]["name"] for p in evicted
            if p["metadata"]["namespace"] == ns}
    gone_at: dict[str, float] = {}
    stats: dict[str, int] = {}

    def check(objs: dict[str, dict[str, Any]]) -> bool:
        live = {o["metadata"]["uid"] for o in objs.values()}
        for uid, name in uids.items():
            if uid not in live:
                gone_at.setdefault(name, round(time.monotonic() - t0, 3))
        return len(gone_at) == len(uids)

    done = watch_until(api, api.core.list_namespaced_pod, ns, check=check,
                       timeout=grace + GONE_EXTRA_S, stats=stats)
    others = [p for p in evicted if p["metadata"]["namespace"] != ns]
    for p in others:  # another namespace (a drain empties the node): read until 404
        deadline = time.monotonic() + grace + GONE_EXTRA_S
        while time.monotonic() < deadline and api.read_or_none(
                api.core.read_namespaced_pod, p["metadata"]["name"], p["metadata"]["namespace"]):
            time.sleep(0.5)
    if not done:
        left = sorted(set(uids.values()) - set(gone_at))
        raise FaultFailed(f"drain_nodes: evicted pod(s) {', '.join(left)} still exist "
                          f"{grace + GONE_EXTRA_S:g} s after eviction (stuck Terminating)")
    return {"gone_s": gone_at, "all_gone_s": max(gone_at.values(), default=0.0),
            "watch": stats}


def wait_replaced(api: ApiSession, ns: str, cluster: str, before: set[str],
                   evicted: list[dict[str, Any]], t0: float) -> dict[str, Any]:
    """Follow KubeRay's replacements of the evicted Ray pods until each is Ready (bounded)."""
    need: dict[str, int] = {}
    for p in evicted:
        labels = p["metadata"].get("labels") or {}
        if labels.get("ray.io/cluster") == cluster and p["metadata"]["namespace"] == ns:
            key = labels.get("ray.io/group") or labels.get("ray.io/node-type", "?")
            need[key] = need.get(key, 0) + 1
    if not need:
        return {"replacements": [], "replacements_ready": None}
    seen: dict[str, dict[str, Any]] = {}

    def check(objs: dict[str, dict[str, Any]]) -> bool:
        now = round(time.monotonic() - t0, 3)
        for o in objs.values():
            meta = o["metadata"]
            key = (meta.get("labels") or {}).get("ray.io/group") or \
                (meta.get("labels") or {}).get("ray.io/node-type", "?")
            if meta["uid"] in before or key not in need or "deletionTimestamp" in meta:
                continue
            row = seen.setdefault(meta["uid"], {"pod": meta["name"], "group": key,
                                                "created_s": now, "pending": None,
                                                "node": None, "ready_s": None})
            why = pending_reason(o)
            if why and row["pending"] is None:
                row["pending"] = {"reason": why, "at_s": now}
            node = (o.get("spec") or {}).get("nodeName")
            if node and row["node"] is None:
                row["node"], row["scheduled_s"] = node, now
            if pod_ready(o) and row["ready_s"] is None:
                row["ready_s"] = now
        ready: dict[str, int] = {}
        for row in seen.values():
            if row["ready_s"] is not None:
                ready[row["group"]] = ready.get(row["group"], 0) + 1
        return all(ready.get(k, 0) >= n for k, n in need.items())

    stats: dict[str, int] = {}
    done = watch_until(api, api.core.list_namespaced_pod, ns, check=check,
                       timeout=REPLACEMENT_WAIT_S, stats=stats,
                       label_selector=f"ray.io/cluster={cluster}")
    rows = sorted(seen.values(), key=lambda r: r["created_s"])
    out: dict[str, Any] = {"replacements": rows, "replacements_ready": bool(done),
                           "replacement_watch": stats}
    if done:
        out["drain_to_replacement_ready_s"] = max(r["ready_s"] for r in rows
                                                  if r["ready_s"] is not None)
    else:
        out["replacements_note"] = "; ".join(
            f"{r['pod']} not Ready after {REPLACEMENT_WAIT_S:g} s"
            + (f" ({r['pending']['reason']})" if r["pending"] else "") for r in rows) or \
            f"no replacement appeared within {REPLACEMENT_WAIT_S:g} s"
    return out
