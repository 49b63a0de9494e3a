"""Connecting, and bad input: one clear sentence when the API, the RayCluster, the context or a
permission is missing — and through ``raychaos run``: exit 2, nothing left on the cluster.

Against the real API server and KubeRay operator (simulated nodes): what KubeRay publishes is
its own (the head Service in the RayCluster's status), a missing permission is a real 403 of
the RBAC authorizer for a ServiceAccount bound to ``deploy/rbac.yaml``'s Roles with one verb
taken out, and "nothing left" is read from the API server's audit log of the run's user: which
mutating requests it sent, not what our code thinks it sent.
"""

from __future__ import annotations

import copy
import json
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raychaos.cli import main
from raychaos.config.settings import KubernetesSpec
from raychaos.errors import ConfigError, TargetUnavailable
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed
from raychaos.testbed.audit import USER
from tests.k8s.simbed.conftest import (
    MUTATING,
    REPO,
    Rules,
    admin,
    delete_all,
    get,
    narrowed_account,
    until,
)

pytestmark = pytest.mark.k8s

NS = "ray"
RC = f"/apis/ray.io/v1/namespaces/{NS}/rayclusters"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/raychaos-demo"


@pytest.fixture
def unmanaged(simbed: testbed.Bed) -> Iterator[Callable[..., dict[str, Any]]]:
    """Make a RayCluster next to demo that the operator leaves alone (``spec.managedBy`` another
    controller: no pods, no GCS FT finalizer), and delete it — gone before the next test, which
    may count the namespace's RayClusters."""
    made: list[str] = []

    def make(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
        demo = get(simbed, f"{RC}/demo")
        assert demo is not None
        spec = copy.deepcopy(demo["spec"])
        spec.pop("gcsFaultToleranceOptions", None)
        spec["managedBy"] = "kueue.x-k8s.io/multikueue"
        code, body = admin(simbed).call("POST", RC, {
            "apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": name, "annotations": annotations or {}}, "spec": spec})
        assert code == 201, body
        made.append(name)
        return dict(body)

    yield make
    for name in made:
        code, body = admin(simbed).call("DELETE", f"{RC}/{name}")
        assert code in (200, 404), body
        until(f"RayCluster {NS}/{name} deleted", lambda n=name: get(simbed, f"{RC}/{n}") is None)


def test_describe_reports_groups_gpu_nodes_gcs_ft_and_the_head_service(target):
    info = target.describe()
    assert info["cluster"] == "demo" and info["head_service"] == "demo-head-svc"
    # the bed's demo keeps its GCS in Redis the way KubeRay 1.5 documents it
    assert info["gcs_ft"] == {"enabled": True, "via": "spec.gcsFaultToleranceOptions"}
    assert info["worker_groups"] == {"gpu": 1, "cpu": 1}
    assert info["gpu_nodes"] == ["gpu-a", "gpu-b"]
    assert "raychaos port-forward" in info["dashboard"] and info["tls_verify"] is True
    assert info["ray_auth"].startswith("no token auth")


def test_gcs_ft_from_the_annotation(unmanaged, make_target):
    """The older way (``ray.io/ft-enabled``, no ``gcsFaultToleranceOptions``) as the API server
    stores it: still GCS FT, and said to come from the annotation."""
    unmanaged("legacy-ft", {"ray.io/ft-enabled": "true"})
    assert make_target(cluster="legacy-ft").gcs_ft() == {
        "enabled": True, "via": "annotation ray.io/ft-enabled"}
    assert make_target().gcs_ft() == {"enabled": True, "via": "spec.gcsFaultToleranceOptions"}


def test_the_head_service_comes_from_the_raycluster_status(simbed, make_target):
    t = make_target()  # what KubeRay publishes wins over the spec and the default
    assert t.raycluster["status"]["head"]["serviceName"] == "demo-head-svc"  # the operator's
    t.raycluster["spec"]["headGroupSpec"]["headService"] = {"metadata": {"name": "spec-head"}}
    assert t.handle.head_service_name() == "demo-head-svc"
    t.raycluster["status"]["head"]["serviceName"] = "custom-head"
    assert t.handle.head_service_name() == "custom-head"
    del t.raycluster["status"]["head"]["serviceName"]
    assert t.handle.head_service_name() == "spec-head"
    t.raycluster["status"]["head"]["serviceName"] = "custom-head"
    # no such Service: the forward falls back to KubeRay's head selector
    pods = get(simbed, f"/api/v1/namespaces/{NS}/pods?labelSelector=ray.io/cluster=demo,"
                       "ray.io/node-type=head")
    assert pods is not None
    [head] = [p["metadata"]["name"] for p in pods["items"]
              if not p["metadata"].get("deletionTimestamp")]
    assert t.handle.resolve_dashboard()[0] == head


