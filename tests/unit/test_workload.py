"""A RayJob or RayService as the target: the RayCluster read from the object's status (the
fields KubeRay fills), followed when it changes, and one sentence when there is none."""

from __future__ import annotations

from typing import Any

import pytest

from raychaos.config.experiment import with_target
from raychaos.config.settings import KubernetesSpec
from raychaos.errors import ConfigError, KubeApiError, TargetUnavailable
from raychaos.targets.kubernetes.owner import Owner, cluster_of, serve_service_name, status_of
from raychaos.targets.kubernetes.target import KubernetesTarget

pytestmark = pytest.mark.unit


class _Custom:
    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]):
        self.objects = objects
        self.gets = 0

    def get_namespaced_custom_object(self, group, version, ns, plural, name):
        self.gets += 1
        if (plural, name) not in self.objects:
            raise KubeApiError(404, "Not Found", f'{plural} "{name}" not found')
        return self.objects[(plural, name)]


class _Api:
    """The two calls Owner makes of an ApiSession, over a dict (no HTTP: the k8s tier does that
    against the world)."""

    def __init__(self, objects):
        self.custom = _Custom(objects)

    def read(self, fn, *args, **kw):
        return fn(*args)


def rayjob(cluster: str = "", job: str = "RUNNING", deploy: str = "Running") -> dict:
    return {"metadata": {"name": "train", "namespace": "ml"},
            "spec": {"entrypoint": "python train.py", "submissionMode": "K8sJobMode"},
            "status": {"rayClusterName": cluster, "jobId": "train-abc", "jobStatus": job,
                       "jobDeploymentStatus": deploy}}


def rayservice(active: str, pending: str = "", ready: bool = True, endpoints: int = 2) -> dict:
    return {"metadata": {"name": "chat", "namespace": "ml"}, "spec": {},
            "status": {"activeServiceStatus": {"rayClusterName": active, "applicationStatuses": {
                "app": {"status": "RUNNING"}}},
                "pendingServiceStatus": {"rayClusterName": pending},
                "numServeEndpoints": endpoints, "serviceStatus": "Running",
                "conditions": [{"type": "Ready", "status": str(ready)},
                               {"type": "UpgradeInProgress", "status": str(bool(pending))}]}}


def test_the_cluster_comes_from_the_status_fields_kuberay_fills():
    assert cluster_of("rayjob", rayjob("train-x7k2p")) == "train-x7k2p"
    assert cluster_of("rayservice", rayservice("chat-a", pending="chat-b")) == "chat-a"
    assert cluster_of("rayjob", {"metadata": {}}) == ""
    assert serve_service_name(rayservice("chat-a")) == "chat-serve-svc"
    st = status_of("rayservice", rayservice("chat-a", pending="chat-b", endpoints=3))
    assert st == {"ready": True, "service_status": "Running", "num_serve_endpoints": 3,
                  "applications": {"app": "RUNNING"}, "upgrade_in_progress": True,
                  "pending_cluster": "chat-b"}
    old_tag = rayservice("chat-a")  # KubeRay < 1.3 wrote the capitalised JSON tag
    old_tag["status"]["NumServeEndpoints"] = old_tag["status"].pop("numServeEndpoints")
    assert status_of("rayservice", old_tag)["num_serve_endpoints"] == 2
    assert status_of("rayjob", rayjob("c"))["submission_mode"] == "K8sJobMode"


def test_a_rayservice_upgrade_is_followed_and_named_on_the_timeline():
    objects = {("rayservices", "chat"): rayservice("chat-a")}
    owner = Owner(_Api(objects), "ml", "rayservice", "chat", poll_s=0)  # type: ignore[arg-type]
    assert owner.resolve() == "chat-a"
    assert owner.poll(1.0) == []  # nothing changed
    objects[("rayservices", "chat")] = rayservice("chat-a", pending="chat-b", ready=True)
    (ev,) = owner.poll(2.0)
    assert ev["event"] == "rayservice_status" and ev["upgrade_in_progress"] is True
    assert owner.cluster == "chat-a"  # the pending cluster is not the target yet
    objects[("rayservices", "chat")] = rayservice("chat-b")
    events = owner.poll(3.0)
    switch = next(e for e in events if e["event"] == "target_cluster_switched")
    assert (switch["from"], switch["to"], switch["owner"]) == ("chat-a", "chat-b",
                                                              "RayService ml/chat")
    assert owner.cluster == "chat-b" and owner.status()["switches"][0]["to"] == "chat-b"
    assert owner.status()["serves_own_apps"] is True


def test_polls_are_rate_limited():
    api = _Api({("rayjobs", "train"): rayjob("train-x")})
    owner = Owner(api, "ml", "rayjob", "train", poll_s=60)  # type: ignore[arg-type]
    owner.resolve()
    for t in range(10):
        owner.poll(float(t))
    assert api.custom.gets == 1


def test_no_object_and_no_cluster_yet_are_one_sentence_each():
    owner = Owner(_Api({}), "ml", "rayjob", "train")  # type: ignore[arg-type]
    with pytest.raises(TargetUnavailable, match=r"^target.kubernetes.name: no RayJob 'train' "
                                                 r"in namespace ml \("):
        owner.resolve()
    early = Owner(_Api({("rayjobs", "train"): rayjob("", job="", deploy="Initializing")}),  # type: ignore[arg-type]
                  "ml", "rayjob", "train")
    with pytest.raises(TargetUnavailable) as err:
        early.resolve()
    assert str(err.value) == ("target.kubernetes.name: RayJob ml/train has no "
                              "status.rayClusterName yet ('Initializing'): wait until KubeRay "
                              "has made its RayCluster")


