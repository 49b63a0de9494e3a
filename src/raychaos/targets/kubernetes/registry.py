"""Slow image pulls on Kubernetes: a ``tc`` DaemonSet on the nodes Ray pods can land on.

Why a DaemonSet: raychaos cannot run ``tc`` on a node itself, so it creates privileged
``hostNetwork`` pods that do — one per node the RayCluster's pods run on or may be scheduled to
(its groups' ``nodeSelector``). Each redirects the node's ingress from the registry hosts'
addresses to an ``ifb`` device shaped with ``tbf`` (the ``police`` action is missing from some
kernels; ifb + tbf is the same effect and works where ``act_mirred`` does), then prints one
``RAYCHAOS_THROTTLE {...}`` line: the interface, the addresses it resolved, the qdisc as
``tc`` shows it, the filters in place — or the error. "Landed" is that report from every node,
read from the pods' logs, not the API accepting a DaemonSet.

Undo deletes the DaemonSet (its pods remove their qdiscs on SIGTERM) and then runs a cleanup pod
on every node that removes what a pod killed without its trap left behind (``ifb`` device and
ingress qdisc) and reports what it found: ``raychaos rollback`` after a SIGKILLed run leaves
nodes clean too. ``restart_workers`` deletes those worker pods so that KubeRay's replacements
pull under the throttle; their ``Pulled`` events are the evidence.
"""

from __future__ import annotations

import json
import time
from typing import Any

from raychaos.errors import FaultFailed, KubeApiError, NothingMatched, RollbackFailed
from raychaos.results.store import checkpoint
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.informer import watch_until
from raychaos.targets.kubernetes.safety import label_value, object_name, run_labels

__all__ = ["CLEAN_SCRIPT", "THROTTLE_SCRIPT", "TOOL_IMAGE", "clean_nodes", "registry_hosts",
           "report_of", "restart_pods", "throttle_registry_pulls", "wait_reports"]

TOOL_IMAGE = "ghcr.io/nicolaka/netshoot:v0.13"
REPORT, CLEANED = "RAYCHAOS_THROTTLE ", "RAYCHAOS_THROTTLE_CLEAN "
LANDED_WAIT_S = 120.0
CLEAN_WAIT_S = 90.0
IFB = "rcifb0"

_COMMON = f"""IF=$(ip route show default | awk '{{print $5; exit}}')
IFB={IFB}
clean() {{ tc qdisc del dev "$IF" ingress 2>/dev/null; ip link del "$IFB" 2>/dev/null; true; }}
"""
THROTTLE_SCRIPT = _COMMON + f"""trap 'clean; exit 0' TERM INT
clean
ips=""; unresolved=""; err=""
for host in $HOSTS; do
  got=$(getent ahostsv4 "$host" | awk '{{print $1}}' | sort -u | tr '\\n' ' ')
  [ -n "$got" ] || unresolved="$unresolved $host"
  ips="$ips $got"
done
ips=$(echo $ips | tr ' ' '\\n' | sort -u | tr '\\n' ' ')
if [ -z "$IF" ]; then err="no default route on this node"
elif [ -z "$(echo $ips)" ]; then err="no registry host resolved:$unresolved"
else
  {{ ip link add "$IFB" type ifb && ip link set "$IFB" up &&
    tc qdisc add dev "$IFB" root tbf rate "$RATE" burst 32k latency 400ms &&
    tc qdisc add dev "$IF" handle ffff: ingress; }} 2>/tmp/tc.err || err="tc: $(cat /tmp/tc.err)"
  if [ -z "$err" ]; then for ip in $ips; do
    tc filter add dev "$IF" parent ffff: protocol ip u32 match ip src "$ip"/32 \\
      action mirred egress redirect dev "$IFB" 2>/tmp/tc.err || err="tc filter: $(cat /tmp/tc.err)"
  done; fi
fi
qdisc=$(tc qdisc show dev "$IFB" 2>/dev/null | tr '\\n"' "; ")
filters=$(tc filter show dev "$IF" parent ffff: 2>/dev/null | grep -c mirred)
[ -z "$err" ] || clean
echo "{REPORT.strip()} {{\\"node\\": \\"$NODE\\", \\"if\\": \\"$IF\\", \\"ips\\": \\"$ips\\", \\
\\"unresolved\\": \\"$unresolved\\", \\"qdisc\\": \\"$qdisc\\", \\"filters\\": ${{filters:-0}}, \\
\\"rate\\": \\"$RATE\\", \\"error\\": \\"$(printf '%s' "$err" | tr '\\n"' "; ")\\"}}"
sleep 2147483647 & wait
"""
CLEAN_SCRIPT = _COMMON + f"""left=$(ip link show "$IFB" >/dev/null 2>&1 && echo ifb; \\
  tc qdisc show dev "$IF" ingress 2>/dev/null | grep -q ingress && echo ingress)
clean
echo "{CLEANED.strip()} {{\\"node\\": \\"$NODE\\", \\"removed\\": \\"$(echo $left)\\"}}"
"""


