"""The world's controllers with simulated kubelets (no processes, no lock): KubeRay's pods and
services, head and worker replacement, the scheduler, evictions under budgets, cordons,
DaemonSets, selectors, the harness's own Kubernetes target against it, and API-only scale.
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client, config

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.world import World, default_nodes
from tests.k8s.world import resources as R


def wait(pred, timeout: float = 10.0, what: str = "condition"):  # noqa: ANN001
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def world(tmp_path):
    w = World(name="sim", nodes=default_nodes("sim"), state_root=tmp_path).start()
    config.load_kube_config(w.kubeconfig)
    w.wait_ready(timeout=20)
    yield w
    assert w.stop() == []


def core(w: World) -> client.CoreV1Api:
    cfg = client.Configuration()
    config.load_kube_config(w.kubeconfig, client_configuration=cfg)
    return client.CoreV1Api(client.ApiClient(cfg))


def test_kuberay_pods_services_and_status(world):
    head = world.head_pod()
    labels = head["metadata"]["labels"]
    assert labels["ray.io/node-type"] == "head" and labels["ray.io/is-ray-node"] == "yes"
    assert labels["ray.io/group"] == "headgroup" and labels["ray.io/cluster"] == "demo"
    c = head["spec"]["containers"][0]
    assert c["command"] == ["/bin/bash", "-lc", "--"]
    assert "ray start --head" in c["args"][0] and "--num-cpus=0" in c["args"][0]
    assert "--block" in c["args"][0] and "--object-store-memory=150000000" in c["args"][0]
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["RAY_AUTH_MODE"] == "disabled" and env["RAY_USAGE_STATS_ENABLED"] == "0"
    assert env["RAY_gcs_storage"] == "rocksdb"
    assert any(v["name"] == "shared-mem" and v["emptyDir"]["medium"] == "Memory"
               for v in head["spec"]["volumes"])
    for w in world.ray_pods("worker"):
        wenv = {e["name"]: e.get("value") for e in w["spec"]["containers"][0]["env"]}
        assert wenv["RAY_gcs_rpc_server_reconnect_timeout_s"] == "600"
        assert "--address=demo-head-svc.ray.svc.cluster.local:6379" in \
            w["spec"]["containers"][0]["args"][0]
        assert w["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"
    gpu = world.ray_pods("worker")
    gpu = [p for p in gpu if p["metadata"]["labels"]["ray.io/group"] == "gpu"][0]
    assert gpu["spec"]["nodeName"].startswith("gpu-") and "--num-gpus=1" in \
        gpu["spec"]["containers"][0]["args"][0]
    svc = world.store.get("services", "ray", "demo-head-svc")
    assert {p["port"] for p in svc["spec"]["ports"]} >= {6379, 8265, 10001, 8000}
    assert world.store.get("services", "ray", "demo-serve-svc")["spec"]["selector"] == {
        "ray.io/cluster": "demo", "ray.io/serve": "true"}
    st = wait(lambda: (world.store.get("rayclusters", "ray", "demo") or {}).get("status", {})
              .get("state") == "ready" and world.store.get("rayclusters", "ray", "demo"))["status"]
    assert st["head"]["serviceName"] == "demo-head-svc" and st["head"]["podIP"]
    assert st["readyWorkerReplicas"] == 2 and st["desiredWorkerReplicas"] == 2
    eps = wait(lambda: (world.store.get("endpoints", "ray", "demo-head-svc") or {}).get(
        "subsets"))
    assert eps[0]["addresses"][0]["ip"] == st["head"]["podIP"]


def test_the_head_service_publishes_an_unready_head_as_kuberays_does(world):
    """KubeRay's head Service has ``publishNotReadyAddresses`` (common/service.go): workers and
    clients reach a head whose health checks fail (a slow GCS, a restart); a Service without it
    lists the same pod under ``notReadyAddresses`` only."""
    from tests.k8s.world.api import set_condition
    core(world).create_namespaced_service("ray", {
        "metadata": {"name": "plain"}, "spec": {
            "selector": {"ray.io/cluster": "demo", "ray.io/node-type": "head"},
            "ports": [{"name": "gcs", "port": 6379, "targetPort": 6379}]}})
    head = world.head_pod()
    ip = head["status"]["podIP"]
    assert world.store.get("services", "ray", "demo-head-svc")["spec"][
        "publishNotReadyAddresses"] is True
    with world.store.lock:
        pod = world.store.get("pods", "ray", head["metadata"]["name"])
        set_condition(pod, "Ready", "False", "ContainersNotReady")
        world.store.update("pods", pod)

    def subsets(name: str) -> list:
        return (world.store.get("endpoints", "ray", name) or {}).get("subsets") or []

    wait(lambda: any(a["ip"] == ip for s in subsets("plain")
                     for a in s.get("notReadyAddresses") or []), what="plain: not ready")
    assert not any(s.get("addresses") for s in subsets("plain"))
    assert [a["ip"] for s in subsets("demo-head-svc") for a in s.get("addresses") or []] == [ip]


def test_head_and_worker_replacement(world):
    api = core(world)
    old = world.head_pod()
    api.delete_namespaced_pod(old["metadata"]["name"], "ray",
                              body=client.V1DeleteOptions(grace_period_seconds=0))
    new = wait(lambda: (h := world.head_pod()) and h["metadata"]["uid"] != old["metadata"]["uid"]
               and h, what="a new head")
    assert new["metadata"]["name"] != old["metadata"]["name"]
    worker = world.ray_pods("worker")[0]
    api.delete_namespaced_pod(worker["metadata"]["name"], "ray")
    wait(lambda: len([p for p in world.ray_pods("worker")
                      if p["metadata"]["uid"] != worker["metadata"]["uid"]]) == 2,
         what="a replacement worker")


def test_eviction_pdb_replacement_and_unschedulable(world):
    api = core(world)
    policy = client.PolicyV1Api(api.api_client)
    policy.create_namespaced_pod_disruption_budget("ray", {
        "metadata": {"name": "workers"}, "spec": {"minAvailable": 1, "selector": {
            "matchLabels": {"ray.io/cluster": "demo", "ray.io/node-type": "worker"}}}})
    wait(lambda: (world.store.get("poddisruptionbudgets", "ray", "workers") or {}).get(
        "status", {}).get("disruptionsAllowed") == 1, what="the budget")
    gpu = [p for p in world.ray_pods("worker") if p["metadata"]["labels"]["ray.io/group"] ==
           "gpu"][0]
    first_node = gpu["spec"]["nodeName"]
    api.create_namespaced_pod_eviction(gpu["metadata"]["name"], "ray", {
        "metadata": {"name": gpu["metadata"]["name"], "namespace": "ray"}})
    evicted = world.store.get("pods", "ray", gpu["metadata"]["name"])
    if evicted:  # the sim kubelet may already have stopped it
        assert any(c["type"] == "DisruptionTarget" for c in evicted["status"]["conditions"])
    repl = wait(lambda: [p for p in world.ray_pods("worker")
                         if p["metadata"]["labels"]["ray.io/group"] == "gpu"
                         and p["metadata"]["uid"] != gpu["metadata"]["uid"]
                         and p["spec"].get("nodeName")], what="a scheduled replacement")[0]
    assert repl["spec"]["nodeName"] != first_node
    for n in ("gpu-a", "gpu-b"):
        api.patch_node(n, {"spec": {"unschedulable": True}})
    wait(lambda: all(any(t["key"] == "node.kubernetes.io/unschedulable" for t in
                         world.store.get("nodes", "", n)["spec"].get("taints", []))
                     for n in ("gpu-a", "gpu-b")), what="cordon taints")
    api.delete_namespaced_pod(repl["metadata"]["name"], "ray",
                              body=client.V1DeleteOptions(grace_period_seconds=0))
    pending = wait(lambda: [p for p in world.ray_pods("worker")
                            if p["metadata"]["labels"]["ray.io/group"] == "gpu"
                            and any(c.get("reason") == "Unschedulable" for c in
                                    p["status"].get("conditions") or [])],
                   what="an unschedulable replacement")[0]
    cond = [c for c in pending["status"]["conditions"] if c["type"] == "PodScheduled"][0]
    assert cond["status"] == "False"
    assert cond["message"].startswith("0/4 nodes are available: ")
    assert "2 node(s) were unschedulable" in cond["message"], cond["message"]
    api.patch_node("gpu-b", {"spec": {"unschedulable": None}})
    wait(lambda: (world.store.get("pods", "ray", pending["metadata"]["name"]) or {}).get(
        "spec", {}).get("nodeName") == "gpu-b", what="rescheduling after uncordon")


def test_maxunavailable_budget_never_evicts(world):
    api = core(world)
    client.PolicyV1Api(api.api_client).create_namespaced_pod_disruption_budget("ray", {
        "metadata": {"name": "mu"}, "spec": {"maxUnavailable": 1, "selector": {
            "matchLabels": {"ray.io/cluster": "demo", "ray.io/node-type": "worker"}}}})
    pod = world.ray_pods("worker")[0]
    with pytest.raises(client.ApiException) as exc:
        api.create_namespaced_pod_eviction(pod["metadata"]["name"], "ray", {
            "metadata": {"name": pod["metadata"]["name"]}})
    assert exc.value.status == 429 and "still being processed" in exc.value.body
    st = wait(lambda: world.store.get("poddisruptionbudgets", "ray", "mu").get("status"))
    assert st["conditions"][0]["reason"] == "SyncFailed"


def test_daemonset_one_pod_per_node_and_gc(world):
    apps = client.AppsV1Api(core(world).api_client)
    sel = {"matchLabels": {"app": "ds"}}
    apps.create_namespaced_daemon_set("ray", {"metadata": {"name": "ds"}, "spec": {
        "selector": sel, "template": {"metadata": {"labels": {"app": "ds"}}, "spec": {
            "hostNetwork": True, "tolerations": [{"operator": "Exists"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name",
                                                        "operator": "In",
                                                        "values": ["gpu-a", "cpu-0"]}]}]}}},
            "containers": [{"name": "c", "image": "ghcr.io/x/y:1",
                            "securityContext": {"privileged": True}}]}}}})
    st = wait(lambda: (world.store.get("daemonsets", "ray", "ds") or {}).get("status", {})
              .get("numberReady") == 2 and world.store.get("daemonsets", "ray", "ds")["status"])
    assert st["desiredNumberScheduled"] == 2
    pods = world.store.list("pods", "ray", "app=ds")
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["cpu-0", "gpu-a"]
    apps.delete_namespaced_daemon_set("ds", "ray")
    wait(lambda: not world.store.list("pods", "ray", "app=ds"), what="DaemonSet pods GC'd")


def test_selectors(world):
    api = core(world)
    names = lambda sel: sorted(p.metadata.labels["ray.io/group"] for p in  # noqa: E731
                               api.list_namespaced_pod("ray", label_selector=sel).items)
    assert names("ray.io/group in (gpu,cpu)") == ["cpu", "gpu"]
    assert names("ray.io/cluster=demo,ray.io/group notin (gpu,cpu)") == ["headgroup"]
    assert names("ray.io/is-ray-node,!missing") == ["cpu", "gpu", "headgroup"]
    assert names("ray.io/node-type!=worker") == ["headgroup"]
    on = api.list_namespaced_pod("ray", field_selector="spec.nodeName=head-0").items
    assert [p.metadata.labels["ray.io/node-type"] for p in on] == ["head"]
    running = api.list_namespaced_pod("ray", field_selector="status.phase=Running").items
    assert len(running) == 3


def test_the_harness_target_against_the_world(world):
    t = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray",
                                        kubeconfig=world.kubeconfig), run_id="r1")
    t.connect()
    try:
        assert t.gcs_ft()["enabled"] is True
        kill = t.kill_head("pod", {})
        back = t.wait_head_back(kill["old"], timeout=15)
        assert back["recovered"] and back["uid_changed"]
        rec: dict = {}
        ev = t.drain_nodes(count=1, selector=None, deadline_s=15, reason="preemption",
                           replace=True, replace_delay_s=0, record=rec)
        assert ev["evicted"], ev
        t.undo(rec)
        assert not world.store.get("nodes", "", ev["nodes"][0])["spec"].get("unschedulable")
    finally:
        t.close()
    assert ("create", "", "pods/eviction") in world.rbac
    assert ("watch", "", "pods") in world.rbac


def test_api_only_scale(tmp_path):
    w = World(name="scale", cluster=None, nodes=[], state_root=tmp_path).start()
    try:
        t0 = time.monotonic()
        w.seed(nodes=100, pods=1000)
        seeded = time.monotonic() - t0
        api = core(w)
        t0 = time.monotonic()
        items = api.list_namespaced_pod("ray", label_selector="shard in (1,2)",
                                        _preload_content=False)
        listed = time.monotonic() - t0
        assert items.status == 200
        assert len(api.list_node().items) == 100
        assert seeded < 60 and listed < 5, (seeded, listed)
    finally:
        assert w.stop() == []


def test_go_durations_as_the_kubelet_prints_them():
    from raychaos.testbed.node.kubelet import go_duration, normalize_image
    assert go_duration(0.1234) == "123ms"
    assert go_duration(12.3) == "12.3s" and go_duration(2.0) == "2s"
    assert go_duration(83.456) == "1m23.456s" and go_duration(3723.5) == "1h2m3.5s"
    assert normalize_image("rayproject/ray:2.60.0") == \
        "registry-1.docker.io/rayproject/ray:2.60.0"
    assert normalize_image("busybox") == "registry-1.docker.io/library/busybox:latest"
    assert normalize_image("registry.raychaos.test/a/b:1") == "registry.raychaos.test/a/b:1"


def test_knobs_replacement_delay_and_head_service_name(tmp_path):
    from tests.k8s.world.world import default_raycluster
    w = World(name="knobs", cluster=None, nodes=default_nodes("sim"), state_root=tmp_path,
              replacement_delay_s=1.5, head_restart_policy="Never").start()
    try:
        rc = default_raycluster("rc2", "ray")
        rc["spec"]["headGroupSpec"]["headService"] = {"metadata": {"name": "custom-head"}}
        w.api.create(w.api.resolve("ray.io", "v1", "rayclusters"), "ray", rc)
        w.cluster = "rc2"
        w.wait_ready(timeout=20)
        assert w.store.get("services", "ray", "custom-head") is not None
        head = w.head_pod()
        assert head["spec"]["restartPolicy"] == "Never"
        worker = w.ray_pods("worker")[0]
        w.api.delete(R.BUILTIN["pods"], "ray", worker["metadata"]["name"],
                     {"gracePeriodSeconds": 0})
        t0 = time.monotonic()
        wait(lambda: len(w.ray_pods("worker")) == 2, what="the delayed replacement")
        assert time.monotonic() - t0 >= 1.2
        st = w.store.get("rayclusters", "ray", "rc2")["status"]
        assert st["head"]["serviceName"] == "custom-head"
    finally:
        assert w.stop() == []


def test_the_harness_reads_every_pull_duration_form(world):
    pod = world.head_pod()
    from raychaos.testbed.node.kubelet import go_duration
    from tests.k8s.world.controllers import record_event
    for secs in (0.123, 12.3, 83.456):
        d = go_duration(secs)
        record_event(world.api, pod, "Pulled", f'Successfully pulled image "x" in {d} ({d} '
                     "including waiting). Image size: 1 bytes.", "kubelet", host="head-0")
    t = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray",
                                        kubeconfig=world.kubeconfig), run_id="r1")
    t.connect()
    try:
        got = sorted(e["seconds"] for e in t.cluster_events(0))
    finally:
        t.close()
    assert got == pytest.approx([0.123, 12.3, 83.456])
