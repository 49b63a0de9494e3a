"""Dry-run, protected objects, the throttle DaemonSet and its proof, Chaos Mesh objects, names
like ``worker-1``, leftovers after a lost ledger, and what reaches the timeline — against the
real API server, controllers and KubeRay operator with simulated nodes (the bed's).

Nothing runs on a simulated node, so nothing can report having landed: the throttle's pods are
placed by the real DaemonSet controller and made Running, but their logs cannot be read, so the
throttle must fail, not pass; the real NetworkChaos CRD takes the harness's objects, but no Chaos
Mesh controller injects them, so a fault that waits for injection fails too — and what either
made is deleted after. What a run sent is read from the API server's audit log, what it left
from the API server itself (as the bed's admin)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from raychaos.errors import ConfigError, FaultFailed, NothingMatched, RollbackFailed
from raychaos.targets.kubernetes import network, registry
from raychaos.targets.kubernetes.safety import CORDONED_BY, PROTECTED, RUN_ID, run_labels
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed
from raychaos.testbed.node.kubelet import go_duration
from tests.k8s.simbed.conftest import MUTATING, admin, get, until

pytestmark = pytest.mark.k8s

NS = "ray"
DS = f"/apis/apps/v1/namespaces/{NS}/daemonsets"
PODS = f"/api/v1/namespaces/{NS}/pods"
EVENTS = f"/api/v1/namespaces/{NS}/events"
CHAOS = f"/apis/chaos-mesh.org/v1alpha1/namespaces/{NS}/networkchaos"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
THROTTLE = "raychaos-pull-throttle-run1"
NODES = ("cpu-0", "gpu-a", "gpu-b", "head-0")  # the bed's, sorted as the harness names them
#: what this module's own Events carry, so that they can be found and deleted
OURS = "raychaos.io/test=safety-network"


def _items(b: testbed.Bed, path: str, selector: str = RUN_ID) -> list[dict[str, Any]]:
    """The objects at ``path`` whose labels match ``selector`` (every one for "")."""
    listed = get(b, f"{path}?labelSelector={selector}" if selector else path)
    assert listed is not None, path
    return list(listed["items"])


def _left(b: testbed.Bed) -> list[str]:
    """What a run left on the bed: objects labelled with a run id, nodes cordoned by a run or
    labelled protected."""
    left = [f"{path.rsplit('/', 1)[-1]} {o['metadata']['name']}"
            for path in (DS, PODS, CHAOS) for o in _items(b, path)]
    nodes = _items(b, "/api/v1/nodes", "")
    left += [f"node {n['metadata']['name']} cordoned" for n in nodes
             if n["spec"].get("unschedulable")
             or CORDONED_BY in (n["metadata"].get("labels") or {})]
    left += [f"node {n['metadata']['name']} protected" for n in nodes
             if PROTECTED in (n["metadata"].get("labels") or {})]
    return left


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def _demo_ready(b: testbed.Bed) -> bool:
    """The demo as the bed made it: ready to the operator, its three Ray pods Ready."""
    rc = get(b, f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/demo") or {}
    pods = _items(b, PODS, "ray.io/cluster=demo")
    live = [p for p in pods if "deletionTimestamp" not in p["metadata"]]
    return ((rc.get("status") or {}).get("state") == "ready" and len(pods) == 3
            and len(live) == 3 and all(_ready(p) for p in live))


def _delete(b: testbed.Bed, path: str) -> None:
    code, body = admin(b).call("DELETE", path)
    assert code in (200, 202, 404), (path, code, body)


@pytest.fixture(autouse=True)
def restored(simbed: testbed.Bed) -> Iterator[None]:
    """The bed as the package shares it, whatever a test did or how it failed: nothing of run1
    (DaemonSets, pods, NetworkChaos), no node cordoned or protected, none of this module's
    Events, and the demo ready. A net: each test asserts itself that the harness cleaned up."""
    yield
    for path in (DS, CHAOS, PODS):
        for obj in _items(simbed, path):
            if not obj["metadata"].get("ownerReferences"):
                _delete(simbed, f"{path}/{obj['metadata']['name']}")
    for ev in _items(simbed, EVENTS, OURS):
        _delete(simbed, f"{EVENTS}/{ev['metadata']['name']}")
    for node in _items(simbed, "/api/v1/nodes", ""):
        labels = node["metadata"].get("labels") or {}
        if node["spec"].get("unschedulable") or CORDONED_BY in labels or PROTECTED in labels:
            code, body = admin(simbed).call(
                "PATCH", f"/api/v1/nodes/{node['metadata']['name']}",
                {"spec": {"unschedulable": None},
                 "metadata": {"labels": {CORDONED_BY: None, PROTECTED: None}}},
                content_type="application/merge-patch+json")
            assert code == 200, (code, body)
    until("nothing of run1 left", lambda: not _left(simbed))
    until("RayCluster ray/demo ready with its 3 pods", lambda: _demo_ready(simbed), 300)


def throttle(t: KubernetesTarget, record: dict[str, Any],
             restart: list[str] | None = None) -> dict[str, Any]:
    return t.throttle_registry_pulls(rate_bps=5e6, latency_ms=0, error_rate=0, image_mb=32,
                                     restart_workers=restart, record=record)


def saturate(t: KubernetesTarget, record: dict[str, Any], nodes: list[str] | None = None,
             bw: float = 8e6) -> dict[str, Any]:
    return t.saturate_network(nodes=nodes or ["worker-1"], bandwidth_bps=bw, loss_pct=0,
                              latency_ms=0, flood=True, partition=False, flood_s=5,
                              record=record)


def test_dry_run_sends_no_mutating_request(simbed, make_target):
    """Every fault in dry run: the calls are planned in order with their bodies, and the API
    server's audit log of the run's user holds reads only; the bed is unchanged."""
    t = make_target(dry_run=True, max_nodes_at_once=2)
    gpu_worker = t.handle.pod_named("worker-1")
    name, on = gpu_worker["metadata"]["name"], gpu_worker["spec"]["nodeName"]
    head = t.handle.pod_named("head")["metadata"]
    since = time.time()
    t.kill_head("pod", {})
    ev = t.drain_nodes(count=2, selector={"raychaos.io/node-pool": "gpu"}, deadline_s=5,
                       reason="preemption", replace=True, replace_delay_s=0, record={})
    throttle(t, {})
    saturate(t, {})
    sent = simbed.requests(since)
    assert sent, "the audit log saw none of the run's requests"
    assert [(r["verb"], r["uri"]) for r in sent if r["verb"] in MUTATING] == [], \
        "a dry run sent a mutating request"
    # the node running Ray's GPU worker first, then the other GPU node
    assert ev["dry_run"] and ev["cordoned"] == [on, ({"gpu-a", "gpu-b"} - {on}).pop()]
    calls = t.planned_calls()
    assert [c["method"] for c in calls] == ["DELETE", "PATCH", "PATCH", "POST", "POST", "POST"]
    assert calls[3]["path"] == f"{PODS}/{name}/eviction"
    calls = calls[:3] + calls[4:]
    assert calls[0]["body"]["gracePeriodSeconds"] == 0
    assert calls[1]["body"] == {"spec": {"unschedulable": True},
                                "metadata": {"labels": {"raychaos.io/cordoned-by": "run1"}}}
    assert calls[3]["path"] == DS
    assert calls[4]["path"] == CHAOS
    assert "-gpu-worker-" in name
    assert calls[4]["body"]["spec"]["selector"] == {"pods": {"ray": [name]}}
    assert (get(simbed, f"{PODS}/{head['name']}") or {}).get("metadata", {}).get("uid") \
        == head["uid"], "the head pod is the same one"
    assert _left(simbed) == []


def test_protected_node_is_refused_by_selector_and_skipped_by_count(simbed, target):
    """The GPU node that runs Ray's GPU worker, labelled protected: a drain by count finds no
    other (the second GPU node runs no Ray pod), a drain by its hostname finds none; no
    mutating request is sent."""
    on = target.handle.pod_named("worker-1")["spec"]["nodeName"]
    code, body = admin(simbed).call("PATCH", f"/api/v1/nodes/{on}",
                                    {"metadata": {"labels": {PROTECTED: "true"}}},
                                    content_type="application/merge-patch+json")
    assert code == 200, (code, body)
    since = time.time()
    with pytest.raises(NothingMatched, match=r"no schedulable, unprotected GPU node runs a pod"):
        target.select_drain_victims(1, None)
    with pytest.raises(NothingMatched, match=r"count is 1 but only 0 schedulable node"):
        target.select_drain_victims(1, {"kubernetes.io/hostname": on})
    sent = simbed.requests(since)
    assert [r for r in sent if r["resource"] == "nodes" and r["verb"] == "list"], sent
    assert [r for r in sent if r["verb"] in MUTATING] == []


def test_the_throttle_daemonset_and_no_report_means_it_did_not_land(simbed, target,
                                                                    monkeypatch):
    """The DaemonSet passes the real API server (one node per field selector term), the real
    DaemonSet controller runs its pod on every node the cluster may use (the GPU nodes' taint
    tolerated), the harness asks each pod for its report — and, no log being readable on a
    simulated node, fails naming each node. Undo deletes it; the cleanup pods cannot prove a
    node clean either, and say so; nothing is left."""
    # long enough for the DaemonSet's pods to be Running on a busy box: every node's log asked
    monkeypatch.setattr(registry, "LANDED_WAIT_S", 30.0)
    since = time.time()
    record: dict = {"fault": "throttle_registry_pulls"}
    with pytest.raises(FaultFailed, match=r"the throttle did not land on cpu-0: no report; "
                                          r"gpu-a: no report; gpu-b: no report; head-0: no "
                                          r"report"):
        throttle(target, record)
    ds = get(simbed, f"{DS}/{THROTTLE}")
    assert ds is not None
    assert ds["metadata"]["labels"]["raychaos.io/run-id"] == "run1"
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] and pod["containers"][0]["securityContext"]["privileged"]
    script = pod["containers"][0]["command"][2]
    assert "type ifb" in script and "root tbf rate" in script and "mirred" in script
    assert "police" not in script  # this kernel (and others) lack act_police
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    # rayproject/ray comes from Docker Hub: its registry and its blob CDN
    assert env["RATE"] == "5mbit"
    assert env["HOSTS"] == "production.cloudflare.docker.com registry-1.docker.io"
    affinity = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # every node the cluster's pods may land on, one term each: the real API server allows
    # one value per node field selector
    assert [t["matchFields"] for t in affinity["nodeSelectorTerms"]] == [
        [{"key": "metadata.name", "operator": "In", "values": [n]}] for n in NODES]
    # placed by the real DaemonSet controller on each of them, Running
    placed = {p["spec"].get("nodeName"): p["metadata"]["name"]
              for p in _items(simbed, PODS, "raychaos.io/fault=throttle-registry-pulls")
              if (p.get("status") or {}).get("phase") == "Running"}
    assert sorted(placed) == list(NODES), placed
    logs = [r for r in simbed.requests(since) if r["resource"] == "pods/log"]
    assert {r["name"] for r in logs} == set(placed.values()), logs
    assert not [r for r in logs if r["code"] == 200], "a simulated pod's log was read"
    assert record["undo"]["kind"] == "throttle_registry_pulls"

    monkeypatch.setattr(registry, "CLEAN_WAIT_S", 10.0)
    since = time.time()
    with pytest.raises(RollbackFailed, match=r"could not check node\(s\) cpu-0, gpu-a, gpu-b, "
                                             r"head-0 for a leftover"):
        target.undo(record)  # nothing runs here, so no node can be proven clean
    assert get(simbed, f"{DS}/{THROTTLE}") is None
    sent = simbed.requests(since)
    made = {r["name"] for r in sent if (r["verb"], r["resource"]) == ("create", "pods")
            and r["code"] == 201}
    gone = {r["name"] for r in sent if (r["verb"], r["resource"]) == ("delete", "pods")
            and r["code"] == 200}
    assert made == {f"raychaos-throttle-clean-run1-{n}" for n in NODES}, made
    assert made <= gone, "a cleanup pod was not deleted"
    until("the throttle's and the cleanup's pods gone", lambda: _left(simbed) == [])


@contextlib.contextmanager
def chaos_mesh_removed(b: testbed.Bed) -> Iterator[None]:
    """The cluster without Chaos Mesh's NetworkChaos CRD for the block (deleted for real), then
    the bed's CRD back, Established, whatever the block raised."""
    path = f"{CRD}/networkchaos.chaos-mesh.org"
    crd = get(b, path)
    assert crd is not None, "the bed installs Chaos Mesh's CRDs"
    crd = {"apiVersion": crd["apiVersion"], "kind": crd["kind"],
           "metadata": {k: v for k, v in crd["metadata"].items()
                        if k in ("name", "labels", "annotations")}, "spec": crd["spec"]}
    _delete(b, path)
    try:
        until("the NetworkChaos CRD deleted", lambda: get(b, path) is None)
        yield
    finally:
        until("the NetworkChaos CRD gone before it is made again", lambda: get(b, path) is None)
        code, body = admin(b).call("POST", CRD, crd, timeout=30)
        assert code == 201, (code, body)
        until("the NetworkChaos CRD Established", lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in ((get(b, path) or {}).get("status") or {}).get("conditions") or []))
        until("NetworkChaos served again", lambda: admin(b).call("GET", CHAOS)[0] == 200)


