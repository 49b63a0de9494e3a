"""Drain with ``kubectl drain``'s semantics against the real API server, scheduler, disruption
controller and KubeRay operator (the sim bed: nodes that run nothing and finish a deletion in
0.2 s): every pod on the node is evicted but DaemonSet and mirror pods, the evicted pods are gone
before the fault returns, KubeRay's replacement is followed to Ready (or named
Pending/Unschedulable), budgets are explained whatever their selector or form — their status
computed by the real disruption controller, the 429 the real Eviction API's — and ``count``
works with a selector and on clusters without ``nvidia.com/gpu`` (kind).

The bed is the package's: each test leaves it as it found it (the ``made`` fixture: nodes
uncordoned, what it made deleted, the demo back to ``ready`` with its three pods Running), even
when it fails. The two tests that need other node shapes (four GPU nodes; none with
``nvidia.com/gpu``) run on a bed of their own (:func:`shapebed`)."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raychaos.config.settings import KubernetesSpec
from raychaos.errors import FaultFailed, NothingMatched
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed
from raychaos.testbed.demo import DEMO
from tests.k8s.simbed.conftest import admin, get, until

pytestmark = pytest.mark.k8s

NS = "ray"
PODS = f"/api/v1/namespaces/{NS}/pods"
PDBS = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
RAYCLUSTERS = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
CORDONED_BY = "raychaos.io/cordoned-by"
READ = ("get", "list", "watch")


def drain(t: KubernetesTarget, record: dict | None = None, count: int = 1,
          selector: dict | None = None, deadline_s: float = 60.0) -> dict:
    return t.drain_nodes(count=count, selector=selector, deadline_s=deadline_s,
                         reason="preemption", replace=True, replace_delay_s=0,
                         record={} if record is None else record)


def mutations(b: testbed.Bed, since: float) -> list[tuple[str, str, str]]:
    """(verb, resource, name) of every write the harness (the kubeconfig's user) sent since
    ``since``, in order, from the API server's audit log."""
    return [(r["verb"], r["resource"], r["name"]) for r in b.requests(since)
            if r["verb"] not in READ]


class Made:
    """What a test created as the bed's admin, deleted (newest first) at its end."""

    def __init__(self, b: testbed.Bed) -> None:
        self.bed, self.paths = b, []  # type: list[str]

    def create(self, collection: str, doc: dict[str, Any]) -> dict[str, Any]:
        code, body = admin(self.bed).call("POST", collection, doc, timeout=30)
        assert code == 201, (collection, code, body)
        self.paths.append(f"{collection}/{body['metadata']['name']}")
        return body

    def delete_all(self) -> None:
        for path in reversed(self.paths):
            code, body = admin(self.bed).call("DELETE", path, {
                "apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
            assert code in (200, 202, 404), (path, code, body)
        for path in self.paths:
            until(f"{path} gone", lambda p=path: get(self.bed, p) is None)
        self.paths.clear()


def demo_settled(b: testbed.Bed, cluster: str = "demo", pods: int = 3) -> bool:
    """``cluster`` is ``ready`` to the operator and its ``pods`` pods are Running, Ready and
    not terminating, none on a cordoned node."""
    rc = get(b, f"{RAYCLUSTERS}/{cluster}") or {}
    if (rc.get("status") or {}).get("state") != "ready":
        return False
    listed = (get(b, f"{PODS}?labelSelector=ray.io/cluster%3D{cluster}") or {})["items"]
    cordoned = {n["metadata"]["name"] for n in get(b, "/api/v1/nodes")["items"]
                if n["spec"].get("unschedulable")}
    return len(listed) == pods and all(
        p["status"].get("phase") == "Running" and "deletionTimestamp" not in p["metadata"]
        and p["spec"].get("nodeName") not in cordoned
        and any(c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions") or []) for p in listed)


def uncordon_all(b: testbed.Bed) -> None:
    for n in get(b, "/api/v1/nodes")["items"]:
        if n["spec"].get("unschedulable") or CORDONED_BY in n["metadata"].get("labels", {}):
            code, body = admin(b).call(
                "PATCH", f"/api/v1/nodes/{n['metadata']['name']}",
                {"spec": {"unschedulable": None}, "metadata": {"labels": {CORDONED_BY: None}}},
                content_type="application/merge-patch+json")
            assert code == 200, (code, body)


@pytest.fixture
def made(simbed: testbed.Bed) -> Iterator[Made]:
    """The shared bed restored after the test whatever happened: nodes uncordoned, what the
    test made deleted, the demo ``ready`` with its pods Running (a drain's replacement was
    Pending while both GPU nodes were cordoned)."""
    m = Made(simbed)
    try:
        yield m
    finally:
        uncordon_all(simbed)
        m.delete_all()
        until("the demo back to ready, its pods Running", lambda: demo_settled(simbed), 180)


def gpu_worker(b: testbed.Bed, cluster: str = "demo") -> dict[str, Any]:
    [pod] = get(b, f"{PODS}?labelSelector=ray.io/cluster%3D{cluster},ray.io/group%3Dgpu")[
        "items"]
    return pod


def budget(m: Made, name: str, **spec: Any) -> dict[str, Any]:  # noqa: ANN401
    """A PodDisruptionBudget over the demo's workers (unless ``selector`` says otherwise),
    returned once the real disruption controller has judged it (its DisruptionAllowed
    condition): before that the Eviction API answers for a budget nobody computed."""
    spec.setdefault("selector", {"matchLabels": {"ray.io/node-type": "worker"}})
    m.create(PDBS, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                    "metadata": {"name": name}, "spec": spec})
    return until(f"PodDisruptionBudget {name} judged", lambda: next((
        pdb for pdb in [get(m.bed, f"{PDBS}/{name}") or {}]
        if any(c["type"] == "DisruptionAllowed" for c in
               (pdb.get("status") or {}).get("conditions") or [])), None))


def replica_set(m: Made, name: str, node: str, ns: str = NS) -> dict[str, Any]:
    """A ReplicaSet whose pod is bound to ``node`` (not a Ray pod: a drain evicts it too)."""
    m.create(f"/apis/apps/v1/namespaces/{ns}/replicasets", {
        "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {
                     "nodeName": node, "containers": [{"name": "c", "image": "x"}]}}}})
    return until(f"ReplicaSet {ns}/{name}'s pod Running", lambda: next((
        p for p in get(m.bed, f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3D{name}")[
            "items"] if p["status"].get("phase") == "Running"), None))


def bare_pod(name: str, node: str, **meta: Any) -> dict[str, Any]:  # noqa: ANN401
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **meta},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x"}]}}


