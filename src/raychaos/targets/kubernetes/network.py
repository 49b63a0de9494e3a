"""Network faults on Kubernetes: throttle image-registry pulls and saturate node links.

Why these objects: raychaos cannot run ``tc`` on a node itself, so it creates Kubernetes objects
that do — a privileged ``hostNetwork`` DaemonSet that polices ingress from the registry's
addresses (a slow pull is what a scale-up or a replaced head pod meets in production), and for
link saturation a Chaos Mesh ``NetworkChaos`` when that CRD exists, else iperf3 pod pairs. Every
object carries ``raychaos.io/run-id``; undo and ``cleanup_run`` delete them (404 = already gone).
The DaemonSet removes its qdisc on SIGTERM, so deleting it is the undo.
"""

from __future__ import annotations

import re
from typing import Any

from raychaos.errors import KubeApiError, NothingMatched
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.safety import run_labels

__all__ = [
    "IPERF_IMAGE", "TOOL_IMAGE", "UNDO_KINDS", "delete_created", "delete_labelled",
    "go_duration_s", "image_pull_seconds", "pull_events", "saturate_network",
    "throttle_registry_pulls",
]

TOOL_IMAGE = "ghcr.io/nicolaka/netshoot:v0.13"
IPERF_IMAGE = "networkstatic/iperf3:latest"
UNDO_KINDS = ("throttle_registry_pulls", "saturate_network")
CHAOS_MESH = ("chaos-mesh.org", "v1alpha1", "networkchaos")

THROTTLE_SCRIPT = """set -eu
IF=$(ip route show default | awk '{print $5; exit}')
clean() { tc qdisc del dev "$IF" ingress 2>/dev/null || true; }
trap 'clean; exit 0' TERM INT
clean; tc qdisc add dev "$IF" handle ffff: ingress
for host in $HOSTS; do
  for ip in $(getent ahostsv4 "$host" | awk '{print $1}' | sort -u); do
    tc filter add dev "$IF" parent ffff: protocol ip u32 match ip src "$ip"/32 \\
      police rate "$RATE" burst 64k drop flowid :1
  done
done
echo "throttled $HOSTS to $RATE on $IF"; sleep infinity & wait
"""


def _node_affinity(nodes: list[str]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": list(nodes)}]}]}}}


def throttle_registry_pulls(api: ApiSession, ns: str, run_id: str, record: dict[str, Any], *,
                            rate: str, nodes: list[str], registry_hosts: list[str],
                            image: str = TOOL_IMAGE) -> dict[str, Any]:
    """Create the throttling DaemonSet on ``nodes``; evidence names it and its settings."""
    if not nodes or not registry_hosts:
        raise NothingMatched("throttle_registry_pulls: give at least one node and one "
                             "registry host")
    name = f"raychaos-pull-throttle-{run_id}"[:63]
    labels = run_labels(run_id, **{"raychaos.io/fault": "throttle-registry-pulls"})
    body = {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"selector": {"matchLabels": {"raychaos.io/run-id": run_id,
                                              "raychaos.io/fault": "throttle-registry-pulls"}},
                 "template": {"metadata": {"labels": labels}, "spec": {
                     "hostNetwork": True, "affinity": _node_affinity(nodes),
                     "tolerations": [{"operator": "Exists"}],
                     "terminationGracePeriodSeconds": 10,
                     "containers": [{
                         "name": "tc", "image": image, "command": ["sh", "-c", THROTTLE_SCRIPT],
                         "env": [{"name": "RATE", "value": rate},
                                 {"name": "HOSTS", "value": " ".join(registry_hosts)}],
                         "securityContext": {"privileged": True,
                                             "capabilities": {"add": ["NET_ADMIN"]}}}]}}}}
    record["undo"] = {"kind": "throttle_registry_pulls", "objects": [
        {"api": "daemonset", "namespace": ns, "name": name}]}
    api.write("POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets",
              api.apps.create_namespaced_daemon_set, ns, body=body)
    return {"daemonset": f"{ns}/{name}", "rate": rate, "nodes": list(nodes),
            "registry_hosts": list(registry_hosts), "dry_run": api.gate.dry_run}


def chaos_mesh_installed(api: ApiSession) -> bool:
    crd = api.read_or_none(api.apiext.read_custom_resource_definition,
                           "networkchaos.chaos-mesh.org")
    return crd is not None


