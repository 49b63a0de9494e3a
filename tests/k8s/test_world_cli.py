"""The world by hand: ``python -m tests.k8s.world up --no-gcs-ft`` (the negative control) prints
``KUBECONFIG=… NAMESPACE=… CLUSTER=…`` last and keeps running as a daemon; deleting the head pod
then gives a new cluster (the workers' Ray nodes are lost and come back as new nodes, as on
KubeRay without GCS FT); ``down`` ends everything and proves nothing is left.
(Run under ``flock /tmp/raychaos-cluster.lock``.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client, config

from raychaos.testbed.node.net import WorldNet
from raychaos.testbed.node.runtime import marked

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="real pods need root (netns)")
NAME, ROOT = "t-cli", "/tmp/raychaos-world-tests"
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 700) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    return subprocess.run([sys.executable, "-m", "tests.k8s.world", *args, "--name", NAME,
                           "--state-root", ROOT], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def up():
    proc = cli("up", "--no-gcs-ft")
    try:
        assert proc.returncode == 0, proc.stderr + proc.stdout
        last = proc.stdout.strip().splitlines()[-1]
        fields = dict(kv.split("=", 1) for kv in last.split())
        assert set(fields) == {"KUBECONFIG", "NAMESPACE", "CLUSTER"}, last
        yield fields
    finally:
        down = cli("down", timeout=180)
        print(down.stdout, down.stderr)
        assert down.returncode == 0 and "nothing left" in down.stdout, down.stderr
        assert not marked(f"{NAME}/")
        assert not WorldNet(NAME).leftovers()
        assert not (Path(ROOT) / NAME).exists()


def alive(url: str) -> set[str]:
    with urllib.request.urlopen(url + "/api/v0/nodes?limit=100", timeout=10) as resp:
        data = json.loads(resp.read())["data"]["result"]
    rows = data["result"] if isinstance(data, dict) else data
    return {n["node_id"] for n in rows if n["state"] == "ALIVE" and not n.get("is_head_node")}


def test_without_gcs_ft_a_new_head_is_a_new_cluster(up):
    cfg = client.Configuration()
    config.load_kube_config(up["KUBECONFIG"], client_configuration=cfg)
    api = client.CoreV1Api(client.ApiClient(cfg))
    ns, cluster = up["NAMESPACE"], up["CLUSTER"]
    info = json.loads((Path(ROOT) / NAME / "ready.json").read_text())
    url = info["dashboard"]
    rc = client.CustomObjectsApi(api.api_client).get_namespaced_custom_object(
        "ray.io", "v1", ns, "rayclusters", cluster)
    assert "ray.io/ft-enabled" not in (rc["metadata"].get("annotations") or {})
    t0 = time.monotonic()
    before = set()
    while len(before) < 2 and time.monotonic() - t0 < 120:
        try:
            before = alive(url)
        except OSError:
            pass
        time.sleep(1)
    assert len(before) == 2
    head = api.list_namespaced_pod(ns, label_selector=f"ray.io/cluster={cluster},"
                                   "ray.io/node-type=head").items[0]
    api.delete_namespaced_pod(head.metadata.name, ns,
                              body=client.V1DeleteOptions(grace_period_seconds=0))
    t0, after = time.monotonic(), set()
    while time.monotonic() - t0 < 400:
        try:
            after = alive(url)
        except OSError:
            after = set()
        if len(after) == 2 and not after & before:
            break
        time.sleep(2)
    assert len(after) == 2 and not after & before, (before, after)
    workers = api.list_namespaced_pod(ns, label_selector=f"ray.io/cluster={cluster},"
                                      "ray.io/node-type=worker").items
    assert sum(c.restart_count for p in workers for c in p.status.container_statuses) >= 2