def running(b: testbed.Bed, path: str) -> dict[str, Any]:
    return until(f"{path} Running", lambda: next((
        p for p in [get(b, path) or {}] if (p.get("status") or {}).get("phase") == "Running"),
        None))


def test_drain_cordons_evicts_waits_for_gone_and_the_replacement_and_undo(simbed, made,
                                                                           target):
    gpu = gpu_worker(simbed)
    node = gpu["spec"]["nodeName"]
    other = ({"gpu-a", "gpu-b"} - {node}).pop()
    name = gpu["metadata"]["name"]
    since = time.time()
    record: dict = {"fault": "drain_gpu_nodes"}
    ev = drain(target, record=record)
    assert ev["nodes"] == [node] and ev["cordoned"] == [node]
    assert ev["chosen_by"] == "nvidia.com/gpu capacity"
    assert ev["evicted"] == [name] and ev["blocked"] == []
    assert ev["gone_s"][name] >= 0
    assert get(simbed, f"{PODS}/{name}") is None, "gone, not just asked"
    [repl] = ev["replacements"]
    assert repl["group"] == "gpu" and repl["node"] == other and repl["ready_s"] is not None
    assert ev["replacements_ready"] and ev["drain_to_replacement_ready_s"] >= repl["created_s"]
    assert ev["emptydir_data_lost"] == {
        f"ray/{name}": ["shared-mem (/dev/shm: the Ray object store)"]}
    muts = mutations(simbed, since)
    assert muts[:2] == [("patch", "nodes", node), ("create", "pods/eviction", name)], muts
    cordoned = get(simbed, f"/api/v1/nodes/{node}")
    assert cordoned["spec"]["unschedulable"] is True
    assert cordoned["metadata"]["labels"][CORDONED_BY] == "run1"
    assert record["undo"] == {"kind": "drain_nodes", "nodes": [node]}
    target.undo(record)
    back = get(simbed, f"/api/v1/nodes/{node}")
    assert not back["spec"].get("unschedulable")
    assert CORDONED_BY not in back["metadata"]["labels"]
    assert target.undo(record)["undone"]  # idempotent


