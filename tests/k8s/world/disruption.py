"""PodDisruptionBudgets and the Eviction API, as the disruption controller and the eviction
subresource of a real cluster behave (goldens eviction-*.json and pdb-list.json).

- integer ``minAvailable``: healthy = Ready, not terminating; allowed = healthy - minAvailable;
- ``maxUnavailable`` or a percentage over pods owned by a RayCluster: the controller needs the
  owner's scale subresource, which ``rayclusters.ray.io`` lacks, so status is SyncFailed and
  every eviction is 429 "still being processed" with Retry-After 10 (KubeRay #2662);
- a Pending (or finished, or already terminating) pod is evicted with no budget check;
- a pod under two budgets: 500.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.k8s.world import resources as R
from tests.k8s.world.api import Api, set_condition
from tests.k8s.world.store import now, selector_dict_match

__all__ = ["pdb_status", "evict", "refresh_pdbs"]

SCALELESS = {"RayCluster": "rayclusters.ray.io"}


def _ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def _matching(store_pods: list[dict], pdb: dict) -> list[dict]:
    ns = pdb["metadata"]["namespace"]
    sel = pdb["spec"].get("selector")
    return [p for p in store_pods if p["metadata"].get("namespace") == ns
            and sel is not None and selector_dict_match(sel, p["metadata"].get("labels"))]


def pdb_status(pdb: dict, pods: list[dict]) -> dict[str, Any]:
    spec = pdb["spec"]
    matched = _matching(pods, pdb)
    gen = pdb["metadata"].get("generation", 1)
    old = pdb.get("status") or {}
    needs_scale = "maxUnavailable" in spec or "%" in str(spec.get("minAvailable", ""))
    if needs_scale:
        for p in matched:
            for ref in p["metadata"].get("ownerReferences") or []:
                if ref.get("controller") and ref.get("kind") in SCALELESS:
                    cond = _cond(old, False, "SyncFailed",
                                 f"{SCALELESS[ref['kind']]} does not implement the scale "
                                 f"subresource", None)
                    return {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0,
                            "expectedPods": 0, "conditions": [cond]}
    expected = len(matched)
    healthy = sum(1 for p in matched if _ready(p) and not p["metadata"].get("deletionTimestamp"))
    if "maxUnavailable" in spec:
        mu = _amount(spec["maxUnavailable"], expected)
        desired = max(0, expected - mu)
    else:
        desired = _amount(spec.get("minAvailable", 0), expected)
    disrupted = {k: v for k, v in (old.get("disruptedPods") or {}).items()
                 if any(p["metadata"]["name"] == k and not p["metadata"].get("deletionTimestamp")
                        for p in matched)}
    allowed = max(0, healthy - desired - len(disrupted))
    out: dict[str, Any] = {"observedGeneration": gen}
    if disrupted:
        out["disruptedPods"] = disrupted
    out |= {"disruptionsAllowed": allowed, "currentHealthy": healthy, "desiredHealthy": desired,
            "expectedPods": expected, "conditions": [
                _cond(old, allowed > 0, "SufficientPods" if allowed > 0 else "InsufficientPods",
                      "", gen)]}
    return out


def _amount(value: Any, total: int) -> int:
    text = str(value)
    if text.endswith("%"):
        return -(-int(text[:-1]) * total // 100)
    return int(value)


def _cond(old: dict, ok: bool, reason: str, message: str, gen: int | None) -> dict:
    prev = next((c for c in old.get("conditions") or [] if c["type"] == "DisruptionAllowed"), {})
    status = "True" if ok else "False"
    cond: dict[str, Any] = {"type": "DisruptionAllowed", "status": status}
    if gen is not None:
        cond["observedGeneration"] = gen
    cond["lastTransitionTime"] = prev.get("lastTransitionTime") if prev.get("status") == status \
        else now()
    cond |= {"reason": reason, "message": message}
    return cond


def refresh_pdbs(api: Api) -> None:
    """The disruption controller's pass: recompute every budget's status (saved if changed)."""
    store = api.store
    with store.lock:
        pods = store.list("pods", copy_=False)
        for pdb in store.list("poddisruptionbudgets", copy_=False):
            st = pdb_status(pdb, pods)
            if st != pdb.get("status"):
                new = copy.deepcopy(pdb)
                new["status"] = st
                store.update("poddisruptionbudgets", new)


def evict(api: Api, ns: str, name: str, body: dict | None) -> tuple[int, dict, dict]:
    """POST pods/NAME/eviction → (code, Status, extra headers)."""
    store = api.store
    res = R.BUILTIN["pods"]
    opts = (body or {}).get("deleteOptions")
    with store.lock:
        pod = store.raw("pods", ns, name)
        if pod is None:
            return 404, R.not_found(res, name), {}
        phase = pod.get("status", {}).get("phase")
        if phase in ("Pending", "Succeeded", "Failed") or pod["metadata"].get("deletionTimestamp"):
            code, reply = api.delete(res, ns, name, opts)
            return (201, R.status(201, None, "", ok=True), {}) if code == 200 else \
                (code, reply, {})
        pods = store.list("pods", copy_=False)
        budgets = [p for p in store.list("poddisruptionbudgets", ns, copy_=False)
                   if _matching([pod], p)]
        if len(budgets) > 1:
            return 500, R.status(500, None, "This pod has more than one PodDisruptionBudget, "
                                 "which the eviction subresource does not support."), {}
        if budgets:
            pdb = budgets[0]
            st = pdb_status(pdb, pods)
            if "observedGeneration" not in st:
                return 429, _too_many(f"The disruption budget {pdb['metadata']['name']} is "
                                      f"still being processed by the server.", 10), \
                    {"Retry-After": "10"}
            if st["disruptionsAllowed"] < 1:
                return 429, _too_many(f"The disruption budget {pdb['metadata']['name']} needs "
                                      f"{st['desiredHealthy']} healthy pods and has "
                                      f"{st['currentHealthy']} currently", None), {}
            new = copy.deepcopy(pdb)
            st["disruptionsAllowed"] -= 1
            st.setdefault("disruptedPods", {})[name] = now()
            new["status"] = st
            store.update("poddisruptionbudgets", new)

        def mark(p: dict) -> None:
            set_condition(p, "DisruptionTarget", "True", "EvictionByEvictionAPI",
                          "Eviction API: evicting")

        store.mutate("pods", ns, name, mark)
        code, reply = api.delete(res, ns, name, opts)
    if code != 200:
        return code, reply, {}
    return 201, R.status(201, None, "", ok=True), {}


def _too_many(cause: str, retry: int | None) -> dict:
    details: dict[str, Any] = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    if retry:
        details["retryAfterSeconds"] = retry
    return R.status(429, "TooManyRequests",
                    "Cannot evict pod as it would violate the pod's disruption budget.", details)
