"""Drain with ``kubectl drain``'s semantics against the world (simulated kubelets): every pod on
the node is evicted but DaemonSet and mirror pods, the evicted pods are gone before the fault
returns, KubeRay's replacement is followed to Ready (or named Pending/Unschedulable), budgets are
explained whatever their selector or form, ``count`` works with a selector and on clusters
without ``nvidia.com/gpu`` (kind)."""

from __future__ import annotations

import json

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.errors import FaultFailed, NothingMatched
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.conftest import mutations
from tests.k8s.world import NodeSpec, World
from tests.k8s.world import resources as R
from tests.k8s.world.world import default_raycluster

pytestmark = pytest.mark.k8s


def drain(t: KubernetesTarget, record: dict | None = None, count: int = 1,
          selector: dict | None = None, deadline_s: float = 5.0) -> dict:
    return t.drain_nodes(count=count, selector=selector, deadline_s=deadline_s,
                         reason="preemption", replace=True, replace_delay_s=0,
                         record={} if record is None else record)


def pdb(w: World, name: str, **spec) -> None:  # noqa: ANN003
    spec.setdefault("selector", {"matchLabels": {"ray.io/node-type": "worker"}})
    w.api.create(R.BUILTIN["poddisruptionbudgets"], "ray", {"metadata": {"name": name},
                                                            "spec": spec})


def pod_on(w: World, name: str, node: str, ns: str = "ray", **meta) -> None:  # noqa: ANN003
    w.api.create(R.BUILTIN["pods"], ns, {"metadata": {"name": name, **meta}, "spec": {
        "nodeName": node, "containers": [{"name": "c", "image": "registry.raychaos.test/x:1"}]}})


def owner(w: World, name: str, ns: str = "ray") -> list[dict]:
    """An ownerReference to a ReplicaSet stand-in that exists (the world's garbage collector
    deletes pods whose owners do not)."""
    _code, cm = w.api.create(R.BUILTIN["configmaps"], ns, {"metadata": {"name": name}})
    return [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": name,
             "uid": cm["metadata"]["uid"], "controller": True}]


def test_drain_cordons_evicts_waits_for_gone_and_the_replacement_and_undo(sim, target):
    since = len(sim.server.requests)
    record: dict = {"fault": "drain_gpu_nodes"}
    gpu = [p for p in sim.ray_pods("worker") if p["metadata"]["labels"]["ray.io/group"] == "gpu"]
    ev = drain(target, record=record)
    assert ev["nodes"] == ["gpu-a"] and ev["cordoned"] == ["gpu-a"]
    assert ev["chosen_by"] == "nvidia.com/gpu capacity"
    assert ev["evicted"] == [gpu[0]["metadata"]["name"]] and ev["blocked"] == []
    assert ev["gone_s"][gpu[0]["metadata"]["name"]] >= 0
    assert sim.store.get("pods", "ray", gpu[0]["metadata"]["name"]) is None, "gone, not just asked"
    [repl] = ev["replacements"]
    assert repl["group"] == "gpu" and repl["node"] == "gpu-b" and repl["ready_s"] is not None
    assert ev["replacements_ready"] and ev["drain_to_replacement_ready_s"] >= repl["created_s"]
    assert ev["emptydir_data_lost"] == {
        f"ray/{gpu[0]['metadata']['name']}": ["shared-mem (/dev/shm: the Ray object store)"]}
    muts = mutations(sim, since)
    assert muts[0] == ("PATCH", "/api/v1/nodes/gpu-a")
    assert muts[1] == ("POST", f"/api/v1/namespaces/ray/pods/{gpu[0]['metadata']['name']}"
                               "/eviction")
    node = sim.store.get("nodes", "", "gpu-a")
    assert node["spec"]["unschedulable"] is True
    assert node["metadata"]["labels"]["raychaos.io/cordoned-by"] == "run1"
    assert record["undo"] == {"kind": "drain_nodes", "nodes": ["gpu-a"]}
    target.undo(record)
    node = sim.store.get("nodes", "", "gpu-a")
    assert not node["spec"].get("unschedulable")
    assert "raychaos.io/cordoned-by" not in node["metadata"]["labels"]
    assert target.undo(record)["undone"]  # idempotent


