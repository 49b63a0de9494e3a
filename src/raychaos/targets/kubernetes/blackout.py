"""Network blackouts of KubeRay pods: every packet of the chosen pods dropped, then restored.

Why these mechanics: a Chaos Mesh ``NetworkChaos`` partition of the pods (no ``target``: all
their traffic, as the local blackout drops) when its CRD is installed, otherwise a privileged
``hostNetwork`` DaemonSet on the pods' nodes that drops their traffic with iptables (FORWARD)
until it is deleted; the cut has landed when every node's pod reported its DROP rules in place
(a ``RAYCHAOS_BLACKOUT`` line in its log; a node without iptables reports the error). Restoring
deletes what the cut created (404: already gone). Every mutating call goes through the dry-run
gate; every object created carries ``raychaos.io/run-id``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raychaos.errors import FaultFailed
from raychaos.results.store import checkpoint
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.network import CHAOS_MESH, chaos_mesh_installed, delete_created
from raychaos.targets.kubernetes.raycluster import RayClusterHandle
from raychaos.targets.kubernetes.registry import (
    LANDED_WAIT_S,
    TOOL_IMAGE,
    node_daemonset,
    tool_container,
    wait_reports,
)
from raychaos.targets.kubernetes.safety import chosen_pods, label_value, object_name, run_labels

if TYPE_CHECKING:
    from raychaos.targets.kubernetes.target import KubernetesTarget

__all__ = ["BLACKOUT_REPORT", "cut", "cut_network", "restore", "restore_network"]

BLACKOUT_REPORT = "RAYCHAOS_BLACKOUT "
# one report line per node: the rules in place or the error (a node without iptables, a rule
# refused); "landed" is that report from every node, never the API accepting the DaemonSet
BLACKOUT_SCRIPT = """err=""
rules() { for ip in $POD_IPS; do iptables -$1 FORWARD -s "$ip" -j DROP && \\
  iptables -$1 FORWARD -d "$ip" -j DROP || return 1; done; }
trap 'rules D 2>/dev/null; exit 0' TERM INT
rules I 2>/tmp/blackout.err || err="iptables: $(cat /tmp/blackout.err)"
[ -z "$err" ] || rules D 2>/dev/null
n=$(iptables -S FORWARD 2>/dev/null | grep -c -- '-j DROP')
echo "RAYCHAOS_BLACKOUT {\\"node\\": \\"$NODE\\", \\"ips\\": \\"$POD_IPS\\", \\
\\"rules\\": ${n:-0}, \\"error\\": \\"$(printf '%s' "$err" | tr '\\n"' "; ")\\"}"
sleep 2147483647 & wait
"""


def cut(handle: RayClusterHandle, run_id: str, record: dict[str, Any], *,
        nodes: list[str]) -> dict[str, Any]:
    """Cut all traffic of ``nodes`` (pods): a NetworkChaos partition, else a DaemonSet."""
    api, ns = handle.api, handle.ns
    pods = chosen_pods(handle, nodes, "blackout")
    names = [p["metadata"]["name"] for p in pods]
    undo = record.get("undo") or {"kind": "blackout", "objects": []}
    n = len(undo["objects"]) + 1
    name = object_name("raychaos-blackout", run_id, str(n))
    labels = run_labels(run_id, **{"raychaos.io/fault": "blackout"})
    cut_at = time.time()
    if chaos_mesh_installed(api):
        group, version, plural = CHAOS_MESH
        body = {"apiVersion": f"{group}/{version}", "kind": "NetworkChaos",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {"action": "partition", "mode": "all", "direction": "both",
                         "selector": {"pods": {ns: names}}}}
        undo["objects"].append({"api": "networkchaos", "namespace": ns, "name": name})
        record["undo"] = undo
        checkpoint(record)  # on disk before the object exists
        api.write("POST", f"/apis/{group}/{version}/namespaces/{ns}/{plural}",
                  api.custom.create_namespaced_custom_object, group, version, ns, plural,
                  body=body)
        via = "chaos-mesh partition"
    else:
        ips = [p.get("status", {}).get("podIP") for p in pods]
        hosts = sorted({p["spec"].get("nodeName") for p in pods if p["spec"].get("nodeName")})
        body = node_daemonset(name, ns, run_id, "blackout", hosts, tool_container(
            BLACKOUT_SCRIPT, TOOL_IMAGE, {"POD_IPS": " ".join(i for i in ips if i)},
            name="drop"))
        undo["objects"].append({"api": "daemonset", "namespace": ns, "name": name})
        record["undo"] = undo
        checkpoint(record)  # on disk before the object exists
        api.write("POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets",
                  api.apps.create_namespaced_daemon_set, ns, body=body)
        via = "iptables daemonset"
        if not api.gate.dry_run:
            reports = wait_reports(api, ns, f"raychaos.io/run-id={label_value(run_id)},"
                                   "raychaos.io/fault=blackout", hosts, BLACKOUT_REPORT,
                                   LANDED_WAIT_S)
            bad = {h: r.get("error") or ("no report" if not r else "no DROP rule in place")
                   for h, r in reports.items() if not r or r.get("error") or not r.get("rules")}
            if bad:
                raise FaultFailed("blackout: the cut did not land on " + "; ".join(
                    f"{h}: {why}" for h, why in sorted(bad.items())))
            cut_at = time.time()  # every node's rules are in place by now (reports read)
            return {"nodes": list(nodes), "pods": names, "via": via, "object": f"{ns}/{name}",
                    "cut_at": cut_at, "dry_run": False, "landed": True, "reports": reports}
    return {"nodes": list(nodes), "pods": names, "via": via, "object": f"{ns}/{name}",
            "cut_at": cut_at, "dry_run": api.gate.dry_run, "landed": not api.gate.dry_run}


def restore(api: ApiSession, record: dict[str, Any]) -> dict[str, Any]:
    """Delete every object the cuts of this record created; idempotent."""
    undo = record.get("undo") or {}
    return {"undone": True, "deleted": delete_created(api, undo), "restored_at": time.time(),
            "dry_run": api.gate.dry_run}


def cut_network(self: KubernetesTarget, *, nodes: list[str], record: dict[str, Any]
                ) -> dict[str, Any]:
    return cut(self._handle(), self.run_id, record, nodes=nodes)


def restore_network(self: KubernetesTarget, record: dict[str, Any]) -> dict[str, Any]:
    return restore(self._api(), record)
