"""Connecting: one clear sentence when the API, the RayCluster or the permission is missing."""

from __future__ import annotations

import socket

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.errors import ConfigError, TargetUnavailable
from raychaos.targets.kubernetes.target import KubernetesTarget

pytestmark = pytest.mark.k8s


def test_describe_reports_groups_gpu_nodes_and_gcs_ft(target):
    info = target.describe()
    assert info["cluster"] == "demo"
    assert info["gcs_ft"] == {"enabled": True, "via": "spec.gcsFaultToleranceOptions"}
    assert info["worker_groups"] == {"gpu": 4}  # DaemonSet pods are not Ray workers
    assert info["gpu_nodes"] == ["gpu-0", "gpu-1"]
    assert "port-forward" in info["dashboard_url"]


def test_gcs_ft_from_annotation(fake, make_target):
    with fake.lock:
        rc = fake.store["rayclusters"][("ray", "demo")]
        rc["spec"].pop("gcsFaultToleranceOptions")
        rc["metadata"]["annotations"] = {"ray.io/ft-enabled": "true"}
    assert make_target().gcs_ft() == {"enabled": True, "via": "annotation ray.io/ft-enabled"}


def test_cluster_found_when_only_one(make_target):
    assert make_target(cluster=None).cluster == "demo"


def test_unreachable_api_is_one_sentence(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = tmp_path / "kc"
    cfg.write_text(
        '{"apiVersion": "v1", "kind": "Config", "current-context": "x", "clusters": [{"name": '
        f'"x", "cluster": {{"server": "http://127.0.0.1:{port}"}}}}], "users": [{{"name": "x",'
        ' "user": {"token": "t"}}], "contexts": [{"name": "x", "context": {"cluster": "x", '
        '"user": "x"}}]}')
    target = KubernetesTarget(KubernetesSpec(cluster="demo", namespace="ray",
                                             kubeconfig=str(cfg)))
    with pytest.raises(TargetUnavailable, match=rf"kubernetes API at http://127.0.0.1:{port} "
                                                r"is unreachable"):
        target.connect()


def test_missing_raycluster(make_target):
    with pytest.raises(TargetUnavailable, match="no RayCluster 'nope' in namespace ray"):
        make_target(cluster="nope")


def test_forbidden(fake, make_target):
    fake.forbid.add(("get", "rayclusters"))
    with pytest.raises(TargetUnavailable, match=r"HTTP 403, not allowed to read rayclusters "
                                                r"in namespace ray: rayclusters is forbidden"):
        make_target()


def test_namespace_allowlist(make_target):
    with pytest.raises(ConfigError, match="'ray' is not in allowed_namespaces"):
        make_target(allowed_namespaces=["prod"])


def test_bad_kubeconfig_path(tmp_path):
    target = KubernetesTarget(KubernetesSpec(kubeconfig=str(tmp_path / "none")))
    with pytest.raises(TargetUnavailable, match="cannot load a kubeconfig"):
        target.connect()


def test_several_rayclusters_and_none_named(fake, make_target):
    with fake.lock:
        fake.put("rayclusters", {"metadata": {"name": "other", "namespace": "ray"}, "spec": {}})
    with pytest.raises(ConfigError, match=r"target.kubernetes.cluster: 2 RayClusters in "
                                          r"namespace ray \(demo, other\); name one"):
        make_target(cluster=None)
