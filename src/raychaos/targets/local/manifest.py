"""The embedded cluster written as the RayCluster KubeRay would run, for the resilience review.

The review's rules read Kubernetes objects; the local cluster's settings map onto them one to
one — ``head_cpus`` is the head's ``num-cpus``, ``gcs_storage`` its GCS fault tolerance,
``shm_mb`` each pod's ``/dev/shm`` emptyDir ``sizeLimit``, ``worker_reconnect_timeout_s`` the
workers' ``RAY_gcs_rpc_server_reconnect_timeout_s`` — so the same rules judge it, with each
node's live ``/dev/shm`` size (a resize fault changes it) rather than the configured one.
"""

from __future__ import annotations

from typing import Any

from raychaos.config.settings import LocalClusterSpec
from raychaos.targets.local.nodes import NodePlan

__all__ = ["as_raycluster"]

MB = 2**20


def _template(plan: NodePlan, env: dict[str, str]) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "ray-head" if plan.role == "head" else "ray-worker", "image": "local",
        "imagePullPolicy": "IfNotPresent",
        "resources": {"limits": {"memory": f"{plan.memory_bytes // MB}Mi",
                                 **({"nvidia.com/gpu": str(int(plan.gpus))} if plan.gpus
                                    else {})}},
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())]}
    spec: dict[str, Any] = {"containers": [container]}
    if plan.shm_bytes:
        container["volumeMounts"] = [{"name": "dshm", "mountPath": "/dev/shm"}]
        spec["volumes"] = [{"name": "dshm", "emptyDir": {
            "medium": "Memory", "sizeLimit": f"{plan.shm_bytes // MB}Mi"}}]
    return {"metadata": {"labels": dict(plan.labels)}, "spec": spec}


def _params(plan: NodePlan) -> dict[str, str]:
    return {"num-cpus": str(int(plan.cpus)), "num-gpus": str(int(plan.gpus)),
            "object-store-memory": str(plan.object_store_bytes)}


def as_raycluster(spec: LocalClusterSpec, plans: list[NodePlan],
                  redis_address: str | None) -> dict[str, Any]:
    """``spec`` and the node ``plans`` as a ray.io/v1 RayCluster (worker groups by label)."""
    head = next(p for p in plans if p.role == "head")
    cluster: dict[str, Any] = {"spec": {}}
    annotations: dict[str, str] = {"raychaos.io/gcs-storage": spec.gcs_storage}
    if spec.gcs_storage == "redis":
        cluster["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": redis_address or ""}
    elif spec.gcs_storage == "rocksdb":
        annotations["ray.io/ft-enabled"] = "true"
    cluster["spec"]["headGroupSpec"] = {"rayStartParams": _params(head),
                                        "template": _template(head, {})}
    groups: dict[str, list[NodePlan]] = {}
    for plan in plans:
        if plan.role != "head":
            groups.setdefault(plan.labels.get("raychaos.io/node-group", "workers"),
                              []).append(plan)
    cluster["spec"]["workerGroupSpecs"] = [
        {"groupName": name, "replicas": len(members), "maxReplicas": len(members),
         # the smallest /dev/shm of the group: a resize fault makes one pod the odd one out
         "rayStartParams": _params(members[0]),
         "template": _template(min(members, key=lambda p: p.shm_bytes or 1 << 62),
                               {k: v for k, v in members[0].env.items()
                                if k.startswith("RAY_gcs_rpc")})}
        for name, members in sorted(groups.items())]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": spec.name, "namespace": "local", "annotations": annotations},
            **cluster}
