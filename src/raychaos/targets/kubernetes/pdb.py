"""Why a PodDisruptionBudget refuses an eviction, in one sentence per budget.

Why a module: "HTTP 429" is all the Eviction API says, and the causes a drain meets on KubeRay
clusters are few and specific (``../shared/KUBERNETES-NOTES.md``):

- a ``maxUnavailable`` budget — or any percentage — over RayCluster-owned pods: the disruption
  controller needs the owner's scale subresource, which ``rayclusters.ray.io`` lacks, so
  ``disruptionsAllowed`` stays 0 forever (KubeRay #2662; the status says ``SyncFailed``);
- an integer ``minAvailable`` whose healthy count only comes back when a replacement is Ready —
  and a replacement that is Pending/Unschedulable (no capacity left, every node that fits is
  cordoned) never is, so the budget never frees;
- a pod matched by two budgets (the API answers 500).

Selectors are matched in full (``matchLabels`` and ``matchExpressions``), not by labels only.
"""

from __future__ import annotations

from typing import Any

from raychaos.targets.kubernetes.client import ApiSession

__all__ = ["diagnose_pdbs", "pending_reason", "selector_matches"]


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str] | None) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against ``labels``; an empty selector
    matches every pod (as a policy/v1 budget's does)."""
    labels = labels or {}
    sel = selector or {}
    if any(labels.get(k) != v for k, v in (sel.get("matchLabels") or {}).items()):
        return False
    for expr in sel.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def pending_reason(pod: dict[str, Any]) -> str | None:
    """``Unschedulable: 0/4 nodes are available: …`` for a pod the scheduler cannot place."""
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"{cond.get('reason') or 'Pending'}: {cond.get('message') or ''}".strip(": ")
    return None


def _owned_by_raycluster(pods: list[dict[str, Any]]) -> bool:
    return any(r.get("kind") == "RayCluster" for p in pods
               for r in p["metadata"].get("ownerReferences") or [])


def diagnose_pdbs(api: ApiSession, ns: str, blocked: list[dict[str, Any]],
                  pending: list[dict[str, Any]] | None = None) -> list[str]:
    """One sentence per budget over ``blocked`` pods; ``pending`` are replacements not yet
    placed (their reason is what keeps an integer ``minAvailable`` budget shut)."""
    notes = []
    budgets = api.read(api.policy.list_namespaced_pod_disruption_budget, ns)["items"]
    for pdb in budgets:
        spec, status = pdb.get("spec") or {}, pdb.get("status") or {}
        hits = [p for p in blocked if selector_matches(spec.get("selector"),
                                                       p["metadata"].get("labels"))]
        if not hits:
            continue
        name = f"{ns}/{pdb['metadata']['name']}"
        allowed = int(status.get("disruptionsAllowed") or 0)
        percent = any("%" in str(spec.get(k, "")) for k in ("minAvailable", "maxUnavailable"))
        sync = next((c for c in status.get("conditions") or []
                     if c.get("reason") == "SyncFailed"), None)
        if (("maxUnavailable" in spec or percent) and _owned_by_raycluster(hits)
                and not allowed) or sync:
            what = "maxUnavailable" if "maxUnavailable" in spec else "a percentage minAvailable"
            notes.append(
                f"PodDisruptionBudget {name} uses {what} over RayCluster pods, so "
                f"disruptionsAllowed stays 0 and every eviction is refused (KubeRay issue "
                f"#2662: rayclusters.ray.io has no scale subresource"
                f"{'; status: ' + sync['message'] if sync and sync.get('message') else ''}); "
                f"use an integer minAvailable instead")
            continue
        text = (f"PodDisruptionBudget {name} allows {allowed} disruption(s) now (healthy "
                f"{status.get('currentHealthy', '?')}, needs {status.get('desiredHealthy', '?')}"
                f" of {status.get('expectedPods', '?')})")
        stuck = [(p["metadata"]["name"], why) for p in pending or []
                 if (why := pending_reason(p)) and selector_matches(
                     spec.get("selector"), p["metadata"].get("labels"))]
        if stuck and not allowed:
            pod, why = stuck[0]
            text += (f"; the replacement {pod} is Pending ({why}), so the healthy count never "
                     f"comes back and the budget never frees")
        notes.append(text)
    matched: dict[str, int] = {}
    for pdb in budgets:
        for p in blocked:
            if selector_matches((pdb.get("spec") or {}).get("selector"),
                                p["metadata"].get("labels")):
                matched[p["metadata"]["name"]] = matched.get(p["metadata"]["name"], 0) + 1
    notes += [f"pod {ns}/{pod} is matched by {n} PodDisruptionBudgets, which the Eviction API "
              f"refuses (HTTP 500)" for pod, n in matched.items() if n > 1]
    return notes
