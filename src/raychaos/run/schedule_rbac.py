"""The least privilege a scheduled game day needs, in three parts: a Role in the RayCluster's
namespace, a ClusterRole, and a separate, opt-in Role for the network faults.

Why three: what the harness does to a RayCluster (read it and its RayJob/RayService, watch and
delete its pods, exec ``pkill`` in the head, port-forward, hold its run Lease, read pull events)
is namespaced; a drain is not (cordon a node, evict whatever runs on it in any namespace, read
the PodDisruptionBudgets that block it); and the network and registry faults create privileged
DaemonSets and pods — ``pods create`` + ``daemonsets create`` is root on every node — so they
get their own Role that a platform team grants only on purpose (``--network``).

The rules are the ones ``deploy/rbac.yaml`` grants (``tests/k8s/simbed/test_rbac.py`` proves
those are exactly the calls the code makes, running as its ServiceAccount against the real RBAC
authorizer), split along that line; the same module applies the rendered manifests to the test
bed, runs a game day's calls as the schedule's ServiceAccount and reads from the API server's
audit log that each was allowed and each rule used.
Leases and events stay in the namespaced Role: the code only ever uses them in the RayCluster's
namespace (the run Lease, the kubelet's Pulled events), so a ClusterRole would grant more.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLUSTER_RULES", "NAMESPACE_RULES", "NETWORK_RULES", "rbac_manifests"]

Rule = dict[str, Any]


def _rule(group: str, resources: list[str], verbs: list[str], **extra: Any) -> Rule:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs, **extra}


NAMESPACE_RULES: list[Rule] = [
    _rule("ray.io", ["rayclusters"], ["get", "list", "patch"]),  # fault flags in a template
    _rule("ray.io", ["rayjobs", "rayservices"], ["get"]),     # target.kubernetes.kind
    _rule("", ["pods"], ["watch", "delete"]),                  # the informer, head kill
    _rule("", ["pods/exec"], ["create", "get"]),               # kill_head gcs|head
    _rule("", ["pods/portforward"], ["create", "get"]),        # the dashboard, Serve
    _rule("", ["pods/log"], ["get"]),
    _rule("", ["pods/proxy"], ["get"]),                        # the Ray pods' metrics
    _rule("", ["services"], ["get"]),                          # head / serve Service selectors
    _rule("", ["secrets"], ["get"]),                           # the Ray token, when used
    _rule("", ["events"], ["list", "watch"]),                  # image pull durations
    _rule("coordination.k8s.io", ["leases"], ["get", "create", "patch", "delete"]),
]
CLUSTER_RULES: list[Rule] = [
    _rule("", ["nodes"], ["list", "patch"]),                   # GPU nodes, cordon/uncordon
    _rule("", ["pods"], ["get", "list"]),                      # a drain's pods, any namespace
    _rule("", ["pods/eviction"], ["create"]),                  # evicted through the Eviction API
    _rule("policy", ["poddisruptionbudgets"], ["list"]),       # explain a 429
    _rule("apiextensions.k8s.io", ["customresourcedefinitions"], ["get"],
          resourceNames=["networkchaos.chaos-mesh.org"]),      # is Chaos Mesh installed?
]
NETWORK_RULES: list[Rule] = [
    _rule("", ["pods"], ["create"]),                           # iperf3 / cleanup helper pods
    _rule("apps", ["daemonsets"], ["list", "create", "delete"]),  # the throttle DaemonSet
    _rule("chaos-mesh.org", ["networkchaos"], ["get", "list", "create", "delete"]),
]


def rbac_manifests(name: str, sa_namespace: str, target_namespace: str,
                   labels: dict[str, str], network: bool) -> list[dict[str, Any]]:
    """Role + RoleBinding (target namespace), ClusterRole + ClusterRoleBinding, and with
    ``network`` the opt-in network Role + RoleBinding, all bound to ServiceAccount ``name``."""
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": sa_namespace}]
    ns_meta = {"name": name, "namespace": target_namespace, "labels": labels}
    cluster_meta = {"name": f"{name}-{sa_namespace}", "labels": labels}
    rbac = "rbac.authorization.k8s.io/v1"

    def binding(kind: str, meta: dict[str, Any], role_kind: str) -> dict[str, Any]:
        return {"apiVersion": rbac, "kind": kind, "metadata": meta, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind,
                            "name": meta["name"]}}

    out = [{"apiVersion": rbac, "kind": "Role", "metadata": ns_meta, "rules": NAMESPACE_RULES},
           binding("RoleBinding", ns_meta, "Role"),
           {"apiVersion": rbac, "kind": "ClusterRole", "metadata": cluster_meta,
            "rules": CLUSTER_RULES},
           binding("ClusterRoleBinding", cluster_meta, "ClusterRole")]
    if network:
        net_meta = {**ns_meta, "name": f"{name}-network",
                    "labels": {**labels, "raychaos.io/privileged": "true"}}
        out += [{"apiVersion": rbac, "kind": "Role", "metadata": net_meta,
                 "rules": NETWORK_RULES}, binding("RoleBinding", net_meta, "Role")]
    return out