def test_saturate_preflight_resolves_names_and_needs_chaos_mesh_for_bandwidth(simbed, target):
    """Bandwidth needs the NetworkChaos CRD: with the bed's, preflight passes; without it (the
    CRD deleted for real) it is refused in one sentence, and a flood alone still passes.
    ``worker-N`` is GPU workers first; an unknown name lists the known ones; a peer must be
    left to measure against."""
    target.preflight("saturate_network", {"nodes": ["worker-1"], "bandwidth_mbit": 50})
    with chaos_mesh_removed(simbed):
        with pytest.raises(ConfigError, match="bandwidth_mbit needs Chaos Mesh"):
            target.preflight("saturate_network", {"nodes": ["worker-1"], "bandwidth_mbit": 50})
        target.preflight("saturate_network", {"nodes": ["worker-1"], "bandwidth_mbit": 0})
    with pytest.raises(NothingMatched, match=r"no pod 'worker-9' in RayCluster ray/demo "
                                             r"\(known: head, worker-1 \(demo-gpu-worker-"):
        target.preflight("saturate_network", {"nodes": ["worker-9"]})
    with pytest.raises(NothingMatched, match="every Ray pod of ray/demo is targeted"):
        target.preflight("saturate_network", {"nodes": ["head", "worker-1", "worker-2"],
                                              "bandwidth_mbit": 0})
    assert target.handle.pod_named("worker-1")["metadata"]["labels"]["ray.io/group"] == "gpu"
    assert target.handle.pod_named("worker-2")["metadata"]["labels"]["ray.io/group"] == "cpu"


