"""What the world's API server serves: resource types, Status replies, admission defaults and
validation — each shaped as a real kube-apiserver 1.36 answers (see /work/shared/k8s-golden).

Why its own module: the goldens pin down many small shapes (a 404's ``details.kind`` is the
plural resource, a Lease delete answers a Status but a Pod delete the object, custom objects keep
``kind`` in lists, admission adds the service-account volume and 300 s tolerations). Keeping them
in one table keeps the HTTP routing readable.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from typing import Any

__all__ = ["Res", "BUILTIN", "status", "not_found", "already_exists", "conflict", "invalid",
           "forbidden", "default_pod", "validate", "custom_res", "suffix"]


@dataclass(frozen=True)
class Res:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_sub: bool = False   # has a /status subresource (main writes keep status)
    generation: bool = False   # metadata.generation is kept
    returns_object_on_delete: bool = False
    custom: bool = False       # served from a CRD: items keep kind/apiVersion, keys sorted

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``pods`` or ``leases.coordination.k8s.io``, as messages name a resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


BUILTIN = {r.plural: r for r in [
    Res("", "v1", "pods", "Pod", status_sub=True, generation=True,
        returns_object_on_delete=True),
    Res("", "v1", "nodes", "Node", namespaced=False, status_sub=True),
    Res("", "v1", "services", "Service", status_sub=True),
    Res("", "v1", "endpoints", "Endpoints"),
    Res("", "v1", "events", "Event"),
    Res("", "v1", "namespaces", "Namespace", namespaced=False, status_sub=True,
        returns_object_on_delete=True),
    Res("", "v1", "configmaps", "ConfigMap"),
    Res("", "v1", "secrets", "Secret"),
    Res("", "v1", "serviceaccounts", "ServiceAccount"),
    Res("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", status_sub=True,
        generation=True),
    Res("apps", "v1", "daemonsets", "DaemonSet", status_sub=True, generation=True),
    Res("coordination.k8s.io", "v1", "leases", "Lease"),
    Res("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition",
        namespaced=False, status_sub=True, generation=True),
]}


def custom_res(crd: dict[str, Any]) -> list[Res]:
    """The Res a CustomResourceDefinition serves (one per served version)."""
    spec = crd["spec"]
    sub = any("status" in (v.get("subresources") or {}) for v in spec.get("versions", []))
    return [Res(spec["group"], v["name"], spec["names"]["plural"], spec["names"]["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced", status_sub=sub,
                generation=True, custom=True)
            for v in spec.get("versions", []) if v.get("served", True)]


def suffix(n: int = 5) -> str:
    """A generateName-style suffix: consonants and digits, as the API server picks them."""
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(n))


# --- Status replies ------------------------------------------------------------------------------
def status(code: int | None, reason: str | None, message: str, details: dict | None = None,
           ok: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Success" if ok else "Failure"}
    if message:
        out["message"] = message
    if reason:
        out["reason"] = reason
    if details is not None:
        out["details"] = details
    if code is not None:  # a successful delete's Status carries no code
        out["code"] = code
    return out


def _details(res: Res, name: str | None) -> dict[str, Any]:
    d: dict[str, Any] = {}
    if name is not None:
        d["name"] = name
    if res.group:
        d["group"] = res.group
    d["kind"] = res.plural
    return d


def not_found(res: Res, name: str) -> dict:
    return status(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: Res, name: str) -> dict:
    return status(409, "AlreadyExists", f'{res.qualified} "{name}" already exists',
                  _details(res, name))


def conflict(res: Res, name: str) -> dict:
    return status(409, "Conflict", f'Operation cannot be fulfilled on {res.qualified} "{name}": '
                  "the object has been modified; please apply your changes to the latest "
                  "version and try again", _details(res, name))


def forbidden(res: Res, verb: str, user: str, ns: str, name: str | None) -> dict:
    where = f' in the namespace "{ns}"' if ns else " at the cluster scope"
    what = f'{res.plural} "{name}"' if name else res.plural
    return status(403, "Forbidden", f'{what} is forbidden: User "{user}" cannot {verb} resource '
                  f'"{res.plural}" in API group "{res.group}"{where}',
                  {**({"name": name} if name else {}), **({"group": res.group} if res.group
                                                          else {}), "kind": res.plural})


def invalid(res: Res, name: str, causes: list[tuple[str, str, str]]) -> dict:
    """``causes``: (reason, message, field). Message as the API server joins them."""
    parts = [f"{f}: {m}" for _, m, f in causes]
    joined = parts[0] if len(parts) == 1 else "[" + ", ".join(parts) + "]"
    kind = f"{res.kind}.{res.group}" if res.group else res.kind
    return status(422, "Invalid", f'{kind} "{name}" is invalid: {joined}',
                  {"name": name, **({"group": res.group} if res.group else {}), "kind": res.kind,
                   "causes": [{"reason": r, "message": m, "field": f} for r, m, f in causes]})


# --- validation ----------------------------------------------------------------------------------
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
               "characters, '-' or '.', and must start and end with an alphanumeric character "
               "(e.g. 'example.com', regex used for validation is "
               "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")


def _pod_spec_causes(spec: dict, prefix: str, allow_privileged: bool) -> list:
    causes = []
    containers = spec.get("containers") or []
    if not containers:
        causes.append(("FieldValueRequired", "Required value", f"{prefix}.containers"))
    for i, c in enumerate(containers):
        if not c.get("name"):
            causes.append(("FieldValueRequired", "Required value",
                           f"{prefix}.containers[{i}].name"))
        if not c.get("image"):
            causes.append(("FieldValueRequired", "Required value",
                           f"{prefix}.containers[{i}].image"))
        if (c.get("securityContext") or {}).get("privileged") and not allow_privileged:
            causes.append(("FieldValueForbidden", "Forbidden: disallowed by cluster policy",
                           f"{prefix}.containers[{i}].securityContext.privileged"))
    return causes


def validate(res: Res, obj: dict, allow_privileged: bool = True) -> list[tuple[str, str, str]]:
    name = obj.get("metadata", {}).get("name") or ""
    causes = []
    if not name:
        causes.append(("FieldValueRequired", "name or generateName is required",
                       "metadata.name"))
    elif not DNS1123.match(name) or len(name) > 253:
        causes.append(("FieldValueInvalid", f'Invalid value: "{name}": {DNS1123_MSG}',
                       "metadata.name"))
    if res.plural == "pods":
        causes += _pod_spec_causes(obj.get("spec") or {}, "spec", allow_privileged)
    elif res.plural == "daemonsets":
        tmpl = (obj.get("spec") or {}).get("template") or {}
        causes += _pod_spec_causes(tmpl.get("spec") or {}, "spec.template.spec",
                                   allow_privileged)
    return causes


# --- admission defaults for pods -----------------------------------------------------------------
def _pull_policy(image: str) -> str:
    tail = image.rsplit("/", 1)[-1]
    if "@" in tail:
        return "IfNotPresent"
    return "Always" if ":" not in tail or tail.endswith(":latest") else "IfNotPresent"


def _qos(containers: list[dict]) -> str:
    reqs = [c.get("resources") or {} for c in containers]
    if not any(k in (r.get("requests") or {}) or k in (r.get("limits") or {})
               for r in reqs for k in ("cpu", "memory")):
        return "BestEffort"
    for r in reqs:
        lim, req = r.get("limits") or {}, r.get("requests") or {}
        if not ("cpu" in lim and "memory" in lim) or any(req.get(k) != lim.get(k)
                                                         for k in ("cpu", "memory")):
            return "Burstable"
    return "Guaranteed"


def default_container(c: dict, token_volume: str | None) -> None:
    c.setdefault("resources", {})
    lim = c["resources"].get("limits")
    if lim:
        req = c["resources"].setdefault("requests", {})
        for k, v in lim.items():
            req.setdefault(k, v)
    if token_volume:
        c.setdefault("volumeMounts", []).append(
            {"name": token_volume, "readOnly": True,
             "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"})
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("imagePullPolicy", _pull_policy(c.get("image", "")))
    for p in c.get("ports") or []:
        p.setdefault("protocol", "TCP")


def default_pod(pod: dict) -> None:
    """What admission adds to a new pod (golden pod-get.json, minus OpenShift's CA configMap)."""
    spec = pod.setdefault("spec", {})
    pod["metadata"]["generation"] = 1
    token = None
    if spec.get("automountServiceAccountToken", True):
        token = "kube-api-access-" + "".join(random.choice(string.ascii_lowercase + "0123456789")
                                             for _ in range(5))
        spec.setdefault("volumes", []).append({"name": token, "projected": {"sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt",
                           "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
                "apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}}],
            "defaultMode": 420}})
    for c in spec.get("initContainers") or []:
        default_container(c, token)
    for c in spec.get("containers") or []:
        default_container(c, token)
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("serviceAccountName", "default")
    spec["serviceAccount"] = spec["serviceAccountName"]
    spec.setdefault("securityContext", {})
    spec.setdefault("schedulerName", "default-scheduler")
    tol = spec.setdefault("tolerations", [])
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tol):
            tol.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                        "tolerationSeconds": 300})
    spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    pod["status"] = {"phase": "Pending", "qosClass": _qos(spec.get("containers") or [])}