def test_a_drain_empties_the_node_like_kubectl_drain(sim, target):
    # not a Ray pod: evicted too
    pod_on(sim, "web-1-abcde", "gpu-a", ownerReferences=owner(sim, "web-1"))
    pod_on(sim, "static-gpu-a", "gpu-a",
           annotations={"kubernetes.io/config.mirror": "x"})  # a mirror pod: skipped
    ev = drain(target)
    assert "web-1-abcde" in ev["evicted"]
    assert {"pod": "ray/static-gpu-a", "why": "mirror pod"} in ev["skipped"]


def test_an_unmanaged_pod_on_the_node_refuses_before_any_change(sim, target):
    pod_on(sim, "lonely", "gpu-a")
    since = len(sim.server.requests)
    with pytest.raises(FaultFailed, match=r"ray/lonely on gpu-a has no controller.*--force"):
        drain(target)
    assert mutations(sim, since) == []


def test_a_pod_outside_allowed_namespaces_refuses(sim, make_target):
    sim.api.create(R.BUILTIN["namespaces"], "", {"metadata": {"name": "team-b"}})
    pod_on(sim, "theirs", "gpu-a", ns="team-b", ownerReferences=owner(sim, "x", "team-b"))
    t = make_target(allowed_namespaces=["ray"])
    since = len(sim.server.requests)
    with pytest.raises(FaultFailed, match=r"also run\(s\) team-b/theirs, outside "
                                          r"allowed_namespaces \['ray'\]"):
        drain(t)
    assert mutations(sim, since) == []


def test_min_available_budget_that_cannot_free_is_explained(sim, target):
    pdb(sim, "workers", minAvailable=2)  # 2 Ready workers: nothing may go
    record: dict = {}
    with pytest.raises(FaultFailed) as err:
        drain(target, record=record, deadline_s=0.6)
    assert "could not be evicted within 0.6 s (HTTP 429)" in str(err.value)
    assert "PodDisruptionBudget ray/workers allows 0 disruption(s) now (healthy 2, needs 2 " \
           "of 2)" in str(err.value)
    assert record["evidence"]["eviction_attempts"] > 2  # retried with backoff
    target.undo(record)  # the fault failed midway: the rollback uncordons
    assert not sim.store.get("nodes", "", "gpu-a")["spec"].get("unschedulable")


@pytest.mark.parametrize("spec,what", [
    ({"maxUnavailable": 1}, "maxUnavailable"),
    ({"minAvailable": "50%"}, "a percentage minAvailable"),
    ({"maxUnavailable": 1, "selector": {"matchExpressions": [
        {"key": "ray.io/group", "operator": "In", "values": ["gpu"]}]}}, "maxUnavailable"),
])
def test_budgets_kuberay_2662_makes_permanent_are_named(sim, target, spec, what):
    pdb(sim, "ray-workers", **spec)
    with pytest.raises(FaultFailed) as err:
        drain(target, deadline_s=0.4)
    msg = str(err.value)
    assert f"PodDisruptionBudget ray/ray-workers uses {what} over RayCluster pods, so " \
           "disruptionsAllowed stays 0" in msg, msg
    assert "KubeRay issue #2662" in msg and "integer minAvailable" in msg


def test_max_nodes_at_once_and_count_with_a_selector(sim, make_target):
    t = make_target()
    with pytest.raises(FaultFailed, match=r"2 nodes would be drained \(gpu-a, gpu-b\) but "
                                          r"max_nodes_at_once is 1"):
        drain(t, count=2, selector={"raychaos.io/node-pool": "gpu"})
    ev = make_target(max_nodes_at_once=2).select_drain_victims(
        1, {"raychaos.io/node-pool": "gpu"})
    assert [n.name for n in ev] == ["gpu-a"], "count picks among the selector's nodes"
    with pytest.raises(NothingMatched, match="no node matches selector 'pool=none'"):
        t.select_drain_victims(1, {"pool": "none"})
    with pytest.raises(NothingMatched, match=r"count is 3 but only 2 schedulable node\(s\)"):
        t.select_drain_victims(3, {"raychaos.io/node-pool": "gpu"})


