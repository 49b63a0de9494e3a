"""Simulated nodes for the test bed: Nodes whose kubelet runs nothing.

``raychaos testbed up --sim-nodes`` starts this beside the real control plane and operator: it
registers each node (capacity, labels, taints, Ready), renews its Lease in ``kube-node-lease``
as a kubelet does (the node lifecycle controller marks a node that stops unreachable), and for
every pod the scheduler binds to one of them writes the status a kubelet writes — Running and
Ready ``ready_after_s`` after it first saw the pod, an IP from 127.19.240.0/20 — and, once the
pod is being deleted, removes it after ``min(grace, stop_after_s)`` (the kubelet's final delete,
with the pod's UID as a precondition).

Why: KubeRay's operator, the scheduler, the garbage collector, PodDisruptionBudgets and the
Eviction API are the real ones, and what they do with many pods can be measured without Ray
processes, without root and in seconds (a drain of 4 GPU nodes carrying 32 Ray workers). No
process runs, so nothing Ray answers: exec, logs and port-forward to these pods fail, and a
RayCluster on them is ``ready`` to KubeRay but has no GCS. The real nodes (``--nodes``) are the
ones whose pods run Ray.

Loopback pod IPs: nothing listens at a simulated pod, and no packet may leave the machine for
one — an address off the host (the benchmarking range first used here) went out of the default
route when the harness scraped a pod's metrics through the API server's pod proxy. The API
server refuses to proxy to a loopback address (400, after authorizing the request: RBAC and the
audit log see it) and the endpoint controllers refuse loopback endpoints, so Services of
simulated pods have none — nothing there would answer.

Polling, not watching: one list of the pods every ``TICK_S`` — simple, and plenty for a bed.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["LEASE_S", "SimNodes", "main", "node_object", "running_status"]

log = logging.getLogger("raychaos.testbed.simnodes")
TICK_S = 0.5
LEASE_S = 40  # a kubelet's nodeLeaseDurationSeconds
RENEW_S = 10.0  # a kubelet renews its lease every quarter of that


def _now(micro: bool = False) -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def node_object(spec: dict[str, Any]) -> dict[str, Any]:
    """The Node of one entry of the bed's node list (``name``, ``cpu``, ``gpus``, ``labels``,
    ``taints``)."""
    capacity = {"cpu": str(spec["cpu"]), "memory": str(spec.get("memory", "8Gi")),
                "pods": "110", **({"nvidia.com/gpu": str(spec["gpus"])} if spec.get("gpus")
                                  else {})}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": spec["name"], "labels": {"kubernetes.io/hostname": spec["name"],
                                         "kubernetes.io/os": "linux",
                                         "raychaos.io/simulated": "true",
                                         **(spec.get("labels") or {})}},
        "spec": {"taints": list(spec.get("taints") or [])},
        "status": {"capacity": capacity, "allocatable": dict(capacity)}}


def _node_status(spec: dict[str, Any], host_ip: str) -> dict[str, Any]:
    ts = _now()
    capacity = node_object(spec)["status"]["capacity"]
    return {"status": {
        "capacity": capacity, "allocatable": dict(capacity),
        "addresses": [{"type": "InternalIP", "address": host_ip},
                      {"type": "Hostname", "address": spec["name"]}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                        "message": "simulated by raychaos testbed: runs no containers",
                        "lastHeartbeatTime": ts, "lastTransitionTime": ts}],
        "nodeInfo": {"kubeletVersion": "simulated", "operatingSystem": "linux",
                     "architecture": "amd64", "containerRuntimeVersion": "none://0",
                     "kernelVersion": "", "osImage": "", "kubeProxyVersion": "",
                     "machineID": "", "systemUUID": "", "bootID": ""}}}


def running_status(pod: dict[str, Any], ip: str, host_ip: str) -> dict[str, Any]:
    """The status a kubelet writes for a Running pod whose containers are all Ready."""
    ts = _now()
    conds = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
             for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready",
                       "PodScheduled")]
    return {"phase": "Running", "conditions": conds, "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}], "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": ts, "containerStatuses": [
                {"name": c["name"], "state": {"running": {"startedAt": ts}}, "lastState": {},
                 "ready": True, "restartCount": 0, "image": c.get("image", ""), "imageID": "",
                 "containerID": f"sim://{pod['metadata']['uid'][:8]}-{c['name']}",
                 "started": True} for c in pod["spec"].get("containers") or []]}


def _ready(status: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in status.get("conditions") or [])


class SimNodes:
    """The loop: nodes registered and leased, bound pods made Running, deleted pods removed.
    ``api`` is the bed's :class:`raychaos.testbed.bed.ApiClient` (or anything with its
    ``call``)."""

    def __init__(self, api: Any, nodes: list[dict[str, Any]], host_ip: str = "127.0.0.1",
                 ready_after_s: float = 0.2, stop_after_s: float = 0.2) -> None:
        self.api, self.specs, self.host_ip = api, {n["name"]: n for n in nodes}, host_ip
        self.ready_after_s, self.stop_after_s = ready_after_s, stop_after_s
        self.seen: dict[str, float] = {}  # pod uid (or uid/del) -> first seen, monotonic
        self.renewed: dict[str, float] = {}
        self.ips: dict[str, str] = {}
        self._next_ip = 0
        self.stopping = False

    def register(self) -> None:
        for name, spec in self.specs.items():
            code, body = self.api.call("POST", "/api/v1/nodes", node_object(spec))
            if code not in (201, 409):
                raise RuntimeError(f"registering node {name} answered {code}: {body}")
            self._status(name)
            self._renew(name)

    def _status(self, name: str) -> None:
        code, body = self.api.call("PATCH", f"/api/v1/nodes/{name}/status",
                                   _node_status(self.specs[name], self.host_ip),
                                   content_type="application/merge-patch+json")
        if code != 200:
            log.warning("node %s status answered %s: %s", name, code, str(body)[:200])

    def _renew(self, name: str) -> None:
        path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        spec = {"holderIdentity": name, "leaseDurationSeconds": LEASE_S,
                "renewTime": _now(micro=True)}
        code, _ = self.api.call("PATCH", f"{path}/{name}", {"spec": spec},
                                content_type="application/merge-patch+json")
        if code == 404:
            code, _ = self.api.call("POST", path, {
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name}, "spec": spec})
        if code in (200, 201):
            self.renewed[name] = time.monotonic()

    def tick(self) -> None:
        now = time.monotonic()
        for name in self.specs:
            if now - self.renewed.get(name, 0.0) >= RENEW_S:
                self._renew(name)
                # and its Ready heartbeat, as a kubelet posts it: a node the lifecycle
                # controller marked Unknown (leases missed while the API server was too busy
                # to answer) is Ready again, and its unreachable taints go
                self._status(name)
        code, listed = self.api.call("GET", "/api/v1/pods")
        if code != 200:
            return
        live = set()
        for pod in listed.get("items") or []:
            node = pod["spec"].get("nodeName")
            if node not in self.specs:
                continue
            meta = pod["metadata"]
            uid = meta["uid"]
            live.add(uid)
            first = self.seen.setdefault(uid, now)
            where = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
            if meta.get("deletionTimestamp"):
                grace = float(meta.get("deletionGracePeriodSeconds") or 0)
                if now - self.seen.setdefault(f"{uid}/del", now) >= min(grace,
                                                                         self.stop_after_s):
                    self.api.call("DELETE", where, {
                        "apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                        "preconditions": {"uid": uid}})
                continue
            status = pod.get("status") or {}
            if status.get("phase") in (None, "Pending") and now - first >= self.ready_after_s:
                self.api.call("PATCH", f"{where}/status",
                              {"status": running_status(pod, self._ip(uid), self.host_ip)},
                              content_type="application/merge-patch+json")
            elif status.get("phase") == "Running" and not _ready(status):
                # the node lifecycle controller set Ready=False while the node was Unknown;
                # a kubelet's status sync puts its own back (the containers' statuses kept)
                conds = running_status(pod, self._ip(uid), self.host_ip)["conditions"]
                self.api.call("PATCH", f"{where}/status", {"status": {"conditions": conds}},
                              content_type="application/merge-patch+json")
        for key in [k for k in self.seen if k.split("/")[0] not in live]:
            self.seen.pop(key)
            self.ips.pop(key, None)

    def _ip(self, uid: str) -> str:
        if uid not in self.ips:
            self._next_ip = self._next_ip % 3500 + 1
            self.ips[uid] = f"127.19.{240 + self._next_ip // 250}.{self._next_ip % 250 + 2}"
        return self.ips[uid]

    def run(self) -> None:
        self.register()
        while not self.stopping:
            try:
                self.tick()
            except OSError as exc:  # the API server restarting: the next tick asks again
                log.warning("tick: %s", exc)
            time.sleep(TICK_S)


def main(argv: list[str] | None = None) -> int:
    """``python -m raychaos.testbed.simnodes CONFIG.json`` (what ``up`` writes: server, token,
    ca, nodes)."""
    from raychaos.testbed.access import ApiClient

    args = sys.argv[1:] if argv is None else argv
    cfg = json.loads(Path(args[0]).read_text())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    sim = SimNodes(ApiClient(cfg["server"], cfg["token"], Path(cfg["ca"])), cfg["nodes"])

    def stop(signum: int, frame: Any) -> None:  # noqa: ARG001
        sim.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    sim.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
