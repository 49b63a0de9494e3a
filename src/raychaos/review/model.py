"""What the resilience review reads: a Ray cluster's spec, its pod templates, PDBs and pods.

A RayCluster, RayJob (``spec.rayClusterSpec``) or RayService (``spec.rayClusterConfig``) —
from a manifest file or read live — becomes one :class:`ClusterView`: its head and worker groups
(``rayStartParams``, the pod template, the Ray container), the PodDisruptionBudgets of its
namespace and, when read live, its pods. The rules (:mod:`raychaos.review.rules`) read only
this view, so a manifest and a live object are judged alike.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ClusterView", "Group", "bytes_of", "cluster_views", "pod_labels", "selector_matches"]

KINDS = {"RayCluster": "spec", "RayJob": "spec.rayClusterSpec",
         "RayService": "spec.rayClusterConfig"}
_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "m": 1e-3}
_QUANTITY = re.compile(r"^\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def bytes_of(value: Any) -> float | None:
    """A Kubernetes quantity (``16Gi``, ``500M``, ``1e9``, ``4``) as a number; None if not one."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    m = _QUANTITY.match(str(value))
    if not m or m.group(2) not in _UNITS:
        return None
    try:
        return float(m.group(1)) * _UNITS[m.group(2)]
    except ValueError:
        return None


def _dig(data: Any, path: str) -> Any:
    for key in path.split("."):
        data = data.get(key) if isinstance(data, dict) else None
    return data


@dataclass
class Group:
    """The head group or one worker group of a Ray cluster."""

    name: str
    role: str  # "head" | "worker"
    path: str  # where it is in the object: "spec.workerGroupSpecs[0]"
    params: dict[str, str]
    template: dict[str, Any]
    replicas: int | None = None
    max_replicas: int | None = None

    @property
    def pod_spec(self) -> dict[str, Any]:
        spec = self.template.get("spec")
        return spec if isinstance(spec, dict) else {}

    @property
    def container(self) -> dict[str, Any]:
        """The Ray container: the one with env RAY=true, else the first (as KubeRay picks)."""
        containers = [c for c in self.pod_spec.get("containers") or [] if isinstance(c, dict)]
        for c in containers:
            if any(e.get("name") == "RAY" and str(e.get("value")).lower() == "true"
                   for e in c.get("env") or [] if isinstance(e, dict)):
                return c
        return containers[0] if containers else {}

    def env(self, name: str) -> str | None:
        for e in self.container.get("env") or []:
            if isinstance(e, dict) and e.get("name") == name and "value" in e:
                return str(e["value"])
        return None

    def memory(self, kind: str) -> float | None:
        """The Ray container's memory ``requests`` or ``limits`` in bytes."""
        res = (self.container.get("resources") or {}).get(kind) or {}
        return bytes_of(res.get("memory")) if isinstance(res, dict) else None

    def gpus(self) -> float:
        res = (self.container.get("resources") or {}).get("limits") or {}
        return sum(bytes_of(v) or 0.0 for k, v in res.items() if str(k).endswith("gpu"))

    def labels(self, cluster: str | None) -> dict[str, str]:
        """The labels KubeRay gives this group's pods (template labels + its own)."""
        meta = self.template.get("metadata") or {}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        labels.update({"ray.io/node-type": self.role, "ray.io/group":
                       "headgroup" if self.role == "head" else self.name,
                       "ray.io/is-ray-node": "yes"})
        if cluster:
            labels["ray.io/cluster"] = cluster
        return labels


@dataclass
class ClusterView:
    """One Ray cluster as the rules see it."""

    kind: str  # RayCluster | RayJob | RayService
    name: str
    namespace: str
    path: str  # where the RayCluster spec is: "spec", "spec.rayClusterSpec", ...
    spec: dict[str, Any]
    annotations: dict[str, str]
    groups: list[Group]
    pdbs: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    live: bool = False
    cluster_name: str | None = None  # the RayCluster's name (a RayJob's is generated)

    @property
    def subject(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @property
    def head(self) -> Group | None:
        return next((g for g in self.groups if g.role == "head"), None)

    @property
    def workers(self) -> list[Group]:
        return [g for g in self.groups if g.role == "worker"]


def _params(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        return {}
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in raw.items()}


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _groups(spec: dict[str, Any], path: str) -> list[Group]:
    head = spec.get("headGroupSpec") or {}
    groups = [Group("head", "head", f"{path}.headGroupSpec", _params(head.get("rayStartParams")),
                    head.get("template") or {}, 1, 1)] if isinstance(head, dict) else []
    for i, w in enumerate(spec.get("workerGroupSpecs") or []):
        if isinstance(w, dict):
            groups.append(Group(str(w.get("groupName") or f"group-{i}"), "worker",
                                f"{path}.workerGroupSpecs[{i}]", _params(w.get("rayStartParams")),
                                w.get("template") or {}, _int(w.get("replicas")),
                                _int(w.get("maxReplicas"))))
    return groups


def _status_cluster(obj: dict[str, Any]) -> str | None:
    status = obj.get("status") or {}
    name = status.get("rayClusterName") or (status.get("activeServiceStatus") or {}).get(
        "rayClusterName")
    return str(name) if name else None


def cluster_views(objects: list[dict[str, Any]], live: bool = False) -> list[ClusterView]:
    """Every Ray cluster among ``objects``, with the PDBs and pods of its namespace."""
    views = []
    for obj in objects:
        kind = obj.get("kind")
        if kind not in KINDS or not isinstance(obj.get("spec"), dict):
            continue
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace") or "default")
        path = KINDS[str(kind)]
        spec = _dig(obj, path)
        if not isinstance(spec, dict):
            spec = {}
        name = str(meta.get("name") or "?")
        views.append(ClusterView(
            kind=str(kind), name=name, namespace=ns, path=path, spec=spec,
            annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
            groups=_groups(spec, path), live=live,
            cluster_name=name if kind == "RayCluster" else _status_cluster(obj),
            pdbs=[o for o in objects if o.get("kind") == "PodDisruptionBudget"
                  and str((o.get("metadata") or {}).get("namespace") or "default") == ns],
            pods=[o for o in objects if o.get("kind") == "Pod" and _ray_pod(o)
                  and str((o.get("metadata") or {}).get("namespace") or "default") == ns]))
    return views


def _ray_pod(pod: dict[str, Any]) -> bool:
    """Not a DaemonSet's or a mirror pod (they carry the labels but are no Ray node)."""
    meta = pod.get("metadata") or {}
    if any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or []):
        return False
    return "kubernetes.io/config.mirror" not in (meta.get("annotations") or {})


def pod_labels(pod: dict[str, Any]) -> dict[str, str]:
    return {str(k): str(v) for k, v in ((pod.get("metadata") or {}).get("labels") or {}).items()}


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str],
                     wildcard: tuple[str, ...] = ()) -> bool:
    """Whether a label selector (matchLabels + matchExpressions) selects ``labels``.

    Keys in ``wildcard`` match any value (a RayJob's cluster name is generated at run time)."""
    if not isinstance(selector, dict):
        return False  # no selector selects nothing; an empty one (policy/v1) selects every pod
    for key, value in (selector.get("matchLabels") or {}).items():
        if key in wildcard:
            continue
        if labels.get(str(key)) != str(value):
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op = str(expr.get("key")), str(expr.get("operator"))
        values = [str(v) for v in expr.get("values") or []]
        if key in wildcard:
            continue
        have = labels.get(key)
        ok = {"In": have in values, "NotIn": have not in values, "Exists": have is not None,
              "DoesNotExist": have is None}.get(op, False)
        if not ok:
            return False
    return True