def registry_hosts(images: list[str]) -> list[str]:
    """The hosts images are pulled from (a ``:port`` dropped: getent resolves names), Docker
    Hub's blob CDN added to Docker Hub (its layers do not come from registry-1 itself)."""
    hosts = set()
    for image in images:
        first = image.split("/", 1)[0]
        if "/" in image and ("." in first or ":" in first or first == "localhost"):
            hosts.add(first.split(":", 1)[0])
        else:
            hosts |= {"registry-1.docker.io", "production.cloudflare.docker.com"}
    return sorted(hosts)


def _node_affinity(nodes: list[str]) -> dict[str, Any]:
    """Exactly these nodes: one term per node (terms are ORed). A node field selector takes
    one value per ``In``: the real API server refuses ``metadata.name In [a, b]`` ("must be
    only one value when `operator` is 'In' or 'NotIn' for node field selector", 422 — found
    on the test bed; our KubeRay world had accepted it)."""
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]} for node in nodes]}}}


def tool_container(script: str, image: str, env: dict[str, str], name: str = "tc"
                   ) -> dict[str, Any]:
    """A privileged container running ``script`` with ``env`` and its node's name in ``NODE``."""
    return {"name": name, "image": image, "command": ["sh", "-c", script],
            "env": [{"name": k, "value": v} for k, v in env.items()]
            + [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
            "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN"]}}}


def node_daemonset(name: str, ns: str, run_id: str, fault: str, nodes: list[str],
                   container: dict[str, Any]) -> dict[str, Any]:
    """A ``hostNetwork`` DaemonSet of ``container`` on exactly ``nodes`` (taints tolerated),
    labelled with the run and ``fault`` (what the undo and the report wait select on)."""
    labels = run_labels(run_id, **{"raychaos.io/fault": fault})
    return {"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": name, "namespace": ns, "labels": labels},
            "spec": {"selector": {"matchLabels": {"raychaos.io/run-id": label_value(run_id),
                                                  "raychaos.io/fault": fault}},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "hostNetwork": True, "affinity": _node_affinity(nodes),
                         "tolerations": [{"operator": "Exists"}],
                         "terminationGracePeriodSeconds": 10,
                         "containers": [container]}}}}


def report_of(api: ApiSession, ns: str, pod: str, marker: str = REPORT) -> dict[str, Any] | None:
    """The last ``marker`` JSON line of ``pod``'s log, or None."""
    try:
        text = api.read_text(api.core.read_namespaced_pod_log, pod, ns)
    except KubeApiError:
        return None
    for line in reversed(text.splitlines()):
        if line.startswith(marker):
            try:
                parsed: dict[str, Any] = json.loads(line[len(marker):])
                return parsed
            except ValueError:
                return {"error": f"unreadable report: {line[:200]}"}
    return None


def throttle_registry_pulls(api: ApiSession, ns: str, run_id: str, record: dict[str, Any], *,
                            rate: str, nodes: list[str], hosts: list[str],
                            image: str = TOOL_IMAGE) -> dict[str, Any]:
    """Create the throttling DaemonSet on ``nodes`` and wait for every node's report."""
    if not nodes or not hosts:
        raise NothingMatched("throttle_registry_pulls: give at least one node and one "
                             "registry host")
    name = object_name("raychaos-pull-throttle", run_id)
    body = node_daemonset(name, ns, run_id, "throttle-registry-pulls", nodes, tool_container(
        THROTTLE_SCRIPT, image, {"RATE": rate, "HOSTS": " ".join(hosts)}))
    record["undo"] = {"kind": "throttle_registry_pulls", "nodes": list(nodes), "image": image,
                      "run_id": run_id, "objects": [
                          {"api": "daemonset", "namespace": ns, "name": name}]}
    checkpoint(record)
    api.write("POST", f"/apis/apps/v1/namespaces/{ns}/daemonsets",
              api.apps.create_namespaced_daemon_set, ns, body=body)
    evidence: dict[str, Any] = {"daemonset": f"{ns}/{name}", "rate": rate, "nodes": list(nodes),
                                "registry_hosts": list(hosts), "dry_run": api.gate.dry_run}
    if api.gate.dry_run:
        return evidence
    reports = wait_reports(api, ns, f"raychaos.io/run-id={label_value(run_id)},raychaos.io/fault="
                            f"throttle-registry-pulls", nodes, REPORT, LANDED_WAIT_S)
    evidence["reports"] = reports
    bad = {n: r.get("error") or ("no report" if not r else "no filter in place")
           for n, r in reports.items() if not r or r.get("error") or not r.get("filters")}
    if bad:
        raise FaultFailed("throttle_registry_pulls: the throttle did not land on "
                          + "; ".join(f"{n}: {why}" for n, why in sorted(bad.items())))
    return evidence


