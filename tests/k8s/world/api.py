"""The API server's verbs over the store: create, get, list, update, patch, delete (with
graceful deletion and finalizers), binding — returning ``(HTTP code, body)`` as kube-apiserver
1.36 does. The HTTP layer (``server.py``) only parses requests and writes replies.

Why separate from HTTP: controllers and tests call the same verbs in-process (no RBAC record,
no socket) and get exactly the behaviour a client gets over HTTP.
"""

from __future__ import annotations

import copy
import time
from typing import Any

from raychaos.testbed.node.objects import set_condition
from tests.k8s.world import resources as R
from tests.k8s.world.patch import UnsupportedPatch, apply_patch
from tests.k8s.world.store import Store, now

__all__ = ["Api", "set_condition"]

Reply = tuple[int, Any]


def _ts(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class Api:
    """Verbs over ``store``; ``resolve`` maps (group, version, plural) to a Res or None."""

    def __init__(self, store: Store, allow_privileged: bool = True):
        self.store = store
        self.allow_privileged = allow_privileged
        self.service_ip_alloc: Any = None  # set by the world: returns a ClusterIP
        self.on_service_deleted: Any = None

    # --- types ---------------------------------------------------------------------------------
    def resolve(self, group: str, version: str, plural: str) -> R.Res | None:
        res = R.BUILTIN.get(plural)
        if res is not None and res.group == group and res.version == version:
            return res
        with self.store.lock:
            for crd in self.store.objects.get("customresourcedefinitions", {}).values():
                for r in R.custom_res(crd):
                    if (r.group, r.version, r.plural) == (group, version, plural):
                        return r
        return None

    def wire(self, res: R.Res, obj: dict, in_list: bool = False) -> dict:
        """The object as the server writes it: built-ins lead with kind/apiVersion; list items
        of built-ins carry neither; custom objects keep both and come out key-sorted."""
        if res.custom:
            out = dict(sorted(obj.items()))
            out["kind"], out["apiVersion"] = res.kind, res.api_version
            return dict(sorted(out.items()))
        body = {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
        return body if in_list else {"kind": res.kind, "apiVersion": res.api_version, **body}

    def _key_ns(self, res: R.Res, ns: str) -> str:
        return ns if res.namespaced else ""

    # --- reads ---------------------------------------------------------------------------------
    def get(self, res: R.Res, ns: str, name: str) -> Reply:
        obj = self.store.get(res.plural, self._key_ns(res, ns), name)
        if obj is None:
            return 404, R.not_found(res, name)
        return 200, self.wire(res, obj)

    def list(self, res: R.Res, ns: str, labels: str | None, fields: str | None) -> Reply:
        try:
            with self.store.lock:
                items = self.store.list(res.plural, ns if res.namespaced else None, labels,
                                        fields)
                rv = str(self.store.rv)
        except ValueError as exc:
            return 400, R.status(400, "BadRequest", str(exc))
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        meta: dict[str, Any] = {"resourceVersion": rv}
        if res.custom:
            meta = {"continue": "", "resourceVersion": rv}
        body = {"kind": res.kind + "List", "apiVersion": res.api_version, "metadata": meta,
                "items": [self.wire(res, o, in_list=True) for o in items]}
        if res.custom:
            body = {"apiVersion": res.api_version, "items": body["items"],
                    "kind": res.kind + "List", "metadata": meta}
        return 200, body

    # --- create --------------------------------------------------------------------------------
    def create(self, res: R.Res, ns: str, body: Any) -> Reply:
        if not isinstance(body, dict):
            return 400, R.status(400, "BadRequest", "the body of the request is not an object")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if res.namespaced:
            if meta.get("namespace") and meta["namespace"] != ns:
                return 400, R.status(400, "BadRequest", "the namespace of the provided object "
                                     "does not match the namespace sent on the request")
            meta["namespace"] = ns
            if self.store.get("namespaces", "", ns) is None:
                return 404, R.not_found(R.BUILTIN["namespaces"], ns)
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + R.suffix()
        causes = R.validate(res, obj, self.allow_privileged)
        if causes:
            return 422, R.invalid(res, meta.get("name") or "", causes)
        for k in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                  "deletionGracePeriodSeconds", "generation"):
            meta.pop(k, None)
        obj["kind"], obj["apiVersion"] = res.kind, res.api_version
        if res.generation:
            meta["generation"] = 1
        if res.plural == "pods":
            R.default_pod(obj)
        elif res.plural == "services":
            self._default_service(obj)
        elif res.plural == "namespaces":
            obj.setdefault("spec", {"finalizers": ["kubernetes"]})
            obj["status"] = {"phase": "Active"}
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        elif res.plural == "customresourcedefinitions":
            obj["status"] = {"conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"}],
                "acceptedNames": obj["spec"]["names"], "storedVersions": [
                    v["name"] for v in obj["spec"].get("versions", []) if v.get("storage")]}
        elif res.status_sub and res.plural not in ("nodes",):
            obj.pop("status", None)
        with self.store.lock:
            if self.store.raw(res.plural, self._key_ns(res, ns), meta["name"]) is not None:
                return 409, R.already_exists(res, meta["name"])
            created = self.store.create(res.plural, obj)
        return 201, self.wire(res, created)

    def _default_service(self, svc: dict) -> None:
        spec = svc.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if not spec.get("clusterIP") and self.service_ip_alloc is not None:
            spec["clusterIP"] = self.service_ip_alloc()
        if spec.get("clusterIP"):
            spec["clusterIPs"] = [spec["clusterIP"]]
        spec.setdefault("ipFamilies", ["IPv4"])
        spec.setdefault("ipFamilyPolicy", "SingleStack")
        spec.setdefault("internalTrafficPolicy", "Cluster")
        for p in spec.get("ports") or []:
            p.setdefault("protocol", "TCP")
            p.setdefault("targetPort", p.get("port"))
        svc["status"] = {"loadBalancer": {}}

    # --- update / patch ------------------------------------------------------------------------
    def update(self, res: R.Res, ns: str, name: str, body: Any, sub: str = "",
               patch_type: str | None = None) -> Reply:
        key_ns = self._key_ns(res, ns)
        with self.store.lock:
            cur = self.store.raw(res.plural, key_ns, name)
            if cur is None:
                return 404, R.not_found(res, name)
            if patch_type:
                try:
                    new = apply_patch(copy.deepcopy(cur), body, patch_type)
                except (UnsupportedPatch, KeyError, IndexError, TypeError, ValueError) as exc:
                    code = 415 if "unknown format" in str(exc) else 422
                    return code, R.status(code, "UnsupportedMediaType" if code == 415
                                          else "Invalid", str(exc))
                want_rv = ((body or {}).get("metadata") or {}).get("resourceVersion") \
                    if isinstance(body, dict) else None
            else:
                if not isinstance(body, dict):
                    return 400, R.status(400, "BadRequest", "the body is not an object")
                new = copy.deepcopy(body)
                want_rv = (new.get("metadata") or {}).get("resourceVersion")
            if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
                return 409, R.conflict(res, name)
            new = self._merge_update(res, cur, new, sub)
            if new == cur:
                return 200, self.wire(res, copy.deepcopy(cur))
            meta = new["metadata"]
            if meta.get("deletionTimestamp") and not meta.get("finalizers") and \
                    res.plural != "pods":
                self.store.update(res.plural, new)
                gone = self.store.remove(res.plural, key_ns, name)
                return 200, self.wire(res, gone or new)
            saved = self.store.update(res.plural, new)
        return 200, self.wire(res, saved)

    def _merge_update(self, res: R.Res, cur: dict, new: dict, sub: str) -> dict:
        meta = new.setdefault("metadata", {})
        keep = ("uid", "creationTimestamp", "namespace", "name", "deletionTimestamp",
                "deletionGracePeriodSeconds", "generation")
        for k in keep:
            if k in cur["metadata"]:
                meta[k] = cur["metadata"][k]
            else:
                meta.pop(k, None)
        meta["resourceVersion"] = cur["metadata"]["resourceVersion"]
        new["kind"], new["apiVersion"] = res.kind, res.api_version
        if sub == "status":  # only status changes
            out = copy.deepcopy(cur)
            out["status"] = new.get("status", {})
            return out
        if res.status_sub and "status" in cur:
            new["status"] = copy.deepcopy(cur["status"])
        elif res.status_sub:
            new.pop("status", None)
        if res.generation and new.get("spec") != cur.get("spec"):
            meta["generation"] = int(cur["metadata"].get("generation", 1)) + 1
        return new

    # --- delete --------------------------------------------------------------------------------
    def delete(self, res: R.Res, ns: str, name: str, opts: dict | None,
               query_grace: str | None = None) -> Reply:
        """``opts``: the DeleteOptions body (None when none was sent: then the query's
        gracePeriodSeconds counts — never when a body was sent, even ``{}``)."""
        key_ns = self._key_ns(res, ns)
        grace: int | None = None
        if opts is not None:
            if opts.get("gracePeriodSeconds") is not None:
                grace = int(opts["gracePeriodSeconds"])
        elif query_grace not in (None, ""):
            grace = int(query_grace)
        with self.store.lock:
            cur = self.store.raw(res.plural, key_ns, name)
            if cur is None:
                return 404, R.not_found(res, name)
            if opts and (opts.get("preconditions") or {}).get("uid") not in (
                    None, cur["metadata"]["uid"]):
                return 409, R.conflict(res, name)
            if res.plural == "pods":
                return self._delete_pod(res, cur, grace)
            if cur["metadata"].get("finalizers") or res.plural == "namespaces":
                if not cur["metadata"].get("deletionTimestamp"):
                    cur["metadata"]["deletionTimestamp"] = now()
                    cur["metadata"]["deletionGracePeriodSeconds"] = 0
                    if res.plural == "namespaces":
                        cur["status"] = {"phase": "Terminating"}
                    self.store.update(res.plural, cur)
                return 200, self.wire(res, copy.deepcopy(cur))
            gone = self.store.remove(res.plural, key_ns, name)
        assert gone is not None
        if res.plural == "services" and self.on_service_deleted:
            self.on_service_deleted(gone)
        if res.returns_object_on_delete:
            return 200, self.wire(res, gone)
        return 200, R.status(None, None, "", {**R._details(res, name),
                                             "uid": gone["metadata"]["uid"]}, ok=True)

    def _delete_pod(self, res: R.Res, pod: dict, grace: int | None) -> Reply:
        meta, spec = pod["metadata"], pod.get("spec", {})
        if grace is None:
            grace = int(spec.get("terminationGracePeriodSeconds", 30))
        if not spec.get("nodeName") or pod.get("status", {}).get("phase") in ("Succeeded",
                                                                              "Failed"):
            grace = 0  # nothing runs it: no kubelet has to stop anything
        if meta.get("deletionTimestamp") is not None and \
                grace >= int(meta.get("deletionGracePeriodSeconds", 0)):
            return 200, self.wire(res, copy.deepcopy(pod))
        meta["deletionTimestamp"] = _ts(time.time() + grace)
        meta["deletionGracePeriodSeconds"] = grace
        meta["generation"] = int(meta.get("generation", 1)) + 1
        saved = self.store.update("pods", pod)
        if grace == 0 and not meta.get("finalizers"):
            gone = self.store.remove("pods", meta["namespace"], meta["name"])
            return 200, self.wire(res, gone or saved)
        return 200, self.wire(res, saved)

    def finish_pod(self, ns: str, name: str, uid: str | None = None) -> None:
        """The kubelet's last word: the pod's containers are stopped, remove the object."""
        with self.store.lock:
            pod = self.store.raw("pods", ns, name)
            if pod is not None and (uid is None or pod["metadata"]["uid"] == uid):
                self.store.remove("pods", ns, name)

    # --- pods/binding --------------------------------------------------------------------------
    def bind(self, ns: str, name: str, node: str) -> Reply:
        res = R.BUILTIN["pods"]

        def fn(pod: dict) -> None:
            pod["spec"]["nodeName"] = node
            set_condition(pod, "PodScheduled", "True")

        with self.store.lock:
            pod = self.store.raw("pods", ns, name)
            if pod is None:
                return 404, R.not_found(res, name)
            if pod["spec"].get("nodeName"):
                return 409, R.status(409, "Conflict", f'Operation cannot be fulfilled on '
                                     f'pods/binding "{name}": pod {name} is already assigned '
                                     f'to node "{pod["spec"]["nodeName"]}"',
                                     {"name": name, "kind": "pods/binding"})
            self.store.mutate("pods", ns, name, fn)
        return 201, R.status(201, None, "", ok=True)