@pytest.mark.parametrize("fields,fragment", [
    ({"kind": "rayjob"}, "name: kind 'rayjob' needs the name of the RayJob"),
    ({"kind": "rayservice", "name": "Chat"}, "name: 'Chat' is not a Kubernetes object name"),
    ({"kind": "rayjob", "name": "t", "cluster": "c"}, "cluster: 'c' cannot be given with"),
    ({"kind": "raycluster", "name": "a", "cluster": "b"}, "name two RayClusters"),
    ({"kind": "job", "name": "t"}, "kind: expected one of 'raycluster', 'rayjob', 'rayservice'"),
])
def test_bad_kind_or_name_is_one_sentence_naming_key_and_value(fields, fragment):
    from pathlib import Path

    from raychaos.config.experiment import find_experiment, load_experiment

    exp = load_experiment(find_experiment(Path("head-kill")))
    with pytest.raises(ConfigError) as err:
        with_target(exp, {"kind": "kubernetes", **{
            ("object_kind" if k == "kind" else k): v for k, v in fields.items()}})
    (problem,) = err.value.problems
    assert fragment in problem and problem.startswith("--target: kubernetes")


def test_a_raycluster_may_be_named_by_name_and_a_workload_target_starts_unresolved():
    assert KubernetesTarget(KubernetesSpec(name="demo")).cluster == "demo"
    t = KubernetesTarget(KubernetesSpec(kind="rayjob", name="train"))
    assert t.cluster == "" and t.owner() == {}


class _Handle:
    """The three things use_service_dns reads of a RayClusterHandle."""

    def __init__(self, given: str | None = None):
        self.given_url, self.ns = given, "ml"

    def head_service_name(self) -> str:
        return "demo-head-svc"


def test_in_the_cluster_the_dashboard_is_the_head_services_dns_name(monkeypatch):
    from raychaos.targets.kubernetes.incluster import use_service_dns

    assert use_service_dns(_Handle()).given_url is None  # type: ignore[arg-type]
    monkeypatch.setenv("RAYCHAOS_DASHBOARD", "service-dns")
    assert use_service_dns(_Handle()).given_url == (  # type: ignore[arg-type]
        "http://demo-head-svc.ml.svc:8265")
    assert use_service_dns(_Handle("http://given")).given_url == "http://given"  # type: ignore[arg-type]


def _serve_pod(name: str, node_type: str, ready: bool, serve: str = "true") -> dict:
    """A pod of a RayService's cluster as KubeRay v1.5.0 labels it and the kubelet reports it."""
    return {"metadata": {"name": name, "labels": {"ray.io/cluster": "chat-a", "ray.io/serve": serve,
                                                  "ray.io/node-type": node_type}},
            "status": {"phase": "Running", "podIP": f"10.0.0.{len(name)}",
                       "conditions": [{"type": "Ready", "status": str(ready)}]}}


class _ServeApi:
    """The Service read ServeServiceResolver makes, over a dict."""

    def __init__(self, service: dict):
        self.service = service
        self.core = type("Core", (), {"read_namespaced_service": None})()

    def read_or_none(self, fn, name, ns):
        return self.service if name == "chat-serve-svc" else None


@pytest.mark.parametrize("publish_not_ready", [False, True])
def test_serve_connections_go_where_the_serve_service_sends_traffic(publish_not_ready):
    """As kube-proxy: the pods the Serve Service's selector matches that are Ready. KubeRay
    labels every worker ray.io/serve=true and takes one out of the Service by its readiness
    probe (its Serve proxy's /-/healthz); a worker without a proxy (Serve runs none on a node
    without replicas) is NotReady, and a client of the Service never reaches it — unless the
    Service publishes not-ready addresses."""
    from raychaos.targets.kubernetes.owner import ServeServiceResolver

    svc = {"metadata": {"name": "chat-serve-svc"},
           "spec": {"selector": {"ray.io/cluster": "chat-a", "ray.io/serve": "true"},
                    "ports": [{"name": "serve", "port": 8000, "targetPort": 8000}],
                    "publishNotReadyAddresses": publish_not_ready}}
    owner = Owner(_ServeApi(svc), "ml", "rayservice", "chat")  # type: ignore[arg-type]
    owner.obj = rayservice("chat-a")
    pods = [_serve_pod("chat-a-head-x", "head", True, serve="false"),
            _serve_pod("chat-a-gpu-worker-y", "worker", True),
            _serve_pod("chat-a-cpu-worker-z", "worker", False)]
    resolve = ServeServiceResolver(owner, lambda: pods)
    picked = {resolve() for _ in range(6)}
    expected = {("chat-a-gpu-worker-y", 8000)} | (
        {("chat-a-cpu-worker-z", 8000)} if publish_not_ready else set())
    assert picked == expected
    pods[1]["status"]["conditions"][0]["status"] = "False"  # no Ready endpoint: an outage
    if not publish_not_ready:
        with pytest.raises(TargetUnavailable, match="no Ready pod behind Service ml/chat-serve"):
            resolve()