def _world(tmp_path, nodes: list[NodeSpec], rc: dict) -> World:  # noqa: ANN001
    w = World(name="drainx", cluster=None, nodes=nodes, state_root=tmp_path / "w").start()
    w.api.create(w.api.resolve("ray.io", "v1", "rayclusters"), "ray", rc)
    w.cluster = rc["metadata"]["name"]
    return w


def _target(w: World, **kw) -> KubernetesTarget:  # noqa: ANN003
    t = KubernetesTarget(KubernetesSpec(cluster=w.cluster, namespace="ray",
                                        kubeconfig=w.kubeconfig, **kw), run_id="run1")
    t.connect()
    return t


def test_on_a_cluster_without_nvidia_gpus_the_drain_takes_a_logical_gpu_workers_node(tmp_path):
    """kind: no node has nvidia.com/gpu; the GPU group's Ray workers have --num-gpus only."""
    rc = default_raycluster("kind", "ray")
    for g in rc["spec"]["workerGroupSpecs"]:
        c = g["template"]["spec"]["containers"][0]
        for k in ("limits", "requests"):
            c["resources"][k].pop("nvidia.com/gpu", None)
        g["template"]["spec"].pop("nodeSelector")
        g["template"]["spec"].pop("tolerations", None)
    rc["spec"]["headGroupSpec"]["template"]["spec"].pop("nodeSelector")
    w = _world(tmp_path, [NodeSpec(f"kind-worker{i}", kubelet="sim") for i in range(3)], rc)
    try:
        w.wait_ready(30)
        t = _target(w)
        ev = drain(t)
        assert ev["chosen_by"].startswith("no node has nvidia.com/gpu: Ray workers started "
                                          "with --num-gpus")
        gpu_pod = [e for e in ev["evicted"] if "-gpu-worker-" in e]
        assert gpu_pod and ev["replacements_ready"], json.dumps(ev)[:2000]
        t.close()
    finally:
        assert w.stop() == []


def test_draining_two_of_four_gpu_nodes_names_the_stuck_replacement(tmp_path):
    """The real server's result: the first replacement cannot be placed (the two nodes left
    are full, the two drained are cordoned), so the minAvailable budget never frees."""
    nodes = [NodeSpec("head-0", labels={"raychaos.io/node-pool": "head"}, kubelet="sim"),
             NodeSpec("cpu-0", labels={"raychaos.io/node-pool": "cpu"}, kubelet="sim")]
    taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    nodes += [NodeSpec(f"gpu-{x}", gpus=1, labels={"raychaos.io/node-pool": "gpu"},
                       taints=taint, kubelet="sim") for x in "abcd"]
    rc = default_raycluster("big", "ray")
    rc["spec"]["workerGroupSpecs"][0]["replicas"] = 4
    rc["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 4
    w = _world(tmp_path, nodes, rc)
    try:
        w.wait_ready(30)
        pdb(w, "gpu", minAvailable=3, selector={"matchLabels": {"ray.io/group": "gpu"}})
        t = _target(w, max_nodes_at_once=2)
        record: dict = {}
        with pytest.raises(FaultFailed) as err:
            drain(t, record=record, count=2, deadline_s=3)
        msg = str(err.value)
        assert "1 of 2 pods on gpu-a, gpu-b could not be evicted" in msg, msg
        assert "is Pending (Unschedulable: 0/6 nodes are available" in msg, msg
        assert "the budget never frees" in msg
        t.undo(record)
        t.close()
    finally:
        assert w.stop() == []


def test_cleanup_run_uncordons_our_nodes(sim, make_target):
    t = make_target(max_nodes_at_once=2)
    with pytest.raises(FaultFailed):  # both GPU nodes cordoned: the replacement has nowhere
        pdb(sim, "workers", minAvailable=2)
        drain(t, count=2, selector={"raychaos.io/node-pool": "gpu"}, deadline_s=0.3)
    assert all(sim.store.get("nodes", "", n)["spec"]["unschedulable"] for n in ("gpu-a",
                                                                                "gpu-b"))
    out = t.cleanup_run("run1")
    assert sorted(out["uncordoned"]) == ["gpu-a", "gpu-b"]
    assert not any(sim.store.get("nodes", "", n)["spec"].get("unschedulable")
                   for n in ("gpu-a", "gpu-b"))
