"""Dry-run, protected objects, the throttle DaemonSet and its proof, Chaos Mesh objects, names
like ``worker-1``, leftovers after a lost ledger, and what reaches the timeline — against the
world with simulated kubelets (nothing runs there, so nothing can report having landed: the
throttle must then fail, not pass)."""

from __future__ import annotations

import json
import subprocess

import pytest

from raychaos.errors import ConfigError, FaultFailed, NothingMatched, RollbackFailed
from raychaos.targets.kubernetes import registry
from tests.k8s.conftest import mutations
from tests.k8s.world import resources as R
from tests.k8s.world.chaosmesh import NETWORKCHAOS_CRD

pytestmark = pytest.mark.k8s


def chaos_mesh(w) -> None:  # noqa: ANN001
    w.api.create(R.BUILTIN["customresourcedefinitions"], "",
                 json.loads(json.dumps(NETWORKCHAOS_CRD)))


def throttle(t, record: dict, restart: list[str] | None = None) -> dict:  # noqa: ANN001
    return t.throttle_registry_pulls(rate_bps=5e6, latency_ms=0, error_rate=0, image_mb=32,
                                     restart_workers=restart, record=record)


def saturate(t, record: dict, nodes: list[str] | None = None, bw: float = 8e6) -> dict:  # noqa: ANN001
    return t.saturate_network(nodes=nodes or ["worker-1"], bandwidth_bps=bw, loss_pct=0,
                              latency_ms=0, flood=True, partition=False, flood_s=5,
                              record=record)


def test_dry_run_sends_no_mutating_request(sim, make_target):
    chaos_mesh(sim)
    t = make_target(dry_run=True, max_nodes_at_once=2)
    since = len(sim.server.requests)
    t.kill_head("pod", {})
    ev = t.drain_nodes(count=2, selector={"raychaos.io/node-pool": "gpu"}, deadline_s=5,
                       reason="preemption", replace=True, replace_delay_s=0, record={})
    throttle(t, {})
    saturate(t, {})
    assert mutations(sim, since) == []
    assert ev["dry_run"] and ev["cordoned"] == ["gpu-a", "gpu-b"]
    calls = t.planned_calls()
    assert [c["method"] for c in calls] == ["DELETE", "PATCH", "PATCH", "POST", "POST", "POST"]
    assert calls[3]["path"].endswith("/eviction")
    calls = calls[:3] + calls[4:]
    assert calls[0]["body"]["gracePeriodSeconds"] == 0
    assert calls[1]["body"] == {"spec": {"unschedulable": True},
                                "metadata": {"labels": {"raychaos.io/cordoned-by": "run1"}}}
    assert calls[3]["path"] == "/apis/apps/v1/namespaces/ray/daemonsets"
    assert calls[4]["path"] == "/apis/chaos-mesh.org/v1alpha1/namespaces/ray/networkchaos"
    gpu_worker = t.handle.pod_named("worker-1")["metadata"]["name"]
    assert "-gpu-worker-" in gpu_worker
    assert calls[4]["body"]["spec"]["selector"] == {"pods": {"ray": [gpu_worker]}}


def test_protected_node_is_refused_by_selector_and_skipped_by_count(sim, target):
    def protect(n: dict) -> None:
        n["metadata"]["labels"]["raychaos.io/protected"] = "true"

    sim.store.mutate("nodes", "", "gpu-a", protect)
    since = len(sim.server.requests)
    with pytest.raises(NothingMatched):  # count: gpu-a is skipped, gpu-b runs no Ray pod
        target.select_drain_victims(1, None)
    with pytest.raises(NothingMatched, match=r"count is 1 but only 0 schedulable node"):
        target.select_drain_victims(1, {"kubernetes.io/hostname": "gpu-a"})
    assert mutations(sim, since) == []