def test_cleanup_run_finds_leftovers_of_a_lost_ledger(simbed, target, monkeypatch):
    """A throttle that did not land and a NetworkChaos nobody injected, both left as after a
    crash (no undo: the ledger is lost, the labels remain): ``cleanup_run`` finds and deletes
    them by their run label, and the DaemonSet's pods go with it."""
    monkeypatch.setattr(registry, "LANDED_WAIT_S", 0.5)
    monkeypatch.setattr(network, "INJECTED_WAIT_S", 1.0)
    with pytest.raises(FaultFailed):
        throttle(target, {})
    with pytest.raises(FaultFailed, match=r"NetworkChaos ray/raychaos-net-run1 was not "
                                          r"AllInjected"):  # no Chaos Mesh controller here
        network._networkchaos(target._api(), NS, "raychaos-net-run1",
                              run_labels("run1", **{"raychaos.io/fault": "saturate-network"}),
                              [target.handle.pod_named("worker-1")], "8mbit")
    assert get(simbed, f"{CHAOS}/raychaos-net-run1") is not None
    assert get(simbed, f"{DS}/{THROTTLE}") is not None
    out = target.cleanup_run("run1")
    assert sorted(out["deleted"]) == ["raychaos-net-run1", THROTTLE]
    assert out["uncordoned"] == []
    assert _items(simbed, DS) == [] and _items(simbed, CHAOS) == []
    until("the DaemonSet's pods gone", lambda: _left(simbed) == [])