def restart_pods(api: ApiSession, ns: str, cluster: str, pods: list[dict[str, Any]],
                 current: list[dict[str, Any]]) -> dict[str, Any]:
    """Delete ``pods`` (grace 0) and follow KubeRay's replacements until Ready, with the
    ``Pulled`` events of each: a pull under the throttle, or "already present" (none)."""
    from raychaos.targets.kubernetes.drain import wait_replaced
    from raychaos.targets.kubernetes.events import pod_pulls

    before, t0 = {p["metadata"]["uid"] for p in current}, time.monotonic()
    for pod in pods:
        name = pod["metadata"]["name"]
        api.delete_quietly(f"/api/v1/namespaces/{ns}/pods/{name}",
                           api.core.delete_namespaced_pod, name, ns,
                           body={"gracePeriodSeconds": 0})
    back = wait_replaced(api, ns, cluster, before, pods, t0)
    for row in back.get("replacements", []):
        row["pulls"] = pod_pulls(api, ns, row["pod"])
    return {"pods": [p["metadata"]["name"] for p in pods], **back}


def wait_reports(api: ApiSession, ns: str, selector: str, nodes: list[str], marker: str,
                  timeout: float) -> dict[str, dict[str, Any]]:
    """Per node, the report of the (Running or finished) pod there; {} for a node without."""
    reports: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        def started(objs: dict[str, dict[str, Any]]) -> list[dict[str, Any]] | None:
            ready = [o for o in objs.values() if (o.get("status") or {}).get("phase") in
                     ("Running", "Succeeded", "Failed") and o["spec"].get("nodeName")
                     in nodes and o["spec"]["nodeName"] not in reports]
            return ready or None

        pods = watch_until(api, api.core.list_namespaced_pod, ns, check=started,
                           timeout=max(1.0, deadline - time.monotonic()),
                           label_selector=selector) or []
        for pod in pods:
            got = report_of(api, ns, pod["metadata"]["name"], marker)
            if got is not None:
                reports[pod["spec"]["nodeName"]] = got
        if len(reports) == len(nodes):
            break
        time.sleep(0.3)
    return {n: reports.get(n, {}) for n in nodes}


def clean_nodes(api: ApiSession, ns: str, undo: dict[str, Any]) -> dict[str, Any]:
    """After the DaemonSet is deleted: wait for its pods to go, then a cleanup pod per node
    removes any ifb device / ingress qdisc a killed pod left; returns what each removed."""
    run_id, nodes = undo.get("run_id", "undo"), list(undo.get("nodes") or [])
    selector = f"raychaos.io/run-id={label_value(run_id)},raychaos.io/fault=throttle-registry-pulls"
    watch_until(api, api.core.list_namespaced_pod, ns, check=lambda objs: not objs,
                timeout=40, label_selector=selector)
    labels = run_labels(run_id, **{"raychaos.io/fault": "throttle-cleanup"})
    names = {}
    for node in nodes:
        name = object_name("raychaos-throttle-clean", run_id, node)
        names[node] = name
        api.delete_quietly(f"/api/v1/namespaces/{ns}/pods/{name}",
                           api.core.delete_namespaced_pod, name, ns,
                           body={"gracePeriodSeconds": 0})
        api.write("POST", f"/api/v1/namespaces/{ns}/pods", api.core.create_namespaced_pod, ns,
                  body={"apiVersion": "v1", "kind": "Pod", "metadata": {
                      "name": name, "namespace": ns, "labels": labels}, "spec": {
                      "nodeName": node, "hostNetwork": True, "restartPolicy": "Never",
                      "tolerations": [{"operator": "Exists"}],
                      "terminationGracePeriodSeconds": 0,
                      "containers": [tool_container(CLEAN_SCRIPT, undo.get("image", TOOL_IMAGE),
                                                {})]}})
    reports = wait_reports(api, ns, f"raychaos.io/run-id={label_value(run_id)},raychaos.io/fault="
                            f"throttle-cleanup", nodes, CLEANED, CLEAN_WAIT_S)
    for name in names.values():
        api.delete_quietly(f"/api/v1/namespaces/{ns}/pods/{name}",
                           api.core.delete_namespaced_pod, name, ns,
                           body={"gracePeriodSeconds": 0})
    missing = [n for n, r in reports.items() if not r]
    if missing:
        raise RollbackFailed(f"throttle_registry_pulls: could not check node(s) "
                             f"{', '.join(missing)} for a leftover ifb/ingress qdisc (the "
                             f"cleanup pod did not report)")
    return {n: r.get("removed", "") for n, r in reports.items()}