def test_the_throttle_daemonset_and_no_report_means_it_did_not_land(sim, target, monkeypatch):
    monkeypatch.setattr(registry, "LANDED_WAIT_S", 1.0)
    record: dict = {"fault": "throttle_registry_pulls"}
    with pytest.raises(FaultFailed, match=r"the throttle did not land on cpu-0: no report; "
                                          r"gpu-a: no report; gpu-b: no report; head-0: no "
                                          r"report"):
        throttle(target, record)
    ds = sim.store.get("daemonsets", "ray", "raychaos-pull-throttle-run1")
    assert ds["metadata"]["labels"]["raychaos.io/run-id"] == "run1"
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostNetwork"] and pod["containers"][0]["securityContext"]["privileged"]
    script = pod["containers"][0]["command"][2]
    assert "type ifb" in script and "root tbf rate" in script and "mirred" in script
    assert "police" not in script  # this kernel (and others) lack act_police
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["RATE"] == "5mbit" and env["HOSTS"] == "registry.raychaos.test"
    affinity = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    # every node the cluster's pods may land on, one term each: the real API server allows
    # one value per node field selector
    assert [t["matchFields"] for t in affinity["nodeSelectorTerms"]] == [
        [{"key": "metadata.name", "operator": "In", "values": [n]}]
        for n in ("cpu-0", "gpu-a", "gpu-b", "head-0")]
    assert record["undo"]["kind"] == "throttle_registry_pulls"
    monkeypatch.setattr(registry, "CLEAN_WAIT_S", 1.0)
    with pytest.raises(RollbackFailed, match=r"could not check node\(s\) head-0, cpu-0, gpu-a, "
                                             r"gpu-b|could not check node"):
        target.undo(record)  # nothing runs here, so no node can be proven clean
    assert sim.store.get("daemonsets", "ray", "raychaos-pull-throttle-run1") is None


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_the_scripts_parse(shell):
    for script in (registry.THROTTLE_SCRIPT, registry.CLEAN_SCRIPT):
        proc = subprocess.run([shell, "-n", "-c", script], capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, proc.stderr


def test_registry_hosts_drop_ports_and_know_docker_hub():
    assert registry.registry_hosts(["registry.example:5000/ray:1", "rayproject/ray:2.60.0",
                                    "localhost:5001/x"]) == [
        "localhost", "production.cloudflare.docker.com", "registry-1.docker.io",
        "registry.example"]


def test_saturate_preflight_resolves_names_and_needs_chaos_mesh_for_bandwidth(sim, target):
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


def test_cleanup_run_finds_leftovers_of_a_lost_ledger(sim, target, monkeypatch):
    chaos_mesh(sim)
    monkeypatch.setattr(registry, "LANDED_WAIT_S", 0.5)
    with pytest.raises(FaultFailed):
        throttle(target, {})
    labels = {"raychaos.io/run-id": "run1"}
    sim.api.create(sim.api.resolve("chaos-mesh.org", "v1alpha1", "networkchaos"), "ray", {
        "metadata": {"name": "raychaos-net-run1", "labels": labels},
        "spec": {"action": "bandwidth", "selector": {"pods": {"ray": []}}}})
    out = target.cleanup_run("run1")  # as after a crash: the ledger is lost, labels remain
    assert sorted(out["deleted"]) == ["raychaos-net-run1", "raychaos-pull-throttle-run1"]
    assert sim.store.list("daemonsets") == []


def test_pulls_in_every_go_form_and_pod_changes_reach_the_timeline_once(sim, target):
    from raychaos.testbed.node.kubelet import go_duration
    from tests.k8s.world.controllers import record_event
    assert not [e for e in target.cluster_events(0) if e["event"] != "image_pulled"]
    pod = sim.head_pod()
    for secs in (0.123, 12.3, 83.456):
        d = go_duration(secs)
        record_event(sim.api, pod, "Pulled", f'Successfully pulled image "x" in {d} ({d} '
                     "including waiting). Image size: 1 bytes.", "kubelet", host="head-0")
    ev = target.kill_head("pod", {})
    target.wait_head_back(ev["old"], timeout=15)
    got = target.cluster_events(0)
    pulls = sorted(e["seconds"] for e in got if e["event"] == "image_pulled")
    assert pulls == pytest.approx([0.123, 12.3, 83.456])
    kinds = {(e["event"], e["node"]) for e in got}
    assert ("node_stopped", pod["metadata"]["name"]) in kinds
    assert any(k == "node_started" and n != pod["metadata"]["name"] for k, n in kinds)
    assert [e for e in target.cluster_events(0) if e["event"] == "image_pulled"] == [], \
        "each event once"