def test_a_drain_empties_the_node_like_kubectl_drain(simbed, made, target):
    """A ReplicaSet's pod (not a Ray pod) is evicted too; a mirror pod — the real API server
    accepts the ``kubernetes.io/config.mirror`` annotation from an admin on a pod bound to a
    node — is skipped, as ``kubectl drain`` skips the kubelet's static pods."""
    node = gpu_worker(simbed)["spec"]["nodeName"]
    web = replica_set(made, "web-1", node)
    made.create(PODS, bare_pod(f"static-{node}", node,
                               annotations={"kubernetes.io/config.mirror": "x"}))
    running(simbed, f"{PODS}/static-{node}")
    ev = drain(target)
    assert web["metadata"]["name"] in ev["evicted"]
    assert {"pod": f"ray/static-{node}", "why": "mirror pod"} in ev["skipped"]
    assert get(simbed, f"{PODS}/static-{node}"), "a mirror pod stays"


def test_an_unmanaged_pod_on_the_node_refuses_before_any_change(simbed, made, target):
    node = gpu_worker(simbed)["spec"]["nodeName"]
    made.create(PODS, bare_pod("lonely", node))
    running(simbed, f"{PODS}/lonely")
    since = time.time()
    with pytest.raises(FaultFailed, match=rf"ray/lonely on {node} has no controller.*--force"):
        drain(target)
    assert mutations(simbed, since) == []


def test_a_pod_outside_allowed_namespaces_refuses(simbed, made, make_target):
    node = gpu_worker(simbed)["spec"]["nodeName"]
    made.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "team-b"}})
    theirs = replica_set(made, "theirs", node, ns="team-b")["metadata"]["name"]
    t = make_target(allowed_namespaces=["ray"])
    since = time.time()
    with pytest.raises(FaultFailed, match=rf"also run\(s\) team-b/{theirs}, outside "
                                          r"allowed_namespaces \['ray'\]"):
        drain(t)
    assert mutations(simbed, since) == []


def test_min_available_budget_that_cannot_free_is_explained(simbed, made, target):
    pdb = budget(made, "workers", minAvailable=2)  # 2 Ready workers: nothing may go
    assert pdb["status"]["currentHealthy"] == 2 and pdb["status"]["disruptionsAllowed"] == 0
    node = gpu_worker(simbed)["spec"]["nodeName"]
    record: dict = {}
    with pytest.raises(FaultFailed) as err:
        drain(target, record=record, deadline_s=3)
    assert "could not be evicted within 3 s (HTTP 429)" in str(err.value)
    assert "PodDisruptionBudget ray/workers allows 0 disruption(s) now (healthy 2, needs 2 " \
           "of 2)" in str(err.value)
    assert record["evidence"]["eviction_attempts"] > 2  # retried with backoff
    target.undo(record)  # the fault failed midway: the rollback uncordons
    assert not get(simbed, f"/api/v1/nodes/{node}")["spec"].get("unschedulable")


