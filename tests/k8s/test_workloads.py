"""A RayJob or RayService as the target, against the world's API (simulated kubelets: no Ray):
the RayCluster read from the status the world's operator fills, followed on a switch, and
Serve traffic routed by the RayService's Serve Service."""

from __future__ import annotations

import time

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.errors import TargetUnavailable
from raychaos.targets.kubernetes.owner import ServeServiceResolver
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.world import World, default_nodes
from tests.k8s.world.world import default_raycluster

pytestmark = pytest.mark.k8s


def _target(w: World, kind: str, name: str) -> KubernetesTarget:
    t = KubernetesTarget(KubernetesSpec(kind=kind, name=name, namespace="ray",  # type: ignore[arg-type]
                                        kubeconfig=w.kubeconfig), run_id="run1")
    t.connect()
    return t


def test_the_operator_makes_the_rayjobs_cluster_and_the_target_finds_it(tmp_path):
    w = World(name="rj", cluster="train", workload="rayjob", nodes=default_nodes("sim"),
              state_root=tmp_path).start()
    try:
        w.wait_ready(timeout=30)
        job = w.store.get("rayjobs", "ray", "train")
        cluster = job["status"]["rayClusterName"]
        assert cluster.startswith("train-") and w.cluster == cluster
        rc = w.store.get("rayclusters", "ray", cluster)
        assert rc["metadata"]["ownerReferences"][0]["kind"] == "RayJob"
        assert rc["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
        t = _target(w, "rayjob", "train")
        try:
            assert t.cluster == cluster and t.head_identity()["cluster"] == cluster
            owner = t.owner()
            assert owner["kind"] == "rayjob" and owner["job_id"] == job["status"]["jobId"]
            assert owner["job_deployment_status"] in ("Initializing", "Running")
            assert owner["serves_own_apps"] is False
        finally:
            t.close()
        with pytest.raises(TargetUnavailable, match="no RayJob 'nope' in namespace ray"):
            _target(w, "rayjob", "nope")
    finally:
        assert w.stop() == []


def test_a_rayservice_switch_is_followed_and_serve_goes_through_its_service(tmp_path):
    w = World(name="rs", cluster=None, nodes=default_nodes("sim"), state_root=tmp_path).start()
    try:
        rcs = w.api.resolve("ray.io", "v1", "rayclusters")
        for name in ("chat-a", "chat-b"):
            w.api.create(rcs, "ray", default_raycluster(name, "ray"))
        rsr = w.api.resolve("ray.io", "v1", "rayservices")
        w.api.create(rsr, "ray", {"apiVersion": "ray.io/v1", "kind": "RayService",
                                  "metadata": {"name": "chat", "namespace": "ray"},
                                  "spec": {"rayClusterConfig": {}}})

        def point(active: str, pending: str = "") -> None:
            rs = w.store.get("rayservices", "ray", "chat")
            w.api.update(rsr, "ray", "chat", {**rs, "status": {
                "activeServiceStatus": {"rayClusterName": active},
                "pendingServiceStatus": {"rayClusterName": pending}, "numServeEndpoints": 1,
                "conditions": [{"type": "Ready", "status": "True"}]}}, sub="status")

        point("chat-a")
        for c in ("chat-a", "chat-b"):
            w.cluster = c
            w.wait_ready(timeout=30)
        w.api.create(w.api.resolve("", "v1", "services"), "ray", {
            "metadata": {"name": "chat-serve-svc", "namespace": "ray"},
            "spec": {"selector": {"ray.io/cluster": "chat-b", "ray.io/serve": "true"},
                     "ports": [{"name": "serve", "port": 8000, "targetPort": 8000}]}})
        for p in w.store.list("pods", "ray", "ray.io/cluster=chat-b,ray.io/node-type=worker"):
            w.store.mutate("pods", "ray", p["metadata"]["name"], lambda p: p["metadata"][
                "labels"].__setitem__("ray.io/serve", "true"))
        t = _target(w, "rayservice", "chat")
        try:
            assert t.cluster == "chat-a" and t.owner()["ready"] is True
            t.workload.owner.poll_s = 0  # type: ignore[union-attr]
            point("chat-a", pending="chat-b")
            t.cluster_events(time.time() - 5)
            assert t.cluster == "chat-a"  # a pending cluster is not the target yet
            point("chat-b")
            events = t.cluster_events(time.time() - 5)
            switch = [e for e in events if e["event"] == "target_cluster_switched"]
            assert switch and switch[0]["from"] == "chat-a" and switch[0]["to"] == "chat-b"
            assert t.cluster == "chat-b" and t.head_identity()["cluster"] == "chat-b"
            deadline = time.monotonic() + 10
            while len(t.handle.pods()) < 3 and time.monotonic() < deadline:  # type: ignore[union-attr]
                time.sleep(0.1)
            resolve = ServeServiceResolver(t.workload.owner, t.handle.pods)  # type: ignore[union-attr]
            picked = {resolve()[0] for _ in range(4)}
            assert picked and all(n.startswith("chat-b-") and "worker" in n for n in picked)
            assert t.describe()["owner"]["switches"][0]["to"] == "chat-b"
        finally:
            t.close()
    finally:
        assert w.stop() == []


def test_a_dry_run_aimed_at_a_rayjob_deletes_the_head_of_its_cluster(tmp_path, capsys,
                                                                    monkeypatch):
    from pathlib import Path

    from raychaos.cli import main
    from tests.k8s.conftest import mutations

    monkeypatch.chdir(Path(__file__).resolve().parents[2])
    w = World(name="rjd", cluster="train", workload="rayjob", nodes=default_nodes("sim"),
              state_root=tmp_path).start()
    try:
        w.wait_ready(timeout=30)
        since = len(w.server.requests)
        code = main(["run", "experiments/rayjob-head-kill.yaml", "--dry-run", "--target",
                     "kubernetes", "--kubeconfig", w.kubeconfig, "--namespace", "ray",
                     "--rayjob", "train"])
        out = capsys.readouterr().out
        assert code == 0, out
        assert f"POST /api/v1/namespaces/ray/pods/{w.cluster}-head" in out, out
        assert [m for m in mutations(w, since) if "rayjobs" not in m[1]] == []
    finally:
        assert w.stop() == []
