"""Dry-run, protected objects, network faults (DaemonSet, Chaos Mesh, iperf3) and cleanup."""

from __future__ import annotations

import pytest

from raychaos.errors import FaultFailed, NothingMatched
from tests.k8s._faults import drain, saturate, throttle

pytestmark = pytest.mark.k8s


def test_dry_run_issues_no_mutating_request(fake, make_target):
    target = make_target(dry_run=True, max_nodes_at_once=2)
    target.kill_head("pod", {})
    ev = drain(target, record={}, count=2)
    throttle(target, 1e6, nodes=["gpu-0"], registry_hosts=["registry.example"], record={})
    saturate(target, record={}, nodes=["gpu-0", "gpu-1"])
    assert fake.mutating_requests() == []
    assert ev["dry_run"] and ev["cordoned"] == ["gpu-0", "gpu-1"]
    calls = target.planned_calls()
    assert [(c["method"], c["path"].split("/")[-1]) for c in calls][:4] == [
        ("DELETE", calls[0]["path"].split("/")[-1]), ("PATCH", "gpu-0"), ("PATCH", "gpu-1"),
        ("POST", "eviction")]
    assert calls[0]["body"]["gracePeriodSeconds"] == 0
    assert calls[1]["body"] == {"spec": {"unschedulable": True},
                                "metadata": {"labels": {"raychaos.io/cordoned-by": "run1"}}}
    assert sum(c["path"].endswith("/eviction") for c in calls) == 4
    assert calls[-1]["method"] == "POST" and calls[-1]["path"] == "/api/v1/namespaces/ray/pods"


def test_protected_head_is_refused(fake, target):
    with fake.lock:
        head = next(p for p in fake.store["pods"].values()
                    if p["metadata"]["labels"].get("ray.io/node-type") == "head")
        head["metadata"]["labels"]["raychaos.io/protected"] = "true"
    with pytest.raises(FaultFailed, match=r"kill_head: refusing to touch pod demo-head-\w+: "
                                          r"labelled raychaos.io/protected=true"):
        target.kill_head("pod", {})
    assert fake.mutating_requests() == []


def test_protected_node_is_refused_by_selector_and_skipped_by_count(fake, make_target):
    with fake.lock:
        fake.store["nodes"][("", "gpu-0")]["metadata"]["labels"]["raychaos.io/protected"] = "true"
    target = make_target()
    with pytest.raises(FaultFailed, match="refusing to touch node gpu-0"):
        drain(target, record={}, selector="kubernetes.io/hostname=gpu-0")
    assert fake.mutating_requests() == []
    assert drain(target, record={}, count=1, evict=False)["nodes"] == ["gpu-1"]


def test_throttle_creates_labelled_privileged_daemonset_and_undo_deletes(fake, target):
    record: dict = {"fault": "throttle_registry_pulls"}
    ev = throttle(target, 5e6, nodes=["gpu-0"], registry_hosts=["registry-1.docker.io"],
                  record=record)
    ds = fake.get("daemonsets", "ray", "raychaos-pull-throttle-run1")
    assert ev["daemonset"] == "ray/raychaos-pull-throttle-run1"
    assert ds["metadata"]["labels"]["raychaos.io/run-id"] == "run1"
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] and pod["containers"][0]["securityContext"]["privileged"]
    assert "police rate" in pod["containers"][0]["command"][2]
    target.undo(record)
    assert fake.get("daemonsets", "ray", "raychaos-pull-throttle-run1") is None
    assert target.undo(record) == {"undone": True, "deleted": []}  # 404 = already gone


def test_saturate_uses_chaos_mesh_when_crd_exists(fake, target):
    with fake.lock:
        fake.put("customresourcedefinitions", {"metadata": {
            "name": "networkchaos.chaos-mesh.org"}})
    record: dict = {}
    ev = saturate(target, bandwidth_bps=8e6, record=record)
    chaos = fake.get("networkchaos", "ray", "raychaos-net-run1")
    assert ev["via"] == "chaos-mesh" and chaos["spec"]["action"] == "bandwidth"
    assert chaos["spec"]["selector"]["labelSelectors"] == {"ray.io/cluster": "demo"}
    target.undo(record)
    assert fake.get("networkchaos", "ray", "raychaos-net-run1") is None


def test_saturate_falls_back_to_iperf_pairs_and_cleanup_finds_leftovers(fake, target):
    ev = saturate(target, nodes=["gpu-0", "gpu-1"], flood_s=5, record={})
    assert ev["via"] == "iperf3" and ev["pairs"] == [["gpu-0", "gpu-1"]]
    client = fake.get("pods", "ray", "raychaos-net-run1-0-client")
    assert "iperf3 -c 10.0.0." in client["spec"]["containers"][0]["command"][2]
    throttle(target, 5e6, nodes=["gpu-0"], registry_hosts=["r.example"], record={})
    out = target.cleanup_run("run1")  # as after a crash: the ledger is lost, labels remain
    assert sorted(out["deleted"]) == ["raychaos-net-run1-0-client", "raychaos-net-run1-0-server",
                                      "raychaos-pull-throttle-run1"]
    assert fake.items("daemonsets") == []


def test_saturate_without_chaos_mesh_needs_two_nodes(target):
    with pytest.raises(NothingMatched, match="at least two nodes"):
        saturate(target, record={}, nodes=["gpu-0"])


def test_image_pull_seconds_from_events(target):
    assert [e["seconds"] for e in target.cluster_events(0)] == [12.3]
