"""The RayCluster ``raychaos testbed up --nodes`` creates: ``demo-raycluster.yaml`` (a Redis
for GCS fault tolerance, its Service, and the RayCluster ``demo`` shaped for the bed's node
pools), created through the API server and waited for until the real operator calls it
ready."""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import yaml

from raychaos.testbed.access import ApiClient
from raychaos.testbed.bed import BedError, _wait

__all__ = ["DEMO", "create_demo"]

#: the RayCluster ``up --nodes`` creates (with its Redis for GCS fault tolerance)
DEMO = Path(__file__).resolve().parent / "demo-raycluster.yaml"
DEMO_READY_S = 300.0
_PLURALS = {("apps/v1", "Deployment"): "/apis/apps/v1/namespaces/{ns}/deployments",
            ("v1", "Service"): "/api/v1/namespaces/{ns}/services",
            ("ray.io/v1", "RayCluster"): "/apis/ray.io/v1/namespaces/{ns}/rayclusters"}


def create_demo(api: ApiClient, namespace: str, pids: dict[str, int], root: Path,
                 say: Callable[[str], None]) -> str:
    """Create :data:`DEMO`'s objects in ``namespace``; wait for its RayCluster to be ready."""
    docs = [d for d in yaml.safe_load_all(DEMO.read_text()) if d]
    name = ""
    for doc in docs:
        path = _PLURALS[(doc["apiVersion"], doc["kind"])].format(ns=namespace)
        code, body = api.call("POST", path, doc, timeout=30)
        if code not in (201, 409):
            raise BedError(f"creating {doc['kind']} {doc['metadata']['name']} answered {code}: "
                           f"{body}")
        if doc["kind"] == "RayCluster":
            name = doc["metadata"]["name"]
    say(f"up: RayCluster {namespace}/{name} created, waiting for it to be ready")
    t0 = time.monotonic()
    _wait(f"RayCluster {namespace}/{name}", partial(_cluster_ready, api, namespace, name),
          pids["kuberay-operator"], root / "logs" / "kuberay-operator.log", DEMO_READY_S)
    say(f"up: RayCluster {namespace}/{name} ready in {time.monotonic() - t0:.0f} s")
    return name


def _cluster_ready(api: ApiClient, namespace: str, name: str) -> bool:
    code, body = api.call("GET", f"/apis/ray.io/v1/namespaces/{namespace}/rayclusters/{name}")
    return code == 200 and (body.get("status") or {}).get("state") == "ready"
