"""The world's kube-scheduler: binds pods without ``spec.nodeName`` to a node that fits.

Filters in the real scheduler's order, the first failure per node naming why: NodeUnschedulable
(cordoned), TaintToleration, NodeAffinity (nodeSelector, required node affinity incl.
``matchFields metadata.name`` as DaemonSet pods carry), NodeResourcesFit (cpu, memory,
``nvidia.com/gpu``, pods — allocatable against the requests of pods already bound there,
terminating ones included, as a real scheduler counts them). A pod that fits nowhere stays
Pending with ``PodScheduled=False``, reason ``Unschedulable`` and the scheduler's message; it
is retried whenever pods or nodes change.
"""

from __future__ import annotations

from typing import Any

from raychaos.testbed.node.objects import quantity
from tests.k8s.world.api import Api, set_condition
from tests.k8s.world.store import now

__all__ = ["schedule_pending", "quantity", "pod_requests"]


def pod_requests(pod: dict) -> dict[str, float]:
    out: dict[str, float] = {}
    for c in pod.get("spec", {}).get("containers") or []:
        res = c.get("resources") or {}
        for k, v in {**(res.get("limits") or {}), **(res.get("requests") or {})}.items():
            out[k] = out.get(k, 0.0) + quantity(v)
    return out


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists" and (not t.get("key") or t["key"] == taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _expr_ok(expr: dict, value: str | None) -> bool:
    op, vals = expr["operator"], expr.get("values") or []
    if op == "In":
        return value in vals
    if op == "NotIn":
        return value not in vals
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None:
        return int(value) > int(vals[0]) if op == "Gt" else int(value) < int(vals[0])
    return False


def _affinity_ok(pod: dict, node: dict) -> bool:
    labels = node["metadata"].get("labels") or {}
    for k, v in (pod["spec"].get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if not req:
        return True
    for term in req.get("nodeSelectorTerms") or []:
        if all(_expr_ok(e, labels.get(e["key"])) for e in term.get("matchExpressions") or []) \
                and all(_expr_ok(e, node["metadata"]["name"] if e["key"] == "metadata.name"
                                 else None) for e in term.get("matchFields") or []):
            return True
    return False


def _why_not(pod: dict, node: dict, used: dict[str, float]) -> list[str]:
    if node["spec"].get("unschedulable"):
        tolerations = pod["spec"].get("tolerations") or []
        if not _tolerates(tolerations, {"key": "node.kubernetes.io/unschedulable",
                                        "effect": "NoSchedule"}):
            return ["node(s) were unschedulable"]
    for taint in node["spec"].get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and \
                not _tolerates(pod["spec"].get("tolerations") or [], taint):
            if taint["key"] == "node.kubernetes.io/unschedulable":
                return ["node(s) were unschedulable"]
            val = f": {taint['value']}" if taint.get("value") else ""
            return [f"node(s) had untolerated taint {{{taint['key']}{val}}}"]
    if not _affinity_ok(pod, node):
        return ["node(s) didn't match Pod's node affinity/selector"]
    alloc = node.get("status", {}).get("allocatable") or {}
    want = pod_requests(pod)
    out = []
    if used.get("pods", 0) + 1 > quantity(alloc.get("pods", 110)):
        out.append("Too many pods")
    for k, v in sorted(want.items()):
        if v and used.get(k, 0.0) + v > quantity(alloc.get(k, 0)) + 1e-9:
            out.append(f"Insufficient {k}")
    return out


def _usage(pods: list[dict]) -> dict[str, dict[str, float]]:
    used: dict[str, dict[str, float]] = {}
    for p in pods:
        node = p["spec"].get("nodeName")
        if not node or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        u = used.setdefault(node, {})
        u["pods"] = u.get("pods", 0) + 1
        for k, v in pod_requests(p).items():
            u[k] = u.get(k, 0.0) + v
    return used


def schedule_pending(api: Api, events: Any = None) -> int:
    """One scheduling pass; returns how many pods were bound."""
    store = api.store
    bound = 0
    with store.lock:
        pods = store.list("pods", copy_=False)
        pending = [p for p in pods if not p["spec"].get("nodeName")
                   and not p["metadata"].get("deletionTimestamp")
                   and p["spec"].get("schedulerName", "default-scheduler") == "default-scheduler"]
        if not pending:
            return 0
        nodes = sorted(store.list("nodes", copy_=False), key=lambda n: n["metadata"]["name"])
        used = _usage(pods)
        for pod in sorted(pending, key=lambda p: p["metadata"]["creationTimestamp"]):
            reasons: dict[str, int] = {}
            fits = []
            for node in nodes:
                why = _why_not(pod, node, used.get(node["metadata"]["name"], {}))
                if why:
                    for w in why:
                        reasons[w] = reasons.get(w, 0) + 1
                else:
                    fits.append(node)
            meta = pod["metadata"]
            if fits:  # least allocated: the node with the fewest pods
                node = min(fits, key=lambda n: used.get(n["metadata"]["name"], {}).get("pods", 0))
                name = node["metadata"]["name"]
                api.bind(meta["namespace"], meta["name"], name)
                u = used.setdefault(name, {})
                u["pods"] = u.get("pods", 0) + 1
                for k, v in pod_requests(pod).items():
                    u[k] = u.get(k, 0.0) + v
                bound += 1
                if events:
                    events(pod, "Scheduled", f"Successfully assigned {meta['namespace']}/"
                           f"{meta['name']} to {name}", "default-scheduler", None)
                continue
            n = len(nodes)
            detail = ", ".join(f"{c} {r}" for r, c in sorted(reasons.items()))
            msg = f"0/{n} nodes are available: {detail}. preemption: 0/{n} nodes are available: " \
                  f"{n} Preemption is not helpful for scheduling." if n else \
                  "no nodes available to schedule pods"

            def mark(p: dict, msg: str = msg) -> None:
                set_condition(p, "PodScheduled", "False", "Unschedulable", msg)

            before = next((c.get("message") for c in pod.get("status", {}).get("conditions")
                           or [] if c["type"] == "PodScheduled"), None)
            if before != msg:
                store.mutate("pods", meta["namespace"], meta["name"], mark)
                if events:
                    events(pod, "FailedScheduling", msg, "default-scheduler", "Warning")
    return bound


def taint_cordoned(api: Api) -> None:
    """The node lifecycle controller: ``spec.unschedulable`` ⇒ the unschedulable taint."""
    key = "node.kubernetes.io/unschedulable"
    with api.store.lock:
        for node in api.store.list("nodes", copy_=False):
            taints = node["spec"].get("taints") or []
            has = any(t["key"] == key for t in taints)
            want = bool(node["spec"].get("unschedulable"))
            if has == want:
                continue

            def fix(n: dict, want: bool = want) -> None:
                rest = [t for t in n["spec"].get("taints") or [] if t["key"] != key]
                if want:
                    rest.append({"key": key, "effect": "NoSchedule", "timeAdded": now()})
                if rest:
                    n["spec"]["taints"] = rest
                else:
                    n["spec"].pop("taints", None)

            api.store.mutate("nodes", "", node["metadata"]["name"], fix)
