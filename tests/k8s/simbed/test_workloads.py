"""A RayJob or RayService as the target, against the real API server and KubeRay operator v1.5.0
(the sim bed: nodes that run nothing, so no Ray and no Serve): the RayCluster read from the
status the operator fills, followed on a switch, and the Serve traffic's pod chosen as the
RayService's Serve Service routes it.

The RayJob is the operator's all the way: it makes the RayJob's RayCluster from
``rayClusterSpec`` and writes ``status.rayClusterName``. A RayService's active cluster it only
writes once Serve is healthy — never on simulated nodes — so the RayService here is one the
operator leaves alone (a spec it refuses: a head Service with a name, an event and nothing
else) whose status the admin writes as the operator would, over two real RayClusters and a
real Service in front of one. What only real nodes can show — KubeRay itself switching on a
healthy upgrade, and requests reaching a Serve proxy through that Service — is the bed's
(``tests/k8s/bed``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from raychaos.cli import main
from raychaos.config.settings import KubernetesSpec
from raychaos.errors import TargetUnavailable
from raychaos.targets.kubernetes.owner import ServeServiceResolver
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed
from tests.k8s.simbed.conftest import MUTATING, REPO, admin, get, until

pytestmark = pytest.mark.k8s

NS = "ray"
RAY = f"/apis/ray.io/v1/namespaces/{NS}"
PODS = f"/api/v1/namespaces/{NS}/pods"
IMAGE = "rayproject/ray:2.60.0"
SMALL = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}


def _create(b: testbed.Bed, collection: str, doc: dict[str, Any]) -> dict[str, Any]:
    code, body = admin(b).call("POST", collection, doc, timeout=30)
    assert code == 201, (collection, code, body)
    return body


def _delete_and_wait(b: testbed.Bed, paths: list[str], pods_of: list[str]) -> None:
    """Delete ``paths`` and wait until they and the pods of RayClusters ``pods_of`` are gone:
    the next module finds the bed as the package left it."""
    for path in paths:
        code, body = admin(b).call("DELETE", path, {
            "apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
        assert code in (200, 202, 404), (path, code, body)
    for path in paths:
        until(f"{path} gone", lambda p=path: get(b, p) is None)
    for cluster in pods_of:
        until(f"RayCluster {cluster}'s pods gone", lambda c=cluster: not get(
            b, f"{PODS}?labelSelector=ray.io/cluster%3D{c}")["items"])


def _target(b: testbed.Bed, kind: str, name: str) -> KubernetesTarget:
    t = KubernetesTarget(KubernetesSpec(kind=kind, name=name, namespace=NS,  # type: ignore[arg-type]
                                        kubeconfig=str(b.kubeconfig)), run_id="run1")
    t.connect()
    return t


def _head(labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"rayStartParams": {"num-cpus": "0"}, "template": {
        "metadata": {"labels": labels or {}},
        "spec": {"nodeSelector": {"raychaos.io/node-pool": "head"}, "containers": [
            {"name": "ray-head", "image": IMAGE, "resources": SMALL}]}}}


def _ready(b: testbed.Bed, cluster: str) -> bool:
    rc = get(b, f"{RAY}/rayclusters/{cluster}") or {}
    return (rc.get("status") or {}).get("state") == "ready"


@pytest.fixture(scope="module")
def rayjob(simbed: testbed.Bed) -> Iterator[dict[str, Any]]:
    """RayJob ray/train with a cluster of its own (a small head on head-0): the operator makes
    the RayCluster and, once it is ready, the submitter Job (whose pod runs nothing here)."""
    _create(simbed, f"{RAY}/rayjobs", {
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "train"},
        "spec": {"entrypoint": "python -c pass", "shutdownAfterJobFinishes": False,
                 "rayClusterSpec": {"rayVersion": "2.60.0", "headGroupSpec": _head()}}})
    cluster = ""
    try:
        job = until("RayJob ray/train's cluster ready and its job Running", lambda: next((
            j for j in [get(simbed, f"{RAY}/rayjobs/train") or {}]
            if (j.get("status") or {}).get("rayClusterName")
            and _ready(simbed, j["status"]["rayClusterName"])
            and j["status"].get("jobDeploymentStatus") == "Running"), None), 300)
        cluster = job["status"]["rayClusterName"]
        yield job
    finally:
        _delete_and_wait(simbed, [f"{RAY}/rayjobs/train"], [cluster] if cluster else [])


def test_the_operator_makes_the_rayjobs_cluster_and_the_target_finds_it(simbed, rayjob):
    cluster = rayjob["status"]["rayClusterName"]
    assert cluster.startswith("train-")
    rc = get(simbed, f"{RAY}/rayclusters/{cluster}")
    assert rc["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
    assert rc["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
    t = _target(simbed, "rayjob", "train")
    try:
        assert t.cluster == cluster and t.head_identity()["cluster"] == cluster
        owner = t.owner()
        assert owner["kind"] == "rayjob" and owner["job_id"] == rayjob["status"]["jobId"]
        assert owner["job_id"], "the operator generated the job's submission id"
        assert owner["job_deployment_status"] in ("Initializing", "Running")
        assert owner["serves_own_apps"] is False
    finally:
        t.close()
    with pytest.raises(TargetUnavailable, match="no RayJob 'nope' in namespace ray"):
        _target(simbed, "rayjob", "nope")


def test_a_dry_run_aimed_at_a_rayjob_deletes_the_head_of_its_cluster(simbed, rayjob, capsys,
                                                                    monkeypatch):
    monkeypatch.chdir(REPO)
    cluster = rayjob["status"]["rayClusterName"]
    since = time.time()
    code = main(["run", "experiments/rayjob-head-kill.yaml", "--dry-run", "--target",
                 "kubernetes", "--kubeconfig", str(simbed.kubeconfig), "--namespace", NS,
                 "--rayjob", "train"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"POST /api/v1/namespaces/ray/pods/{cluster}-head" in out, out
    sent = simbed.requests(since)
    assert any(r["resource"] == "rayjobs" and r["name"] == "train" for r in sent), \
        "the run read the RayJob"
    assert [r for r in sent if r["verb"] in MUTATING] == [], "a dry run sent a mutating request"


def _status(b: testbed.Bed, active: str, pending: str = "") -> None:
    """RayService ray/chat's status as KubeRay writes it (its status subresource)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    code, body = admin(b).call("PATCH", f"{RAY}/rayservices/chat/status", {"status": {
        "activeServiceStatus": {"rayClusterName": active},
        "pendingServiceStatus": {"rayClusterName": pending}, "numServeEndpoints": 1,
        "conditions": [{"type": "Ready", "status": "True", "reason": "NonZeroServeEndpoints",
                        "message": "", "lastTransitionTime": now}]}},
        content_type="application/merge-patch+json")
    assert code == 200, (code, body)