@pytest.mark.parametrize("spec,what", [
    ({"maxUnavailable": 1}, "maxUnavailable"),
    ({"minAvailable": "50%"}, "a percentage minAvailable"),
    ({"maxUnavailable": 1, "selector": {"matchExpressions": [
        {"key": "ray.io/group", "operator": "In", "values": ["gpu"]}]}}, "maxUnavailable"),
])
def test_budgets_kuberay_2662_makes_permanent_are_named(simbed, made, target, spec, what):
    """The real disruption controller cannot count a RayCluster's pods for these forms (the
    RayCluster CRD has no scale subresource): it fails safe, disruptionsAllowed 0."""
    pdb = budget(made, "ray-workers", **spec)
    assert pdb["status"]["disruptionsAllowed"] == 0
    with pytest.raises(FaultFailed) as err:
        drain(target, deadline_s=2)
    msg = str(err.value)
    assert f"PodDisruptionBudget ray/ray-workers uses {what} over RayCluster pods, so " \
           "disruptionsAllowed stays 0" in msg, msg
    assert "KubeRay issue #2662" in msg and "integer minAvailable" in msg


def test_max_nodes_at_once_and_count_with_a_selector(simbed, make_target):
    """Reads only: nothing to restore."""
    node = gpu_worker(simbed)["spec"]["nodeName"]
    other = ({"gpu-a", "gpu-b"} - {node}).pop()
    t = make_target()
    since = time.time()
    with pytest.raises(FaultFailed, match=rf"2 nodes would be drained \({node}, {other}\) but "
                                          r"max_nodes_at_once is 1"):
        drain(t, count=2, selector={"raychaos.io/node-pool": "gpu"})
    ev = make_target(max_nodes_at_once=2).select_drain_victims(
        1, {"raychaos.io/node-pool": "gpu"})
    assert [n.name for n in ev] == [node], "count picks the selector's node running the cluster"
    with pytest.raises(NothingMatched, match="no node matches selector 'pool=none'"):
        t.select_drain_victims(1, {"pool": "none"})
    with pytest.raises(NothingMatched, match=r"count is 3 but only 2 schedulable node\(s\)"):
        t.select_drain_victims(3, {"raychaos.io/node-pool": "gpu"})
    assert mutations(simbed, since) == []


def test_cleanup_run_uncordons_our_nodes(simbed, made, make_target):
    t = make_target(max_nodes_at_once=2)
    budget(made, "workers", minAvailable=2)
    with pytest.raises(FaultFailed):  # both GPU nodes cordoned, nothing may be evicted
        drain(t, count=2, selector={"raychaos.io/node-pool": "gpu"}, deadline_s=2)
    assert all(get(simbed, f"/api/v1/nodes/{n}")["spec"]["unschedulable"]
               for n in ("gpu-a", "gpu-b"))
    out = t.cleanup_run("run1")
    assert sorted(out["uncordoned"]) == ["gpu-a", "gpu-b"]
    assert not any(get(simbed, f"/api/v1/nodes/{n}")["spec"].get("unschedulable")
                   for n in ("gpu-a", "gpu-b"))


# --- other node shapes: a bed of their own --------------------------------------------------

