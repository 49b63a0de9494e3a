"""Drain: cordon + Eviction API, PDB 429 handling, KubeRay #2662, skipped pods, rollback."""

from __future__ import annotations

import pytest

from raychaos.errors import ConfigError, FaultFailed, NothingMatched
from tests.k8s._faults import drain

pytestmark = pytest.mark.k8s


def add_pdb(fake, **spec) -> None:  # noqa: ANN001, ANN003
    with fake.lock:
        fake.put("poddisruptionbudgets", {
            "metadata": {"name": "ray-workers", "namespace": "ray"},
            "spec": {"selector": {"matchLabels": {"ray.io/node-type": "worker"}}, **spec}})


def test_drain_request_sequence_and_undo(fake, target):
    record: dict = {"fault": "drain_nodes"}
    ev = drain(target, record=record, count=1, deadline_s=2)
    assert ev["nodes"] == ["gpu-0"] and ev["cordoned"] == ["gpu-0"]
    assert len(ev["evicted"]) == 2 and ev["blocked"] == []
    assert [s["why"] for s in ev["skipped"]] == ["DaemonSet"]
    muts = fake.mutating_requests()
    assert muts[0] == ("PATCH", "/api/v1/nodes/gpu-0")
    assert [m for m in muts[1:]] == [("POST", f"/api/v1/namespaces/ray/pods/{p}/eviction")
                                     for p in ev["evicted"]]
    node = fake.get("nodes", "", "gpu-0")
    assert node["spec"]["unschedulable"] is True
    assert node["spec"]["taints"][0]["key"] == "node.kubernetes.io/unschedulable"
    assert node["metadata"]["labels"]["raychaos.io/cordoned-by"] == "run1"
    assert record["undo"] == {"kind": "drain_nodes", "nodes": ["gpu-0"]}
    target.undo(record)
    node = fake.get("nodes", "", "gpu-0")
    assert not node["spec"].get("unschedulable") and not node["spec"]["taints"]
    assert "raychaos.io/cordoned-by" not in node["metadata"]["labels"]
    assert target.undo(record)["undone"]  # idempotent


def test_min_available_pdb_429_is_retried_until_replacement_ready(fake, target):
    add_pdb(fake, minAvailable=3)  # 4 ready workers: one eviction at a time
    ev = drain(target, record={}, count=1, deadline_s=2)
    assert len(ev["evicted"]) == 2 and ev["eviction_attempts"] > 2
    codes = [v for m, p, v, _ in fake.requests if p.endswith("/eviction")]
    assert len(codes) == ev["eviction_attempts"]


def test_max_unavailable_pdb_over_kuberay_pods_names_issue_2662(fake, target):
    add_pdb(fake, maxUnavailable=1)
    record: dict = {}
    with pytest.raises(FaultFailed) as err:
        drain(target, record=record, count=1, deadline_s=0.4)
    msg = str(err.value)
    assert msg.startswith("drain_nodes: 2 of 2 pods on gpu-0 could not be evicted within 0.4 s "
                          "(HTTP 429): PodDisruptionBudget ray/ray-workers uses maxUnavailable "
                          "over RayCluster pods, so disruptionsAllowed stays 0")
    assert "KubeRay issue #2662" in msg and "integer minAvailable" in msg
    # the fault failed midway: the node is cordoned, and rollback uncordons it
    assert fake.get("nodes", "", "gpu-0")["spec"]["unschedulable"] is True
    assert record["evidence"]["blocked"]
    target.undo(record)
    assert not fake.get("nodes", "", "gpu-0")["spec"].get("unschedulable")


def test_mirror_pods_skipped(fake, target):
    with fake.lock:
        pod = next(p for (_, n), p in fake.store["pods"].items() if n.startswith("demo-gpu")
                   and p["spec"]["nodeName"] == "gpu-0")
        pod["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x"}
    ev = drain(target, record={}, count=1, deadline_s=2)
    assert sorted(s["why"] for s in ev["skipped"]) == ["DaemonSet", "mirror pod"]
    assert len(ev["evicted"]) == 1


def test_max_nodes_at_once(target):
    with pytest.raises(ConfigError, match=r"2 nodes match .* but max_nodes_at_once is 1"):
        drain(target, record={}, selector="nvidia-present!=no,kubernetes.io/hostname!=cpu-0")


def test_selector_matching_nothing(target):
    with pytest.raises(NothingMatched, match="no node matches selector 'pool=none'"):
        drain(target, record={}, selector="pool=none")


def test_cleanup_run_uncordons_our_nodes(fake, make_target):
    target = make_target(max_nodes_at_once=2)
    drain(target, record={}, count=2, evict=False)
    assert all(fake.get("nodes", "", n)["spec"]["unschedulable"] for n in ("gpu-0", "gpu-1"))
    out = target.cleanup_run("run1")
    assert sorted(out["uncordoned"]) == ["gpu-0", "gpu-1"]
    assert not any(fake.get("nodes", "", n)["spec"].get("unschedulable")
                   for n in ("gpu-0", "gpu-1"))