@pytest.fixture
def rayservice(simbed: testbed.Bed) -> Iterator[None]:
    """RayClusters chat-a and chat-b, labelled as a RayService's are (its workers
    ``ray.io/serve=true``, its head ``false``), ready to the operator; RayService ray/chat
    (left alone by the operator: a named head Service is refused) pointing at chat-a; and
    the Serve Service KubeRay would make, in front of chat-b's Serve pods."""
    made = []
    try:
        for name in ("chat-a", "chat-b"):
            _create(simbed, f"{RAY}/rayclusters", {
                "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": name},
                "spec": {"rayVersion": "2.60.0", "headGroupSpec": _head({"ray.io/serve": "false"}),
                         "workerGroupSpecs": [{
                             "groupName": "serve", "replicas": 1, "minReplicas": 1,
                             "maxReplicas": 1, "rayStartParams": {},
                             "template": {"metadata": {"labels": {"ray.io/serve": "true"}},
                                          "spec": {"nodeSelector": {
                                              "raychaos.io/node-pool": "head"}, "containers": [
                                              {"name": "ray-worker", "image": IMAGE,
                                               "resources": SMALL}]}}}]}})
            made.append(f"{RAY}/rayclusters/{name}")
        _create(simbed, f"{RAY}/rayservices", {
            "apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "chat"},
            "spec": {"rayClusterConfig": {"headGroupSpec": {
                "rayStartParams": {}, "headService": {"metadata": {"name": "not-allowed"}},
                "template": {"spec": {"containers": [{"name": "ray-head", "image": IMAGE}]}}}}}})
        made.append(f"{RAY}/rayservices/chat")
        _create(simbed, f"/api/v1/namespaces/{NS}/services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "chat-serve-svc"},
            "spec": {"selector": {"ray.io/cluster": "chat-b", "ray.io/serve": "true"},
                     "ports": [{"name": "serve", "port": 8000, "targetPort": 8000}]}})
        made.append(f"/api/v1/namespaces/{NS}/services/chat-serve-svc")
        _status(simbed, "chat-a")
        for name in ("chat-a", "chat-b"):
            until(f"RayCluster {name} ready", lambda n=name: _ready(simbed, n) and len(get(
                simbed, f"{PODS}?labelSelector=ray.io/cluster%3D{n}")["items"]) == 2, 300)
        yield
    finally:
        _delete_and_wait(simbed, made, ["chat-a", "chat-b"])


def test_a_rayservice_switch_is_followed_and_serve_goes_through_its_service(simbed,
                                                                            rayservice):
    t = _target(simbed, "rayservice", "chat")
    try:
        assert t.cluster == "chat-a" and t.owner()["ready"] is True
        t.workload.owner.poll_s = 0  # type: ignore[union-attr]
        _status(simbed, "chat-a", pending="chat-b")
        t.cluster_events(time.time() - 5)
        assert t.cluster == "chat-a"  # a pending cluster is not the target yet
        _status(simbed, "chat-b")
        events = t.cluster_events(time.time() - 5)
        switch = [e for e in events if e["event"] == "target_cluster_switched"]
        assert switch and switch[0]["from"] == "chat-a" and switch[0]["to"] == "chat-b"
        assert t.cluster == "chat-b" and t.head_identity()["cluster"] == "chat-b"
        until("chat-b's pods listed", lambda: len(t.handle.pods()) == 2)  # type: ignore[union-attr]
        resolve = ServeServiceResolver(t.workload.owner, t.handle.pods)  # type: ignore[union-attr]
        picked = {resolve() for _ in range(4)}
        assert picked and all(n.startswith("chat-b-") and "worker" in n and port == 8000
                              for n, port in picked), picked
        assert t.describe()["owner"]["switches"][0]["to"] == "chat-b"
    finally:
        t.close()
