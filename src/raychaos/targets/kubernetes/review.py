"""The live objects a resilience review reads: the Ray object, its namespace's PDBs, its pods.

``raychaos review --live raycluster/NAME`` and the Kubernetes target's preflight (its
``review_objects``) both come here, so a live cluster is judged on what the API server holds:
the RayCluster (or RayJob / RayService) as stored, every PodDisruptionBudget of the namespace
and the pods KubeRay made — their ``shared-mem`` volumes and the nodes they landed on.
"""

from __future__ import annotations

from typing import Any

from raychaos.errors import ConfigError, KubeApiError, TargetUnavailable
from raychaos.targets.kubernetes.client import ApiSession

__all__ = ["PLURALS", "live_objects", "read_live_objects"]

PLURALS = {"raycluster": "rayclusters", "rayjob": "rayjobs", "rayservice": "rayservices"}
KINDS = {"rayclusters": "RayCluster", "rayjobs": "RayJob", "rayservices": "RayService"}


def _cluster_name(obj: dict[str, Any]) -> str | None:
    if obj.get("kind") == "RayCluster":
        return str(obj["metadata"]["name"])
    status = obj.get("status") or {}
    name = status.get("rayClusterName") or (status.get("activeServiceStatus") or {}).get(
        "rayClusterName")
    return str(name) if name else None


def live_objects(api: ApiSession, namespace: str, ray_object: dict[str, Any],
                 kind: str = "RayCluster") -> list[dict[str, Any]]:
    """``ray_object`` with the namespace's PDBs and the pods of its RayCluster (kinds set:
    list items come without them)."""
    ray_object = {"kind": kind, **ray_object}
    out = [ray_object]
    for pdb in api.read(api.policy.list_namespaced_pod_disruption_budget, namespace)["items"]:
        out.append({"kind": "PodDisruptionBudget", "apiVersion": "policy/v1", **pdb})
    cluster = _cluster_name(ray_object)
    if cluster:
        pods = api.read(api.core.list_namespaced_pod, namespace,
                        label_selector=f"ray.io/cluster={cluster}")["items"]
        out += [{"kind": "Pod", "apiVersion": "v1", **p} for p in pods]
    return out


def read_live_objects(kind: str, name: str | None, namespace: str, *,
                      context: str | None = None, kubeconfig: str | None = None
                      ) -> list[dict[str, Any]]:
    """Connect, read ``kind/name`` (the only one of its kind when no name), and its context."""
    plural = PLURALS.get(kind.lower().rstrip("s") if kind.lower().endswith("s") else kind.lower())
    if plural is None:
        raise ConfigError(f"--live: expected raycluster/NAME, rayjob/NAME or rayservice/NAME, "
                          f"got {kind!r}")
    api = ApiSession.connect(kubeconfig, context)
    try:
        if name:
            obj = api.read(api.custom.get_namespaced_custom_object, "ray.io", "v1", namespace,
                           plural, name)
        else:
            items = api.read(api.custom.list_namespaced_custom_object, "ray.io", "v1",
                             namespace, plural)["items"]
            if len(items) != 1:
                raise ConfigError(f"--live {kind}: {len(items)} {plural} in namespace "
                                  f"{namespace}; name one")
            obj = items[0]
        return live_objects(api, namespace, obj, KINDS[plural])
    except KubeApiError as exc:
        if exc.status == 404:
            raise TargetUnavailable(f"kubernetes API at {api.host}: no {kind} "
                                    f"{name or ''} in namespace {namespace}") from exc
        raise TargetUnavailable(f"kubernetes API at {api.host}: HTTP {exc.status} reading "
                                f"{plural} in {namespace}: {exc.message}") from exc
    finally:
        api.close()
