"""A kubelet that runs nothing: pods bound to its nodes go Running and Ready after
``ready_after_s`` and terminate after ``min(grace, stop_after_s)``, writing the status a real
kubelet writes. Nodes seeded with ``kubelet="none"`` get no kubelet at all (pure API objects).

Why: most of KubeRay's, the scheduler's and the Eviction API's behaviour can be checked in a
second, with no Ray processes and no lock, and a benchmark can have 100 nodes and 1,000 pods.
"""

from __future__ import annotations

import time
from typing import Any

from tests.k8s.world.api import Api, set_condition
from tests.k8s.world.store import now

__all__ = ["SimKubelet", "running_status"]


def running_status(pod: dict, ip: str, host_ip: str) -> dict[str, Any]:
    """The status of a Running, Ready pod (the golden pod-get's shape)."""
    ts = now()
    conds = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
             for t in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready",
                       "PodScheduled")]
    return {"phase": "Running", "conditions": conds, "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}], "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": ts, "containerStatuses": [
                {"name": c["name"], "state": {"running": {"startedAt": ts}}, "lastState": {},
                 "ready": True, "restartCount": 0, "image": c.get("image", ""), "imageID": "",
                 "started": True} for c in pod["spec"].get("containers") or []],
            "qosClass": pod.get("status", {}).get("qosClass", "BestEffort")}


class SimKubelet:
    def __init__(self, api: Api, ready_after_s: float = 0.2, stop_after_s: float = 0.2):
        self.api = api
        self.ready_after_s = ready_after_s
        self.stop_after_s = stop_after_s
        self.nodes: dict[str, str] = {}  # name -> host IP
        self._seen: dict[str, float] = {}
        self._ip = 0

    def add_node(self, name: str, host_ip: str) -> None:
        self.nodes[name] = host_ip

    def sync(self) -> None:
        store = self.api.store
        t = time.monotonic()
        with store.lock:
            for pod in store.list("pods", copy_=False):
                node = pod["spec"].get("nodeName")
                if node not in self.nodes:
                    continue
                meta = pod["metadata"]
                uid = meta["uid"]
                first = self._seen.setdefault(uid, t)
                if meta.get("deletionTimestamp"):
                    grace = float(meta.get("deletionGracePeriodSeconds", 0))
                    if t - self._seen.setdefault(uid + "/del", t) >= min(grace, self.stop_after_s):
                        self.api.finish_pod(meta["namespace"], meta["name"], uid)
                    continue
                if pod.get("status", {}).get("phase") == "Pending" and \
                        t - first >= self.ready_after_s:
                    self._ip = self._ip % 65000 + 1
                    ip = f"198.19.{240 + self._ip // 250 % 14}.{self._ip % 250 + 2}"
                    st = running_status(pod, ip, self.nodes[node])

                    def fn(p: dict, st: dict = st) -> None:
                        keep = p.get("status", {}).get("qosClass")
                        p["status"] = st | ({"qosClass": keep} if keep else {})
                        set_condition(p, "PodScheduled", "True")
                    store.mutate("pods", meta["namespace"], meta["name"], fn)
            live = {p["metadata"]["uid"] for p in store.list("pods", copy_=False)}
            for k in [k for k in self._seen if k.split("/")[0] not in live]:
                self._seen.pop(k)
