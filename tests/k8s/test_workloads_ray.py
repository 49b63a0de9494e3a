"""The world's RayService operator with real Ray behind the pods, and the catalog's RayService
experiment run on it as a user runs it: the application is deployed from serveConfigV2,
promoted, answers through ``<name>-serve-svc``, and rides out ``rayservice-head-kill.yaml``
(gcs_server killed, then the head pod deleted, under Locust users) with the user's application
left in place. Teardown proves nothing is left. The RayJob experiment runs against the real
operator (``tests/k8s/bed/test_control_plane.py``): the world's model of a RayJob's head loss (a
new head pod, the RayJob Failed with its submitter) is not what KubeRay v1.5.0 does."""

from __future__ import annotations

import os
import urllib.request
from pathlib import Path

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.integration._experiments import assert_healthy
from tests.k8s._bed import failure_context, run_experiment, wait_for
from tests.k8s.world import World

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="real pods need root (netns)")]
REPO = Path(__file__).resolve().parents[2]


def raychaos_run(w: World, experiment: str, flag: str, results: Path) -> tuple[int, dict, str]:
    """``raychaos run experiments/EXPERIMENT --target kubernetes --rayjob|--rayservice NAME``
    as a user runs it, in its own process: (exit code, summary, output)."""
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    return run_experiment(w.kubeconfig, w.namespace, REPO / "experiments" / experiment,
                          results, flag, str(w.workload_name), env=env)


def test_rayservice_serves_through_its_serve_service_and_rides_out_a_head_kill(tmp_path):
    w = World(name="t-rs", cluster="chat", workload="rayservice",
              state_root="/tmp/raychaos-world-tests").start()
    try:
        w.wait_ready(timeout=600)
        rs = w.store.get("rayservices", "ray", "chat")
        assert rs["status"]["activeServiceStatus"]["rayClusterName"] == w.cluster
        t = KubernetesTarget(KubernetesSpec(kind="rayservice", name="chat", namespace="ray",
                                            kubeconfig=w.kubeconfig), run_id="rs")
        t.connect()
        try:
            owner = wait_for(lambda: (o := t.owner()).get("ready") and o, 240, "Ready", every=1.0)
            assert owner["num_serve_endpoints"] >= 1
            assert owner["applications"] == {"raychaos": "RUNNING"}
            url = t.serve_url()
            with urllib.request.urlopen(f"{url}/healthz", timeout=30) as reply:
                assert reply.status == 200
            # the catalog's experiment: gcs_server killed, then the head pod deleted, under
            # Locust users through <name>-serve-svc; the user's application is left alone
            code, summary, out = raychaos_run(w, "rayservice-head-kill.yaml", "--rayservice",
                                              tmp_path / "results")
            assert_healthy(code, summary, failure_context(summary, out))
            assert [f["state"] for f in summary["faults"]] == ["undone", "undone"]
            # after a new head pod Serve deploys the application again (DEPLOYING, then
            # RUNNING): it is still there, the user's, not removed by the harness
            assert "raychaos" in t.owner()["applications"], "the harness removed the user's app"
            wait_for(lambda: t.owner().get("applications") == {"raychaos": "RUNNING"}, 240,
                     "the application RUNNING again", every=1.0)
        finally:
            t.close()
    finally:
        assert w.stop() == []
