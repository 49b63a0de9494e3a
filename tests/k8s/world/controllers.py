"""kube-controller-manager for the world: one loop that wakes on every change (about 0.1 s
behind it, as the goldens' node lifecycle controller was) and runs the controllers in turn:
node lifecycle (cordon taint), scheduler, disruption (PDB status), DaemonSet, endpoints,
garbage collector (ownerReferences), namespace deletion, and any extra (KubeRay, kubelets).

Why one loop: everything is in-process over one store; a single thread keeps the order of
effects deterministic and costs nothing when idle. Every controller's exception is logged and
the loop goes on (a controller bug must not stop the world, nor a test's warnings filter trip).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from raychaos.testbed.node.objects import event_body
from tests.k8s.world import resources as R
from tests.k8s.world.api import Api
from tests.k8s.world.disruption import refresh_pdbs
from tests.k8s.world.scheduler import schedule_pending, taint_cordoned
from tests.k8s.world.store import selector_dict_match

__all__ = ["ControllerManager", "record_event", "pod_ready"]

log = logging.getLogger("world.controllers")


def pod_ready(pod: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def record_event(api: Api, obj: dict, reason: str, message: str, component: str,
                 etype: str | None = None, host: str | None = None,
                 field_path: str | None = None) -> None:
    """Write an Event in the shape kubelet and scheduler write them (golden events-list)."""
    ev = event_body(obj, reason, message, component, etype, host, field_path)
    api.create(R.BUILTIN["events"], ev["metadata"]["namespace"], ev)


class ControllerManager:
    def __init__(self, api: Api, lag_s: float = 0.1, resync_s: float = 1.0,
                 enabled: set[str] | None = None):
        self.api = api
        self.enabled = enabled  # None: all; else the names of the controllers to run
        self.lag_s = lag_s
        self.resync_s = resync_s
        self.extra: list[tuple[str, Callable[[], None]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def add(self, name: str, fn: Callable[[], None]) -> None:
        self.extra.append((name, fn))

    def start(self) -> ControllerManager:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="world-controllers")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        with self.api.store.lock:
            self.api.store.lock.notify_all()
        if self._thread:
            self._thread.join(timeout=10)

    def _events(self, pod: dict, reason: str, msg: str, comp: str, etype: str | None) -> None:
        record_event(self.api, pod, reason, msg, comp, etype)

    def run_once(self) -> None:
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("nodelifecycle", lambda: taint_cordoned(self.api)),
            ("daemonset", self.daemonsets),
            *self.extra,
            ("scheduler", lambda: schedule_pending(self.api, self._events)),
            ("disruption", lambda: refresh_pdbs(self.api)),
            ("endpoints", self.endpoints),
            ("garbagecollector", self.garbage_collect),
            ("namespace", self.namespaces),
        ]
        for name, fn in steps:
            if self.enabled is not None and name not in self.enabled:
                continue
            try:
                fn()
            except Exception as exc:  # noqa: BLE001 - keep the world running, keep the error
                log.exception("controller %s failed", name)
                self.errors = (self.errors + [f"{name}: {type(exc).__name__}: {exc}"])[-50:]

    def _loop(self) -> None:
        store = self.api.store
        seen = -1
        while not self._stop.is_set():
            with store.lock:
                if store.rv == seen:
                    store.lock.wait(self.resync_s)
            if self._stop.is_set():
                return
            time.sleep(self.lag_s)
            seen = store.rv
            self.run_once()

    # --- DaemonSet -----------------------------------------------------------------------------
    def daemonsets(self) -> None:
        store, api = self.api.store, self.api
        with store.lock:
            for ds in store.list("daemonsets", copy_=False):
                self._daemonset(api, ds)

    def _daemonset(self, api: Api, ds: dict) -> None:
        store = api.store
        meta, spec = ds["metadata"], ds["spec"]
        ns, uid = meta["namespace"], meta["uid"]
        if meta.get("deletionTimestamp"):
            return
        tmpl = spec.get("template") or {}
        owned = [p for p in store.list("pods", ns, copy_=False)
                 if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]
        by_node: dict[str, list[dict]] = {}
        for p in owned:
            by_node.setdefault(_ds_node(p), []).append(p)
        from tests.k8s.world.scheduler import _affinity_ok, _tolerates
        wanted = []
        for node in store.list("nodes", copy_=False):
            probe = {"spec": {"nodeSelector": (tmpl.get("spec") or {}).get("nodeSelector"),
                              "affinity": (tmpl.get("spec") or {}).get("affinity")}}
            tol = (tmpl.get("spec") or {}).get("tolerations") or []
            if not _affinity_ok(probe, node):
                continue
            if any(t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(tol, t)
                   and t["key"] != "node.kubernetes.io/unschedulable"
                   for t in node["spec"].get("taints") or []):
                continue
            wanted.append(node["metadata"]["name"])
        for name in wanted:
            if not [p for p in by_node.get(name, []) if not p["metadata"].get("deletionTimestamp")]:
                api.create(R.BUILTIN["pods"], ns, _ds_pod(ds, name))
        pods = store.list("pods", ns, copy_=False)
        mine = [p for p in pods if any(r.get("uid") == uid for r in
                                       p["metadata"].get("ownerReferences") or [])
                and not p["metadata"].get("deletionTimestamp")]
        status = {"currentNumberScheduled": sum(1 for p in mine if p["spec"].get("nodeName")),
                  "numberMisscheduled": 0, "desiredNumberScheduled": len(wanted),
                  "numberReady": sum(1 for p in mine if pod_ready(p)),
                  "observedGeneration": meta.get("generation", 1),
                  "updatedNumberScheduled": len(mine),
                  "numberAvailable": sum(1 for p in mine if pod_ready(p))}
        unavailable = len(wanted) - status["numberAvailable"]
        if unavailable > 0:
            status["numberUnavailable"] = unavailable
        if ds.get("status") != status:
            new = copy.deepcopy(ds)
            new["status"] = status
            store.update("daemonsets", new)

    # --- endpoints -----------------------------------------------------------------------------
    def endpoints(self) -> None:
        store, api = self.api.store, self.api
        with store.lock:
            pods = store.list("pods", copy_=False)
            for svc in store.list("services", copy_=False):
                sel = svc["spec"].get("selector")
                if not sel:
                    continue
                ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
                # the endpoints controller: publishNotReadyAddresses puts every pod with an
                # address in ``addresses``, terminating ones too; otherwise terminating pods
                # are left out and unready ones listed as notReadyAddresses
                publish = bool(svc["spec"].get("publishNotReadyAddresses"))
                ready, not_ready = [], []
                for p in pods:
                    if p["metadata"].get("namespace") != ns or not p.get("status", {}).get(
                            "podIP") or not selector_dict_match({"matchLabels": sel},
                                                                p["metadata"].get("labels")):
                        continue
                    if p["status"].get("phase") in ("Succeeded", "Failed") or (
                            p["metadata"].get("deletionTimestamp") and not publish):
                        continue
                    addr = {"ip": p["status"]["podIP"], "nodeName": p["spec"].get("nodeName"),
                            "targetRef": {"kind": "Pod", "namespace": ns,
                                          "name": p["metadata"]["name"],
                                          "uid": p["metadata"]["uid"]}}
                    ok = publish or pod_ready(p)
                    (ready if ok else not_ready).append(addr)
                ports = [{"name": pt.get("name"), "port": _target_port(pt, pods, sel),
                          "protocol": pt.get("protocol", "TCP")}
                         for pt in svc["spec"].get("ports") or []]
                subset: dict[str, Any] = {}
                if ready:
                    subset["addresses"] = sorted(ready, key=lambda a: a["ip"])
                if not_ready:
                    subset["notReadyAddresses"] = sorted(not_ready, key=lambda a: a["ip"])
                subsets = [subset | {"ports": ports}] if subset else []
                cur = store.raw("endpoints", ns, name)
                owner = [{"apiVersion": "v1", "kind": "Service", "name": name,
                          "uid": svc["metadata"]["uid"]}]
                if cur is None:
                    api.create(R.BUILTIN["endpoints"], ns, {
                        "metadata": {"name": name, "namespace": ns,
                                     "labels": dict(svc["metadata"].get("labels") or {}),
                                     "ownerReferences": owner}, "subsets": subsets})
                elif cur.get("subsets") != subsets:
                    new = copy.deepcopy(cur)
                    new["subsets"] = subsets
                    store.update("endpoints", new)

    # --- garbage collector / namespaces --------------------------------------------------------
    def garbage_collect(self) -> None:
        store, api = self.api.store, self.api
        with store.lock:
            uids = {o["metadata"]["uid"] for objs in store.objects.values() for o in objs.values()}
            for plural, objs in list(store.objects.items()):
                res = R.BUILTIN.get(plural) or self._custom(plural)
                if res is None:
                    continue
                for o in list(objs.values()):
                    refs = o["metadata"].get("ownerReferences") or []
                    if refs and all(r.get("uid") not in uids for r in refs if r.get("uid")) \
                            and any(r.get("uid") for r in refs) \
                            and not o["metadata"].get("deletionTimestamp"):
                        api.delete(res, o["metadata"].get("namespace", ""), o["metadata"]["name"],
                                   None)

    def _custom(self, plural: str) -> R.Res | None:
        for crd in self.api.store.objects.get("customresourcedefinitions", {}).values():
            for r in R.custom_res(crd):
                if r.plural == plural:
                    return r
        return None

    def namespaces(self) -> None:
        store, api = self.api.store, self.api
        with store.lock:
            for nsobj in store.list("namespaces", copy_=False):
                if not nsobj["metadata"].get("deletionTimestamp"):
                    continue
                name, left = nsobj["metadata"]["name"], 0
                for plural, objs in list(store.objects.items()):
                    for (ns, obj_name) in list(objs):
                        if ns == name:
                            left += 1
                            res = R.BUILTIN.get(plural) or self._custom(plural)
                            if res is not None:
                                api.delete(res, ns, obj_name, None)
                if not left:
                    store.remove("namespaces", "", name)


def _target_port(pt: dict, pods: list[dict], sel: dict) -> int:
    tp = pt.get("targetPort", pt.get("port"))
    if isinstance(tp, int) or str(tp).isdigit():
        return int(tp)
    for p in pods:
        for c in p["spec"].get("containers") or []:
            for cp in c.get("ports") or []:
                if cp.get("name") == tp:
                    return int(cp["containerPort"])
    return int(pt.get("port", 0))


def _ds_node(pod: dict) -> str:
    if pod["spec"].get("nodeName"):
        return pod["spec"]["nodeName"]
    terms = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or []
    for t in terms:
        for f in t.get("matchFields") or []:
            if f["key"] == "metadata.name" and f.get("values"):
                return f["values"][0]
    return ""


def _ds_pod(ds: dict, node: str) -> dict:
    tmpl = copy.deepcopy(ds["spec"].get("template") or {})
    meta = tmpl.setdefault("metadata", {})
    spec = tmpl.setdefault("spec", {})
    meta["generateName"] = ds["metadata"]["name"] + "-"
    meta.setdefault("labels", {})["pod-template-generation"] = str(
        ds["metadata"].get("generation", 1))
    meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet",
                                "name": ds["metadata"]["name"], "uid": ds["metadata"]["uid"],
                                "controller": True, "blockOwnerDeletion": True}]
    aff = spec.setdefault("affinity", {})
    aff["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}
    tol = spec.setdefault("tolerations", [])
    for key, effect in (("node.kubernetes.io/not-ready", "NoExecute"),
                        ("node.kubernetes.io/unreachable", "NoExecute"),
                        ("node.kubernetes.io/disk-pressure", "NoSchedule"),
                        ("node.kubernetes.io/memory-pressure", "NoSchedule"),
                        ("node.kubernetes.io/pid-pressure", "NoSchedule"),
                        ("node.kubernetes.io/unschedulable", "NoSchedule")):
        tol.append({"key": key, "operator": "Exists", "effect": effect})
    if spec.get("hostNetwork"):
        tol.append({"key": "node.kubernetes.io/network-unavailable", "operator": "Exists",
                    "effect": "NoSchedule"})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
