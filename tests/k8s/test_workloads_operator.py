"""The world's RayJob and RayService operators (``tests/k8s/world/workloads.py``) driven step by
step over the world's store and API objects — no server, no kubelets, no processes: the Jobs
and Serve APIs of the head are a dict here. What KubeRay writes, in order: the RayCluster made
and named in the status, the job submitted when the cluster is ready, its status copied, a head
loss failing a K8sJobMode RayJob, the planted freeze; the RayService's pending cluster, its
promotion when every application RUNS, its Serve Service, Ready/numServeEndpoints, and an
upgrade that switches the active cluster."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.k8s.world import resources as R
from tests.k8s.world import workloads
from tests.k8s.world.api import Api
from tests.k8s.world.kuberay import RAYCLUSTER_CRDS
from tests.k8s.world.store import Store
from tests.k8s.world.workloads import FREEZE, Workloads, default_workload
from tests.k8s.world.world import default_raycluster

pytestmark = pytest.mark.k8s


class Heads:
    """The head's Jobs and Serve APIs, by pod IP."""

    def __init__(self) -> None:
        self.jobs: dict[str, str] = {}
        self.apps: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str, str]] = []

    def __call__(self, ip: str, method: str, path: str, body: Any = None,
                 timeout: float = 5.0) -> Any:
        self.calls.append((ip, method, path))
        if path == "/api/jobs/" and method == "POST":
            self.jobs[body["submission_id"]] = "PENDING"
            return {"submission_id": body["submission_id"]}
        if path.startswith("/api/jobs/"):
            return {"status": self.jobs[path.rsplit("/", 1)[1]]}
        if method == "PUT":
            self.apps[ip] = {a["name"]: {"status": "DEPLOYING"} for a in body["applications"]}
            return None
        return {"applications": self.apps.get(ip, {})}


@pytest.fixture
def world(monkeypatch):
    store = Store()
    api = Api(store)
    api.create(R.BUILTIN["namespaces"], "", {"metadata": {"name": "ray"}})
    for crd in RAYCLUSTER_CRDS:
        api.create(R.BUILTIN["customresourcedefinitions"], "", json.loads(json.dumps(crd)))
    heads = Heads()
    monkeypatch.setattr(workloads, "_call", heads)
    yield api, heads, Workloads(api)
    store.close()


def _ready_cluster(api: Api, name: str, ip: str, uid_suffix: str = "") -> None:
    """What KubeRay and the kubelet would have done: the cluster ready, its head Ready."""
    rc = api.store.get("rayclusters", "ray", name)
    api.update(api.resolve("ray.io", "v1", "rayclusters"), "ray", name,
               {**rc, "status": {"state": "ready"}}, sub="status")
    api.create(R.BUILTIN["pods"], "ray", {
        "metadata": {"name": f"{name}-head{uid_suffix}", "labels": {
            "ray.io/cluster": name, "ray.io/node-type": "head"}},
        "spec": {"containers": [{"name": "ray-head", "image": "x"}]}})
    api.store.mutate("pods", "ray", f"{name}-head{uid_suffix}", lambda p: p.__setitem__(
        "status", {"phase": "Running", "podIP": ip,
                   "conditions": [{"type": "Ready", "status": "True"}]}))


def _st(api: Api, plural: str, name: str) -> dict:
    return api.store.get(plural, "ray", name)["status"]