def _pulled(pod: dict[str, Any], seconds: float, i: int) -> dict[str, Any]:
    """A ``Pulled`` Event as the kubelet writes it (/work/shared/k8s-golden's events list)."""
    d, now = go_duration(seconds), datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    meta = pod["metadata"]
    return {"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{meta['name']}.raychaos{i}", "namespace": NS,
                         "labels": dict([OURS.split("=")])},
            "involvedObject": {"kind": "Pod", "namespace": NS, "name": meta["name"],
                               "uid": meta["uid"], "apiVersion": "v1",
                               "fieldPath": "spec.containers{ray-head}"},
            "reason": "Pulled", "type": "Normal", "count": 1,
            "message": f'Successfully pulled image "x" in {d} ({d} including waiting). '
                       "Image size: 1 bytes.",
            "source": {"component": "kubelet", "host": pod["spec"]["nodeName"]},
            "firstTimestamp": now, "lastTimestamp": now,
            "reportingComponent": "kubelet", "reportingInstance": pod["spec"]["nodeName"]}


def test_pulls_in_every_go_form_and_pod_changes_reach_the_timeline_once(simbed, target):
    """The kubelet's ``Pulled`` events (real Event objects, in its wording, each Go duration
    form) and a head replaced by the real operator reach ``cluster_events``, each once."""
    assert not [e for e in target.cluster_events(0) if e["event"] != "image_pulled"]
    pod = target.handle.pod_named("head")
    for i, secs in enumerate((0.123, 12.3, 83.456)):
        code, body = admin(simbed).call("POST", EVENTS, _pulled(pod, secs, i))
        assert code == 201, (code, body)
    ev = target.kill_head("pod", {})
    target.wait_head_back(ev["old"], timeout=120)
    got: list[dict[str, Any]] = []

    def both() -> bool:  # the informers follow the API server: asked until they caught up
        got.extend(target.cluster_events(0))
        kinds = {(e["event"], e["node"]) for e in got}
        return ("node_stopped", pod["metadata"]["name"]) in kinds and any(
            k == "node_started" and n != pod["metadata"]["name"] for k, n in kinds) and len(
            [e for e in got if e["event"] == "image_pulled" and e["image"] == "x"]) >= 3

    until("the head's replacement and the pulls in cluster_events", both)
    pulls = sorted(e["seconds"] for e in got if e["event"] == "image_pulled"
                   and e["image"] == "x")
    assert pulls == pytest.approx([0.123, 12.3, 83.456]), "each pull, each once"
    assert [e for e in target.cluster_events(0) if e["event"] == "image_pulled"] == [], \
        "each event once"
