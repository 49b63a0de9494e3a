"""Connecting, and bad input: one clear sentence when the API, the RayCluster, the context or a
permission is missing — and through ``raychaos run``: exit 2, nothing left on the cluster."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from raychaos.cli import main
from raychaos.config.settings import KubernetesSpec
from raychaos.errors import ConfigError, TargetUnavailable
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.conftest import mutations
from tests.k8s.world import resources as R

pytestmark = pytest.mark.k8s
REPO = Path(__file__).resolve().parents[2]


def test_describe_reports_groups_gpu_nodes_gcs_ft_and_the_head_service(target):
    info = target.describe()
    assert info["cluster"] == "demo" and info["head_service"] == "demo-head-svc"
    assert info["gcs_ft"] == {"enabled": True, "via": "annotation ray.io/ft-enabled"}
    assert info["worker_groups"] == {"gpu": 1, "cpu": 1}
    assert info["gpu_nodes"] == ["gpu-a", "gpu-b"]
    assert "raychaos port-forward" in info["dashboard"] and info["tls_verify"] is True
    assert info["ray_auth"].startswith("no token auth")


def test_gcs_ft_from_spec(sim, make_target):
    rc = sim.store.get("rayclusters", "ray", "demo")
    rc["metadata"]["annotations"] = {}
    rc["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
    sim.api.update(sim.api.resolve("ray.io", "v1", "rayclusters"), "ray", "demo", rc)
    assert make_target().gcs_ft() == {"enabled": True, "via": "spec.gcsFaultToleranceOptions"}


def test_the_head_service_comes_from_the_raycluster_status(sim, make_target):
    t = make_target()  # what KubeRay publishes wins over the spec and the default
    t.raycluster["spec"]["headGroupSpec"]["headService"] = {"metadata": {"name": "spec-head"}}
    assert t.handle.head_service_name() == "demo-head-svc"  # status (the world's KubeRay)
    t.raycluster["status"]["head"]["serviceName"] = "custom-head"
    assert t.handle.head_service_name() == "custom-head"
    del t.raycluster["status"]["head"]["serviceName"]
    assert t.handle.head_service_name() == "spec-head"
    t.raycluster["status"]["head"]["serviceName"] = "custom-head"
    # no such Service: the forward falls back to KubeRay's head selector
    assert t.handle.resolve_dashboard()[0] == sim.head_pod()["metadata"]["name"]


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


def test_unreachable_api_is_one_sentence(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    target = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray", kubeconfig=(
        _kubeconfig(tmp_path, f"http://127.0.0.1:{port}"))))
    with pytest.raises(TargetUnavailable, match=rf"kubernetes API at http://127.0.0.1:{port} "
                                                r"is unreachable"):
        target.connect()


def test_missing_raycluster(make_target):
    with pytest.raises(TargetUnavailable, match="no RayCluster 'nope' in namespace ray"):
        make_target(cluster="nope")


def test_forbidden_names_verb_and_resource(sim, make_target):
    sim.server.forbid("get", "rayclusters")
    with pytest.raises(TargetUnavailable, match=r"HTTP 403, not allowed to read rayclusters "
                                                r"in namespace ray: .*cannot get resource "
                                                r"\"rayclusters\""):
        make_target()


def test_namespace_allowlist(make_target):
    with pytest.raises(ConfigError, match="'ray' is not in allowed_namespaces"):
        make_target(allowed_namespaces=["prod"])


def test_bad_kubeconfig_path(tmp_path):
    target = KubernetesTarget(KubernetesSpec(kubeconfig=str(tmp_path / "none")))
    with pytest.raises(TargetUnavailable, match="cannot load a kubeconfig"):
        target.connect()


def test_several_rayclusters_and_none_named(sim, make_target):
    from tests.k8s.world.world import default_raycluster
    sim.api.create(sim.api.resolve("ray.io", "v1", "rayclusters"), "ray",
                   default_raycluster("other", "ray"))
    with pytest.raises(ConfigError, match=r"target.kubernetes.cluster: 2 RayClusters in "
                                          r"namespace ray \(demo, other\); name one"):
        make_target(cluster=None)


# --- the same through `raychaos run`: exit 2, one sentence, nothing created -------------------
def _run(argv: list[str], capsys) -> tuple[int, str]:  # noqa: ANN001
    code = main(["run", "experiments/gpu-node-drain.yaml", "--target", "kubernetes", "--quiet",
                 *argv])
    return code, capsys.readouterr().err


def _nothing_left(sim, since: int) -> None:  # noqa: ANN001
    made = [m for m in mutations(sim, since) if m[0] != "DELETE"]
    assert sim.store.list("leases") == [], "a Lease was left"
    assert all(not n["spec"].get("unschedulable") for n in sim.store.list("nodes"))
    assert all("/eviction" not in p and "daemonsets" not in p for _m, p in made), made


@pytest.mark.parametrize("case,extra,expect", [
    ("missing RayCluster", ["--cluster", "nope"], "no RayCluster 'nope' in namespace ray"),
    ("missing context", ["--cluster", "demo", "--context", "nope"], "context nope"),
    ("wrong namespace", ["--cluster", "demo", "--namespace", "kube-system"],
     "no RayCluster 'demo' in namespace kube-system"),
])
def test_bad_input_through_the_cli_is_one_sentence_and_exit_2(sim, tmp_path, capsys,
                                                              monkeypatch, case, extra, expect):
    monkeypatch.chdir(REPO)
    since = len(sim.server.requests)
    code, err = _run(["--kubeconfig", sim.kubeconfig, "--namespace", "ray", "--results",
                      str(tmp_path / "results"), *extra], capsys)
    assert code == 2, err
    assert expect in err, err
    _nothing_left(sim, since)


def test_unreachable_api_through_the_cli(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, err = _run(["--kubeconfig", _kubeconfig(tmp_path, f"http://127.0.0.1:{port}"),
                      "--namespace", "ray", "--cluster", "demo", "--results",
                      str(tmp_path / "results")], capsys)
    assert code == 2 and f"kubernetes API at http://127.0.0.1:{port} is unreachable" in err, err


def test_missing_rbac_at_preflight_is_exit_2_naming_verb_and_resource(sim, tmp_path, capsys,
                                                                      monkeypatch):
    monkeypatch.chdir(REPO)
    sim.server.forbid("list", "nodes")
    since = len(sim.server.requests)
    code, err = _run(["--kubeconfig", sim.kubeconfig, "--namespace", "ray", "--cluster", "demo",
                      "--results", str(tmp_path / "results")], capsys)
    assert code == 2, err
    assert 'HTTP 403' in err and 'cannot list resource "nodes"' in err, err
    _nothing_left(sim, since)


def test_allowed_namespaces_refuses_before_connecting(sim, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    exp = tmp_path / "exp.yaml"
    import yaml
    data = yaml.safe_load((REPO / "experiments/gpu-node-drain.yaml").read_text())
    data["extensions"][0]["target"] = {"kind": "kubernetes", "kubernetes": {
        "cluster": "demo", "namespace": "ray", "kubeconfig": sim.kubeconfig,
        "allowed_namespaces": ["prod"]}}
    exp.write_text(yaml.safe_dump(data))
    since = len(sim.server.requests)
    code = main(["run", str(exp), "--quiet", "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2 and "'ray' is not in allowed_namespaces ['prod']" in err, err
    assert sim.server.requests[since:] == [], "nothing was even asked"


def test_the_world_answers_a_forbidden_list_as_the_real_server_does(sim):
    body = R.forbidden(R.BUILTIN["nodes"], "list", "system:serviceaccount:ray:raychaos", "", None)
    assert 'cannot list resource "nodes"' in body["message"]