def saturate_network(api: ApiSession, ns: str, cluster: str, run_id: str,
                     record: dict[str, Any], *, nodes: list[str] | None, rate: str,
                     duration_s: int, image: str = IPERF_IMAGE) -> dict[str, Any]:
    """Squeeze Ray pods' bandwidth to ``rate`` for ``duration_s`` (Chaos Mesh), or fill the
    links between consecutive ``nodes`` with iperf3 for ``duration_s`` (no Chaos Mesh)."""
    labels = run_labels(run_id, **{"raychaos.io/fault": "saturate-network"})
    name = f"raychaos-net-{run_id}"[:63]
    if chaos_mesh_installed(api):
        group, version, plural = CHAOS_MESH
        body = {"apiVersion": f"{group}/{version}", "kind": "NetworkChaos",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {"action": "bandwidth", "mode": "all", "duration": f"{duration_s}s",
                         "selector": {"namespaces": [ns],
                                      "labelSelectors": {"ray.io/cluster": cluster}},
                         "bandwidth": {"rate": rate, "limit": 20971520, "buffer": 10000}}}
        record["undo"] = {"kind": "saturate_network", "objects": [
            {"api": "networkchaos", "namespace": ns, "name": name}]}
        api.write("POST", f"/apis/{group}/{version}/namespaces/{ns}/{plural}",
                  api.custom.create_namespaced_custom_object, group, version, ns, plural,
                  body=body)
        return {"via": "chaos-mesh", "networkchaos": f"{ns}/{name}", "rate": rate,
                "dry_run": api.gate.dry_run}
    if not nodes or len(nodes) < 2:
        raise NothingMatched("saturate_network: without Chaos Mesh, give at least two nodes "
                             "for iperf3 pairs")
    pairs = list(zip(nodes[0::2], nodes[1::2], strict=False))
    objects = [{"api": "pod", "namespace": ns, "name": f"{name}-{i}-{role}"}
               for i in range(len(pairs)) for role in ("server", "client")]
    record["undo"] = {"kind": "saturate_network", "objects": objects}
    for i, (server_node, client_node) in enumerate(pairs):
        ip = _internal_ip(api, server_node)
        for role, node, cmd in (
                ("server", server_node, ["iperf3", "-s"]),
                ("client", client_node, ["sh", "-c", f"until iperf3 -c {ip} -t {duration_s} "
                                                     f"-P 8; do sleep 1; done"])):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"{name}-{i}-{role}", "namespace": ns,
                                "labels": labels},
                   "spec": {"nodeName": node, "hostNetwork": True, "restartPolicy": "Never",
                            "containers": [{"name": "iperf3", "image": image,
                                            "command": cmd}]}}
            api.write("POST", f"/api/v1/namespaces/{ns}/pods",
                      api.core.create_namespaced_pod, ns, body=pod)
    return {"via": "iperf3", "pairs": [list(p) for p in pairs], "duration_s": duration_s,
            "pods": [o["name"] for o in objects], "dry_run": api.gate.dry_run}


def _internal_ip(api: ApiSession, node: str) -> str:
    addresses = api.read(api.core.read_node, node).get("status", {}).get("addresses") or []
    return next((a["address"] for a in addresses if a["type"] == "InternalIP"), node)


def _delete(api: ApiSession, obj: dict[str, str]) -> bool:
    ns, name, kind = obj["namespace"], obj["name"], obj["api"]
    if kind == "daemonset":
        return api.delete_quietly(f"/apis/apps/v1/namespaces/{ns}/daemonsets/{name}",
                                  api.apps.delete_namespaced_daemon_set, name, ns)
    if kind == "pod":
        return api.delete_quietly(f"/api/v1/namespaces/{ns}/pods/{name}",
                                  api.core.delete_namespaced_pod, name, ns)
    group, version, plural = CHAOS_MESH
    return api.delete_quietly(f"/apis/{group}/{version}/namespaces/{ns}/{plural}/{name}",
                              api.custom.delete_namespaced_custom_object, group, version, ns,
                              plural, name)


def delete_created(api: ApiSession, undo: dict[str, Any]) -> list[str]:
    """Delete the objects an undo record names; those already gone are fine."""
    return [o["name"] for o in undo.get("objects", []) if _delete(api, o)]


def delete_labelled(api: ApiSession, ns: str, selector: str) -> list[str]:
    """Find and delete leftovers carrying ``selector`` (DaemonSets, pods, NetworkChaos)."""
    found = [{"api": "daemonset", "namespace": ns, "name": d["metadata"]["name"]}
             for d in api.read(api.apps.list_namespaced_daemon_set, ns,
                               label_selector=selector)["items"]]
    found += [{"api": "pod", "namespace": ns, "name": p["metadata"]["name"]}
              for p in api.read(api.core.list_namespaced_pod, ns,
                                label_selector=selector)["items"]]
    if chaos_mesh_installed(api):
        try:
            found += [{"api": "networkchaos", "namespace": ns, "name": c["metadata"]["name"]}
                      for c in api.read(api.custom.list_namespaced_custom_object,
                                        *CHAOS_MESH[:2], ns, CHAOS_MESH[2],
                                        label_selector=selector)["items"]]
        except KubeApiError as exc:
            if exc.status != 404:
                raise
    return [o["name"] for o in found if _delete(api, o)]


PULLED = re.compile(r'Successfully pulled image "(?P<image>[^"]+)" in (?P<took>[0-9hmsµu.]+)')
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(h|ms|us|µs|ns|m|s)")


def go_duration_s(text: str) -> float | None:
    """Seconds in a Go duration as the kubelet prints it: ``12.3s``, ``1m23.456s``, ``456ms``,
    ``1h2m3.5s``; None when it is not one."""
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def image_pull_seconds(api: ApiSession, ns: str) -> list[float]:
    """Pull durations from the kubelet's ``Pulled`` events, in seconds."""
    return [float(e["seconds"]) for e in pull_events(api, ns, 0.0)]


def pull_events(api: ApiSession, ns: str, since: float) -> list[dict[str, Any]]:
    """The kubelet's ``Pulled`` events after ``since`` (wall clock) as cluster events:
    ``{"ts", "event": "image_pulled", "node": pod, "image", "seconds"}``, oldest first."""
    events = api.read(api.core.list_namespaced_event, ns, field_selector="reason=Pulled")
    out = []
    for ev in events["items"]:
        m = PULLED.search(ev.get("message", ""))
        seconds = go_duration_s(m["took"]) if m else None
        if m is None or seconds is None:
            continue
        ts = _event_time(ev)
        if ts <= since:
            continue
        out.append({"ts": ts, "event": "image_pulled", "image": m["image"],
                    "node": (ev.get("involvedObject") or {}).get("name", ""),
                    "seconds": round(seconds, 3)})
    return sorted(out, key=lambda e: e["ts"])


def _event_time(ev: dict[str, Any]) -> float:
    from datetime import datetime

    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        text = ev.get(key) or ((ev.get("metadata") or {}).get("creationTimestamp")
                               if key == "firstTimestamp" else None)
        if text:
            try:
                return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0