#: the world's four-GPU-node cluster: a head node, a CPU node and gpu-a..d (one GPU each,
#: tainted as a GPU pool is); the head and CPU nodes big enough to take every pod of the
#: GPU-less cluster once the GPU nodes are gone
SHAPES = [{"name": "head-0", "cpu": "8", "labels": {"raychaos.io/node-pool": "head"}},
          {"name": "cpu-0", "cpu": "8", "labels": {"raychaos.io/node-pool": "cpu"}},
          *({"name": f"gpu-{x}", "cpu": "2", "gpus": 1, "labels": {
              "raychaos.io/node-pool": "gpu"}, "taints": [
              {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
            for x in "abcd")]


@pytest.fixture(scope="module")
def shapebed(bed_state: Path) -> Iterator[testbed.Bed]:
    """Six simulated nodes (:data:`SHAPES`), no RayCluster yet: the shared bed's four cannot
    hold four GPU workers, and always has ``nvidia.com/gpu``."""
    b = testbed.up("drainx", NS, say=print, cluster=False, sim_nodes=copy.deepcopy(SHAPES))
    try:
        yield b
    finally:
        stopped = testbed.down("drainx")
        assert "kube-apiserver" in stopped, stopped


def _shape_target(b: testbed.Bed, cluster: str, **kw: Any) -> KubernetesTarget:  # noqa: ANN401
    t = KubernetesTarget(KubernetesSpec(cluster=cluster, namespace=NS,
                                        kubeconfig=str(b.kubeconfig), **kw), run_id="run1")
    t.connect()
    return t


def _demo_raycluster(name: str) -> dict[str, Any]:
    """The bed's demo RayCluster named ``name``, without GCS fault tolerance: its deletion
    would wait for KubeRay's Redis cleanup Job, which never finishes on simulated nodes."""
    [rc] = [d for d in yaml.safe_load_all(DEMO.read_text()) if d and d["kind"] == "RayCluster"]
    rc["metadata"]["name"] = name
    rc["spec"].pop("gcsFaultToleranceOptions")
    return rc


def test_draining_two_of_four_gpu_nodes_names_the_stuck_replacement(shapebed):
    """The real scheduler's answer: the first replacement cannot be placed (the two GPU nodes
    left are full, the two drained are cordoned), so the minAvailable budget never frees."""
    m = Made(shapebed)
    rc = _demo_raycluster("big")
    gpu = rc["spec"]["workerGroupSpecs"][0]
    gpu["replicas"] = gpu["maxReplicas"] = 4
    m.create(RAYCLUSTERS, rc)
    until("RayCluster big ready on six nodes", lambda: demo_settled(shapebed, "big", 6), 300)
    t = _shape_target(shapebed, "big", max_nodes_at_once=2)
    record: dict = {}
    try:
        budget(m, "gpu", minAvailable=3,
               selector={"matchLabels": {"ray.io/cluster": "big", "ray.io/group": "gpu"}})
        with pytest.raises(FaultFailed) as err:
            drain(t, record=record, count=2, deadline_s=20)
        msg = str(err.value)
        assert "1 of 2 pods on gpu-a, gpu-b could not be evicted" in msg, msg
        assert "is Pending (Unschedulable: 0/6 nodes are available" in msg, msg
        assert "the budget never frees" in msg
        t.undo(record)
        assert not any(get(shapebed, f"/api/v1/nodes/gpu-{x}")["spec"].get("unschedulable")
                       for x in "ab")
    finally:
        t.close()
        uncordon_all(shapebed)
        m.delete_all()
        until("RayCluster big's pods gone", lambda: not get(
            shapebed, f"{PODS}?labelSelector=ray.io/cluster%3Dbig")["items"])


def test_on_a_cluster_without_nvidia_gpus_the_drain_takes_a_logical_gpu_workers_node(shapebed):
    """kind: no node has nvidia.com/gpu (the GPU nodes are removed from the bed); the GPU
    group's Ray workers have ``--num-gpus`` only, and no pool to keep to."""
    for x in "abcd":
        code, body = admin(shapebed).call("DELETE", f"/api/v1/nodes/gpu-{x}")
        assert code in (200, 404), (code, body)
    until("the GPU nodes gone", lambda: [n["metadata"]["name"] for n in get(
        shapebed, "/api/v1/nodes")["items"]] == ["cpu-0", "head-0"])
    rc = _demo_raycluster("kind")
    for g in rc["spec"]["workerGroupSpecs"]:
        c = g["template"]["spec"]["containers"][0]
        for k in ("limits", "requests"):
            c["resources"][k].pop("nvidia.com/gpu", None)
        g["template"]["spec"].pop("nodeSelector")
        g["template"]["spec"].pop("tolerations", None)
    rc["spec"]["headGroupSpec"]["template"]["spec"].pop("nodeSelector")
    m = Made(shapebed)
    m.create(RAYCLUSTERS, rc)
    try:
        until("RayCluster kind ready", lambda: demo_settled(shapebed, "kind", 3), 300)
        t = _shape_target(shapebed, "kind")
        try:
            ev = drain(t)
            assert ev["chosen_by"].startswith("no node has nvidia.com/gpu: Ray workers "
                                              "started with --num-gpus")
            gpu_pod = [e for e in ev["evicted"] if "-gpu-worker-" in e]
            assert gpu_pod and ev["replacements_ready"], json.dumps(ev)[:2000]
        finally:
            t.close()
    finally:
        uncordon_all(shapebed)
        m.delete_all()
