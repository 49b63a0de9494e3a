"""The catalog's RayService experiment against the real KubeRay operator: a RayService on the
demo's cluster spec, deployed by the operator from its serveConfigV2 and promoted; the target
reads its status as a user's would (Ready, Serve endpoints, the application RUNNING) and reaches
Serve through ``<name>-serve-svc``; then ``rayservice-head-kill.yaml`` (gcs_server killed, then
the head pod deleted, under Locust users) runs as a user runs it, and passes. The user's
application is left in place and RUNNING again after the new head.

It runs after the eager cluster's module and before the rest of the catalog (which makes the
demo again): the demo is deleted first, so the RayService's cluster has the nodes to itself.
"""

from __future__ import annotations

import os
import urllib.request

import pytest
import yaml

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s._bed import (
    NS,
    REPO,
    api,
    assert_healthy_run,
    bed_run,
    delete_and_wait,
    demo_spec,
    leftovers,
    wait_for,
)

pytestmark = [pytest.mark.k8s,
              pytest.mark.skipif(os.geteuid() != 0, reason="the bed's nodes need root (netns)")]

NAME = "chat"
SERVE_CONFIG = {
    "applications": [{"name": "raychaos", "import_path": "serve_app:app", "route_prefix": "/",
                      "runtime_env": {"env_vars": {"PYTHONPATH": str(REPO / "loads")}}}],
    "http_options": {"host": "0.0.0.0", "port": 8000},
    "proxy_location": "EveryNode",
}


def _ready(b) -> bool:  # noqa: ANN001
    code, rs = api(b).call("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayservices/{NAME}")
    conds = {c["type"]: c["status"] for c in (rs.get("status") or {}).get("conditions") or []} \
        if code == 200 else {}
    return conds.get("Ready") == "True"


def test_a_rayservice_rides_out_its_head_killed_twice_under_users(bed, tmp_path):
    client = api(bed)
    if client.call("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/demo")[0] == 200:
        delete_and_wait(bed, "rayclusters", "demo")
    body = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": NAME},
            "spec": {"rayClusterConfig": demo_spec(),
                     "serveConfigV2": yaml.safe_dump(SERVE_CONFIG)}}
    code, made = client.call("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayservices", body)
    assert code == 201, made
    try:
        wait_for(lambda: _ready(bed), 600, f"RayService {NAME} Ready")
        t = KubernetesTarget(KubernetesSpec(kind="rayservice", name=NAME, namespace=NS,
                                            kubeconfig=str(bed.kubeconfig)), run_id="rs")
        t.connect()
        try:
            owner = wait_for(lambda: (o := t.owner()).get("ready") and o, 240,
                             "Ready to raychaos")
            assert owner["num_serve_endpoints"] >= 1, owner
            assert owner["applications"] == {"raychaos": "RUNNING"}, owner
            with urllib.request.urlopen(f"{t.serve_url()}/healthz", timeout=30) as reply:
                assert reply.status == 200
            code, summary, out = bed_run(bed, REPO / "experiments" / "rayservice-head-kill.yaml",
                                         tmp_path / "results", "--rayservice", NAME)
            assert_healthy_run(code, summary, out)
            assert [f["state"] for f in summary["faults"]] == ["undone", "undone"]
            # Serve deploys the application again on the new head (DEPLOYING, then RUNNING):
            # the user's application is still there, not removed by the harness
            assert "raychaos" in t.owner()["applications"], "the harness removed the user's app"
            wait_for(lambda: t.owner().get("applications") == {"raychaos": "RUNNING"}, 240,
                  "the application RUNNING again")
        finally:
            t.close()
        assert leftovers(bed) == []
    finally:
        delete_and_wait(bed, "rayservices", NAME, timeout=300)