def test_rayjob_lifecycle_and_a_k8sjobmode_head_loss(world):
    api, heads, op = world
    spec = default_raycluster("x", "ray")["spec"]
    api.create(api.resolve("ray.io", "v1", "rayjobs"), "ray",
               default_workload("rayjob", "train", "ray", spec, "/loads"))
    op.reconcile()
    st = _st(api, "rayjobs", "train")
    cluster = st["rayClusterName"]
    assert cluster.startswith("train-") and st["jobDeploymentStatus"] == "Initializing"
    rc = api.store.get("rayclusters", "ray", cluster)
    assert rc["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    op.reconcile()  # not ready yet: nothing submitted
    assert heads.calls == []
    _ready_cluster(api, cluster, "10.0.0.5")
    op.reconcile()
    assert _st(api, "rayjobs", "train")["jobDeploymentStatus"] == "Running"
    job_id = st["jobId"]
    heads.jobs[job_id] = "RUNNING"
    op.reconcile()
    assert _st(api, "rayjobs", "train")["jobStatus"] == "RUNNING"
    api.delete(R.BUILTIN["pods"], "ray", f"{cluster}-head", {"gracePeriodSeconds": 0})
    _ready_cluster(api, cluster, "10.0.0.6", uid_suffix="-new")
    op.reconcile()  # the submitter followed the old head: the RayJob fails with it
    st = _st(api, "rayjobs", "train")
    assert (st["jobDeploymentStatus"], st["reason"]) == ("Failed", "SubmissionFailed")
    assert st["jobStatus"] == "RUNNING"  # ... while the Ray job goes on


def test_rayjob_httpmode_copies_the_end_and_the_freeze_plants_a_disagreement(world):
    api, heads, op = world
    spec = default_raycluster("x", "ray")["spec"]
    rjr = api.resolve("ray.io", "v1", "rayjobs")
    for name, notes in (("a", {}), ("b", {FREEZE: "true"})):
        body = default_workload("rayjob", name, "ray", spec, "/loads", "HTTPMode")
        body["metadata"]["annotations"].update(notes)
        api.create(rjr, "ray", body)
    op.reconcile()
    for name in ("a", "b"):
        _ready_cluster(api, _st(api, "rayjobs", name)["rayClusterName"], f"10.0.1.{len(name)}"
                       if name == "a" else "10.0.1.9")
    op.reconcile()
    for name in ("a", "b"):
        heads.jobs[_st(api, "rayjobs", name)["jobId"]] = "SUCCEEDED"
    op.reconcile()
    a, b = _st(api, "rayjobs", "a"), _st(api, "rayjobs", "b")
    assert (a["jobStatus"], a["jobDeploymentStatus"], a["succeeded"]) == ("SUCCEEDED",
                                                                         "Complete", 1)
    assert (b["jobStatus"], b["jobDeploymentStatus"]) == ("PENDING", "Running")  # frozen


def test_rayservice_promotion_serve_service_and_an_upgrade_switch(world):
    api, heads, op = world
    spec = default_raycluster("x", "ray")["spec"]
    rsr = api.resolve("ray.io", "v1", "rayservices")
    api.create(rsr, "ray", default_workload("rayservice", "chat", "ray", spec, "/loads"))
    op.reconcile()
    st = _st(api, "rayservices", "chat")
    first = st["pendingServiceStatus"]["rayClusterName"]
    assert not st.get("activeServiceStatus") and st["numServeEndpoints"] == 0
    assert {c["type"]: c["status"] for c in st["conditions"]}["Ready"] == "False"
    _ready_cluster(api, first, "10.0.2.1")
    op.reconcile()  # serveConfigV2 PUT, applications DEPLOYING
    assert ("10.0.2.1", "PUT", "/api/serve/applications/") in heads.calls
    assert _st(api, "rayservices", "chat")["pendingServiceStatus"]["rayClusterName"] == first
    heads.apps["10.0.2.1"]["raychaos"]["status"] = "RUNNING"
    op.reconcile()
    st = _st(api, "rayservices", "chat")
    assert st["activeServiceStatus"]["rayClusterName"] == first and "pendingServiceStatus" \
        not in st
    svc = api.store.get("services", "ray", "chat-serve-svc")
    assert svc["spec"]["selector"] == {"ray.io/cluster": first, "ray.io/serve": "true"}
    api.create(R.BUILTIN["endpoints"], "ray", {"metadata": {"name": "chat-serve-svc"},
                                               "subsets": [{"addresses": [{"ip": "10.0.2.7"}],
                                                            "ports": [{"port": 8000}]}]})
    op.reconcile()
    st = _st(api, "rayservices", "chat")
    assert st["numServeEndpoints"] == 1 and st["serviceStatus"] == "Running"
    assert {c["type"]: c["status"] for c in st["conditions"]} == {
        "Ready": "True", "UpgradeInProgress": "False"}
    # an upgrade: a new rayClusterConfig -> a second cluster, then the switch
    rs = api.store.get("rayservices", "ray", "chat")
    rs["spec"]["rayClusterConfig"]["rayVersion"] = "2.60.1"
    api.update(rsr, "ray", "chat", rs)
    op.reconcile()
    st = _st(api, "rayservices", "chat")
    second = st["pendingServiceStatus"]["rayClusterName"]
    assert second != first and st["activeServiceStatus"]["rayClusterName"] == first
    assert {c["type"]: c["status"] for c in st["conditions"]}["UpgradeInProgress"] == "True"
    _ready_cluster(api, second, "10.0.2.2")
    op.reconcile()
    heads.apps["10.0.2.2"]["raychaos"]["status"] = "RUNNING"
    op.reconcile()
    st = _st(api, "rayservices", "chat")
    assert st["activeServiceStatus"]["rayClusterName"] == second
    assert api.store.get("services", "ray", "chat-serve-svc")["spec"]["selector"][
        "ray.io/cluster"] == second
    old = api.store.get("rayclusters", "ray", first)
    assert old is None or old["metadata"].get("deletionTimestamp"), "the old cluster is deleted"
