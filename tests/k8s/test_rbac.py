"""deploy/rbac.yaml grants exactly what the code calls: the harness's whole tour against a world,
read back from that world's own record of requests (``w.rbac``, per instance)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from raychaos.config.settings import KubernetesSpec
from raychaos.errors import FaultFailed, RaychaosError
from raychaos.targets.kubernetes import network, registry
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.world import resources as R
from tests.k8s.world.chaosmesh import NETWORKCHAOS_CRD

pytestmark = pytest.mark.k8s

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
#: what only a ClusterRole can grant: cluster-scoped objects, and a drain's pods in any namespace
CLUSTER_SCOPED = {("list", "nodes"), ("get", "pods"), ("patch", "nodes"),
                  ("get", "customresourcedefinitions"), ("list", "pods"),
                  ("create", "pods/eviction"), ("list", "poddisruptionbudgets")}


def granted() -> dict[tuple[str, str, str], str]:
    """(verb, group, resource) → kind of the role granting it."""
    out = {}
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc["kind"] in ("Role", "ClusterRole"):
            for rule in doc["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        for v in rule["verbs"]:
                            out[(v, g, r)] = doc["kind"]
    return out


def tour(w, make_target, monkeypatch) -> None:  # noqa: ANN001
    """Every target method that talks to the API, once (sim nodes: what needs a container
    fails, but the request is made and recorded)."""
    w.api.create(R.BUILTIN["customresourcedefinitions"], "",
                 json.loads(json.dumps(NETWORKCHAOS_CRD)))
    rc = w.store.get("rayclusters", "ray", "demo")
    rc["spec"]["authOptions"] = {"mode": "token"}  # the token is read from its Secret
    w.api.update(w.api.resolve("ray.io", "v1", "rayclusters"), "ray", "demo", rc)
    import time
    deadline = time.monotonic() + 60  # the operator makes the Secret on its next reconcile,
    while w.store.get("secrets", "ray", "demo") is None:  # late on a loaded machine
        assert time.monotonic() < deadline, "the world's KubeRay never made the token Secret"
        time.sleep(0.1)
    monkeypatch.setattr(registry, "LANDED_WAIT_S", 0.5)
    monkeypatch.setattr(registry, "CLEAN_WAIT_S", 0.5)
    monkeypatch.setattr(network, "INJECTED_WAIT_S", 0.3)
    t = make_target(cluster=None)
    assert t.handle.dashboard.token, "the token came from the Secret"
    t.describe()
    t.gcs_alive(0.5)  # the port-forward to the head
    t.cluster_events(0)
    t.metrics_texts(0.5)  # the pods' metrics through the pod proxy
    from raychaos.errors import TargetBusy
    from raychaos.targets.kubernetes.lease import LeaseLock
    # a whole minute: a 5 s Lease was already expired when a loaded machine's world answered
    # the POST (the Lease is stamped before it is sent) and was, rightly, not busy
    dead = LeaseLock(t._api(), "ray", "demo", duration_s=60)
    dead.acquire("dead")
    with pytest.raises(TargetBusy):  # read back to name the holder
        t.run_lock().acquire("run1")
    dead._stop.set()  # the dead run stops renewing; its Lease is made a minute old, not waited
    lease = w.store.get("leases", "ray", dead.name)
    lease["spec"]["renewTime"] = "2000-01-01T00:00:00.000000Z"
    w.api.update(w.api.resolve("coordination.k8s.io", "v1", "leases"), "ray", dead.name, lease)
    lock = t.run_lock()
    lock.acquire("run1")  # the dead run's Lease, taken over (patched)
    lock.release()
    registry.report_of(t._api(), "ray", t.handle.pod_named("head")["metadata"]["name"])
    ev = t.kill_head("pod", {})
    t.wait_head_back(ev["old"], timeout=15)
    for attempt in (lambda: t.kill_head("gcs", {}),
                    lambda: t.throttle_registry_pulls(rate_bps=1e6, latency_ms=0, error_rate=0,
                                                      image_mb=32, restart_workers=None,
                                                      record={"undo": {}})):
        with pytest.raises(FaultFailed):
            attempt()
    rec: dict = {}
    t.drain_nodes(count=1, selector=None, deadline_s=5, reason="preemption", replace=True,
                  replace_delay_s=0, record=rec)
    t.undo(rec)
    with pytest.raises(RaychaosError):  # the cleanup pods cannot report on sim nodes
        t.undo({"undo": {"kind": "throttle_registry_pulls", "nodes": ["gpu-a"],
                         "run_id": "run1", "objects": [
                             {"api": "daemonset", "namespace": "ray",
                              "name": "raychaos-pull-throttle-run1"}]}})
    with pytest.raises(RaychaosError):  # no container answers the transfer probe
        t.saturate_network(nodes=["worker-1"], bandwidth_bps=8e6, loss_pct=0, latency_ms=0,
                           flood=True, partition=False, flood_s=5, record={})
    with pytest.raises(FaultFailed):  # nobody injects it here
        network._networkchaos(t._api(), "ray", "raychaos-net-run1", {"raychaos.io/run-id":
                                                                      "run1"},
                              [t.handle.pod_named("worker-1")], "8mbit")
    t.undo({"undo": {"kind": "saturate_network", "objects": [], "floods": [
        {"namespace": "ray", "pod": "gone", "container": "c"}]}})
    t.cleanup_run()
    w.api.create(R.BUILTIN["poddisruptionbudgets"], "ray", {"metadata": {"name": "mu"}, "spec": {
        "maxUnavailable": 1, "selector": {"matchLabels": {"ray.io/node-type": "worker"}}}})
    with pytest.raises(FaultFailed):  # the budget is read to explain the 429
        t.drain_nodes(count=1, selector=None, deadline_s=0.3, reason="preemption",
                      replace=True, replace_delay_s=0, record=rec)
    t.undo(rec)
    w.api.delete(R.BUILTIN["poddisruptionbudgets"], "ray", "mu", None)
    _code, cm = w.api.create(R.BUILTIN["configmaps"], "default", {"metadata": {"name": "o"}})
    w.api.create(R.BUILTIN["pods"], "default", {"metadata": {"name": "elsewhere",
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "o",
                             "uid": cm["metadata"]["uid"], "controller": True}]},
        "spec": {"nodeName": "gpu-b", "containers": [{"name": "c", "image": "x"}]}})
    t.drain_nodes(count=1, selector={"raychaos.io/node-pool": "gpu"}, deadline_s=5,
                  reason="preemption", replace=True, replace_delay_s=0, record=rec)
    t.undo(rec)
    cut: dict = {}  # a blackout: a NetworkChaos partition (the CRD exists here)
    t.cut_network(nodes=["worker-1"], record=cut)
    t.undo(cut)
    flags: dict = {}  # Ray's fault flags: the group's template patched, the pod recreated
    t.restart_with_env(nodes=["worker-2"], env={"RAY_testing_asio_delay_us": "x=1:2"},
                       wait_s=15, record=flags)
    t.undo(flags)
    # a target named by its RayJob or RayService: the object read, its cluster followed
    rjr = w.api.resolve("ray.io", "v1", "rayjobs")
    w.api.create(rjr, "ray", {"metadata": {"name": "train"}, "spec": {}})
    job = w.store.get("rayjobs", "ray", "train")
    w.api.update(rjr, "ray", "train", {**job, "status": {"rayClusterName": "demo"}},
                 sub="status")
    rsr = w.api.resolve("ray.io", "v1", "rayservices")
    w.api.create(rsr, "ray", {"metadata": {"name": "chat"}, "spec": {}})
    rs = w.store.get("rayservices", "ray", "chat")
    w.api.update(rsr, "ray", "chat", {**rs, "status": {"activeServiceStatus": {
        "rayClusterName": "demo"}}}, sub="status")
    for kind, name in (("rayjob", "train"), ("rayservice", "chat")):
        owned = KubernetesTarget(KubernetesSpec(kind=kind, name=name, namespace="ray",  # type: ignore[arg-type]
                                                kubeconfig=w.kubeconfig), run_id="run1")
        owned.connect()
        try:
            assert owned.owner()["kind"] == kind
            owned.serve_url()
        finally:
            owned.close()


def test_rbac_grants_every_call_and_nothing_unused(sim, make_target, monkeypatch):
    tour(sim, make_target, monkeypatch)
    used = set(sim.rbac)
    for sub in ("pods/exec", "pods/portforward"):  # a WebSocket GET, authorized as create
        if ("get", "", sub) in used:
            used.add(("create", "", sub))
    grants = granted()
    missing = sorted(u for u in used if u not in grants)
    assert not missing, f"deploy/rbac.yaml lacks {missing}"
    unused = sorted(g for g in grants if g not in used)
    assert not unused, f"deploy/rbac.yaml grants {unused} that no code path uses"
    for verb, group, resource in used:
        kind = grants[(verb, group, resource)]
        assert (kind == "ClusterRole") == ((verb, resource) in CLUSTER_SCOPED), \
            (verb, resource, kind)