def test_cluster_found_when_only_one(make_target):
    assert make_target(cluster=None).cluster == "demo"


def _kubeconfig(tmp_path: Path, server: str) -> str:
    cfg = tmp_path / "kc"
    cfg.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "x", "cluster": {"server": server}}],
        "users": [{"name": "x", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}]}))
    return str(cfg)


def _closed_port() -> int:
    """A local port nobody listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_api_is_one_sentence(tmp_path):
    port = _closed_port()
    target = KubernetesTarget(KubernetesSpec(cluster="demo", namespace=NS, kubeconfig=(
        _kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))))
    with pytest.raises(TargetUnavailable, match=rf"kubernetes API at http://127.0.0.1:{port} "
                                                r"is unreachable"):
        target.connect()


def test_missing_raycluster(make_target):
    with pytest.raises(TargetUnavailable, match="no RayCluster 'nope' in namespace ray"):
        make_target(cluster="nope")


def _drop_verb(rules: Rules, resource: str, verb: str) -> Rules:
    """``rules`` without ``verb`` on ``resource`` (the rule's other verbs kept)."""
    out = [{**r, "verbs": [v for v in r["verbs"] if v != verb]}
           if resource in r["resources"] else r for r in rules]
    assert out != rules, f"deploy/rbac.yaml grants no {verb} on {resource}"
    return out


@pytest.fixture
def narrowed(simbed: testbed.Bed, tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """A ServiceAccount bound to deploy/rbac.yaml's Roles, one narrowed (conftest's
    :func:`narrowed_account`): its kubeconfig. What it made is deleted after the test."""
    made: list[str] = []

    def make(account: str, kind: str, narrow: Callable[[Rules], Rules]) -> Path:
        kubeconfig, paths = narrowed_account(simbed, NS, account, kind, narrow,
                                             tmp_path / f"kubeconfig-{account}")
        made.extend(paths)
        return kubeconfig

    yield make
    delete_all(simbed, made)


def test_forbidden_names_verb_and_resource(simbed, narrowed, make_target):
    """A Role without ``get`` on rayclusters: the API server's own 403, quoted in the sentence."""
    kubeconfig = narrowed("no-get-rayclusters", "Role",
                          lambda rules: _drop_verb(rules, "rayclusters", "get"))
    since = time.time()
    with pytest.raises(TargetUnavailable, match=r"HTTP 403, not allowed to read rayclusters "
                                                r"in namespace ray: .*cannot get resource "
                                                r"\"rayclusters\""):
        make_target(kubeconfig=str(kubeconfig))
    sent = simbed.requests(since, user=f"system:serviceaccount:{NS}:no-get-rayclusters")
    assert [(r["verb"], r["resource"], r["code"]) for r in sent
            if r["decision"] == "forbid"] == [("get", "rayclusters", 403)], sent


def test_namespace_allowlist(simbed, make_target):
    since = time.time()
    with pytest.raises(ConfigError, match="'ray' is not in allowed_namespaces"):
        make_target(allowed_namespaces=["prod"])
    assert simbed.requests(since) == [], "refused before asking the API server anything"


def test_bad_kubeconfig_path(tmp_path):
    target = KubernetesTarget(KubernetesSpec(kubeconfig=str(tmp_path / "none")))
    with pytest.raises(TargetUnavailable, match="cannot load a kubeconfig"):
        target.connect()


def test_several_rayclusters_and_none_named(unmanaged, make_target):
    unmanaged("other")
    with pytest.raises(ConfigError, match=r"target.kubernetes.cluster: 2 RayClusters in "
                                          r"namespace ray \(demo, other\); name one"):
        make_target(cluster=None)


# --- the same through `raychaos run`: exit 2, one sentence, nothing created -------------------
def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["run", "experiments/gpu-node-drain.yaml", "--target", "kubernetes", "--quiet",
                 *argv])
    return code, capsys.readouterr().err


def _nothing_left(b: testbed.Bed, since: float, user: str = USER) -> list[tuple[str, str]]:
    """No Lease left, no node cordoned, and — the audit log of ``user`` since ``since`` — no
    mutating request but on the run's own Lease: (verb, resource) of each, in order."""
    made = [r for r in b.requests(since, user=user) if r["verb"] in MUTATING]
    assert all(r["resource"] == "leases" and r["name"] in (None, "raychaos-demo")
               for r in made), made
    assert get(b, LEASE) is None, "a Lease was left"
    nodes = get(b, "/api/v1/nodes")
    assert nodes is not None
    assert not [n["metadata"]["name"] for n in nodes["items"] if n["spec"].get("unschedulable")]
    return [(r["verb"], r["resource"]) for r in made]


@pytest.mark.parametrize("case,extra,expect", [
    ("missing RayCluster", ["--cluster", "nope"], "no RayCluster 'nope' in namespace ray"),
    ("missing context", ["--cluster", "demo", "--context", "nope"], "context nope"),
    ("wrong namespace", ["--cluster", "demo", "--namespace", "kube-system"],
     "no RayCluster 'demo' in namespace kube-system"),
])
def test_bad_input_through_the_cli_is_one_sentence_and_exit_2(simbed, tmp_path, capsys,
                                                              monkeypatch, case, extra, expect):
    monkeypatch.chdir(REPO)
    since = time.time()
    code, err = _run(["--kubeconfig", str(simbed.kubeconfig), "--namespace", NS, "--results",
                      str(tmp_path / "results"), *extra], capsys)
    assert code == 2, err
    assert expect in err, err
    assert _nothing_left(simbed, since) == [], "it failed before taking the Lease"


def test_unreachable_api_through_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    port = _closed_port()
    code, err = _run(["--kubeconfig", _kubeconfig(tmp_path, f"http://127.0.0.1:{port}"),
                      "--namespace", NS, "--cluster", "demo", "--results",
                      str(tmp_path / "results")], capsys)
    assert code == 2 and f"kubernetes API at http://127.0.0.1:{port} is unreachable" in err, err


def test_missing_rbac_at_preflight_is_exit_2_naming_verb_and_resource(simbed, narrowed,
                                                                      tmp_path, capsys,
                                                                      monkeypatch):
    """A ClusterRole without ``list`` on nodes: the drain's preflight gets the real 403, the run
    exits 2 quoting it, and the only thing it wrote — its Lease — is gone."""
    monkeypatch.chdir(REPO)
    kubeconfig = narrowed("no-list-nodes", "ClusterRole",
                          lambda rules: _drop_verb(rules, "nodes", "list"))
    user = f"system:serviceaccount:{NS}:no-list-nodes"
    since = time.time()
    code, err = _run(["--kubeconfig", str(kubeconfig), "--namespace", NS, "--cluster", "demo",
                      "--results", str(tmp_path / "results")], capsys)
    assert code == 2, err
    assert "HTTP 403" in err and 'cannot list resource "nodes"' in err, err
    forbid = [(r["verb"], r["resource"]) for r in simbed.requests(since, user=user)
              if r["decision"] == "forbid"]
    assert forbid == [("list", "nodes")], forbid
    # the Lease is taken before the preflight and released on the way out
    assert _nothing_left(simbed, since, user=user) == [("create", "leases"),
                                                      ("delete", "leases")]


def test_allowed_namespaces_refuses_before_connecting(simbed, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    exp = tmp_path / "exp.yaml"
    data = yaml.safe_load((REPO / "experiments/gpu-node-drain.yaml").read_text())
    data["extensions"][0]["target"] = {"kind": "kubernetes", "kubernetes": {
        "cluster": "demo", "namespace": NS, "kubeconfig": str(simbed.kubeconfig),
        "allowed_namespaces": ["prod"]}}
    exp.write_text(yaml.safe_dump(data))
    since = time.time()
    code = main(["run", str(exp), "--quiet", "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2 and "'ray' is not in allowed_namespaces ['prod']" in err, err
    assert simbed.requests(since) == [], "nothing was even asked"
