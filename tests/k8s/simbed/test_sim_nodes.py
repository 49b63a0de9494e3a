"""The test bed's simulated nodes against the real control plane and operator: the nodes are
Ready and leased, the real operator's demo RayCluster is ready on them, and a GPU drain through
the Kubernetes target evicts exactly once (counted by the API server's audit log, not by the
target), the real operator's replacement runs on the other GPU node, and the undo gives the
node back. No Ray: the drain is the Kubernetes half of ``gpu-node-drain``."""

from __future__ import annotations

import time

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed
from raychaos.testbed.simnodes import LEASE_S
from tests.k8s.simbed.conftest import admin

pytestmark = pytest.mark.k8s

NS = "ray"


def _ready(obj: dict) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


def test_the_nodes_are_ready_and_leased_and_the_operator_made_the_demo(simbed):
    api = admin(simbed)
    _, nodes = api.call("GET", "/api/v1/nodes")
    assert sorted(n["metadata"]["name"] for n in nodes["items"] if _ready(n)) == [
        "cpu-0", "gpu-a", "gpu-b", "head-0"]
    gpu = next(n for n in nodes["items"] if n["metadata"]["name"] == "gpu-a")
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "1"
    assert gpu["spec"]["taints"][0]["key"] == "nvidia.com/gpu"
    _, leases = api.call("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")
    assert {lease["metadata"]["name"]: lease["spec"]["leaseDurationSeconds"]
            for lease in leases["items"]} == dict.fromkeys(["cpu-0", "gpu-a", "gpu-b", "head-0"],
                                                          LEASE_S)
    _, rc = api.call("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/demo")
    assert rc["status"]["state"] == "ready", rc["status"]
    _, pods = api.call("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector=ray.io/cluster=demo")
    where = {p["metadata"]["labels"]["ray.io/node-type"] + "@" + p["spec"]["nodeName"]
             for p in pods["items"] if _ready(p) and p["status"]["podIP"].startswith("127.19.")}
    assert len(where) == 3 and any(w.startswith("head@head-0") for w in where), where
    status = testbed.status("sim")
    assert status["ready"] and all(status["alive"].values()), status


def test_a_gpu_drain_evicts_once_and_the_real_operator_replaces_the_worker(simbed):
    api = admin(simbed)
    target = KubernetesTarget(KubernetesSpec(cluster="demo", namespace=NS,
                                             kubeconfig=str(simbed.kubeconfig)), run_id="sim")
    target.connect()
    record: dict = {}
    try:
        since = time.time()
        ev = target.drain_nodes(count=1, selector={"raychaos.io/node-pool": "gpu"},
                                deadline_s=60, reason="preemption", replace=True,
                                replace_delay_s=0, record=record)
        [node] = ev["nodes"]
        [evicted] = ev["evicted"]
        [replacement] = ev["replacements"]
        assert replacement["node"] != node and ev["replacements_ready"], ev
        sent = simbed.requests(since)
        evictions = [r for r in sent if r["verb"] == "create"
                     and r["uri"].split("?")[0].endswith(f"/pods/{evicted}/eviction")]
        assert [r["code"] for r in evictions] == [201], sent
        _, cordoned = api.call("GET", f"/api/v1/nodes/{node}")
        assert cordoned["spec"].get("unschedulable") is True
    finally:
        target.undo(record)
        target.close()
    _, node_now = api.call("GET", f"/api/v1/nodes/{node}")
    assert not node_now["spec"].get("unschedulable")
    assert [r["verb"] for r in simbed.requests(since)
            if r["uri"].split("?")[0] == f"/api/v1/nodes/{node}"
            and r["verb"] in ("patch", "update")] == ["patch", "patch"]
