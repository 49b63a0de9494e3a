"""What the Kubernetes target's ``observe`` tells the monitor, against a loopback HTTP server in
place of the dashboard: a dashboard that does not answer in time is *late* (a busy GCS keeps
its state; see ``observe/recovery.py``), one that refuses or says the GCS is unhealthy is down,
and re-registration is never claimed (``reported`` None: the recovery probe says ``unknown``
rather than "every worker re-registered") — the path taken when a user gives ``dashboard_url``;
otherwise the GCS is asked over gRPC through the port-forward (the KubeRay catalog tests)."""

from __future__ import annotations

import http.server
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.targets.base import NodeInfo
from raychaos.targets.kubernetes.dashboard import Dashboard
from raychaos.targets.kubernetes.gcs import GCS_PORT, GcsObserver, gcs_port
from raychaos.targets.kubernetes.target import KubernetesTarget

pytestmark = pytest.mark.unit


class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "ok"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.mode == "slow":
            time.sleep(1.0)
        code = 503 if self.mode == "unhealthy" else 200
        body = b"success" if code == 200 else b"GCS unhealthy"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"mode": "ok"})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}", handler
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_dashboard_check_tells_late_from_down(server):
    url, handler = server
    dash = Dashboard(lambda: url)
    assert dash.gcs_health(0.5) == (True, None, False)
    handler.mode = "unhealthy"
    up, why, late = dash.gcs_health(0.5)
    assert not up and not late and "HTTP 503" in (why or "")
    handler.mode = "slow"
    up, why, late = dash.gcs_health(0.2)
    assert not up and late, why
    refused = Dashboard(lambda: f"http://127.0.0.1:{_closed_port()}")
    up, why, late = refused.gcs_health(0.5)
    assert not up and not late, why


class _Handle:
    """A RayClusterHandle with a user-given dashboard URL: the GCS is asked through it."""

    def __init__(self, dashboard: Dashboard, url: str) -> None:
        self.dashboard, self.given_url = dashboard, url
        self.gcs = GcsObserver(self)  # type: ignore[arg-type]

    def pods(self) -> list[dict[str, Any]]:
        return []

    def nodes(self, timeout: float) -> list[NodeInfo]:
        return [NodeInfo(node_id="ab" * 14, name="worker-0", address="10.0.0.2",
                         state="ALIVE")]


def test_the_dashboard_path_never_claims_reregistration_and_passes_late_on(server):
    url, handler = server
    target = KubernetesTarget(KubernetesSpec(namespace="ray", cluster="demo"))
    assert not target.observe(0.1).up, "not connected: down, and no exception"
    handle = _Handle(Dashboard(lambda: url), url)
    target.handle, target.api = handle, object()  # type: ignore[assignment]
    obs = target.observe(0.5)
    assert handle.gcs.unavailable and "dashboard_url" in handle.gcs.unavailable
    assert obs.up and obs.nodes and obs.reported is None and obs.incarnation is None
    handler.mode = "slow"
    obs = target.observe(0.2)
    assert not obs.up and obs.late


def test_the_gcs_port_is_the_head_groups_and_kuberays_default_otherwise():
    head = {"spec": {"headGroupSpec": {"rayStartParams": {"port": "6380"}}}}
    assert gcs_port(head) == 6380
    assert gcs_port({"spec": {"headGroupSpec": {"rayStartParams": {}}}}) == GCS_PORT == 6379
    assert gcs_port({}) == GCS_PORT


def test_the_load_reports_usage_lines_become_totals_and_free_shares():
    """What the dashboard's node summary carried on the KubeRay world (a GPU worker, the head,
    the CPU worker), and a node still holding some of everything."""
    from raychaos.targets.kubernetes.dashboard import parse_usage

    gpu = parse_usage("0.0/1.0 CPU\n0.0/1.0 GPU\n0B/1.00GiB memory\n"
                      "0B/143.05MiB object_store_memory")
    assert gpu["total"] == {"CPU": 1.0, "GPU": 1.0, "memory": 2**30,
                            "object_store_memory": 143.05 * 2**20}
    assert gpu["available"] == gpu["total"]
    head = parse_usage("0B/1.00GiB memory\n0B/143.05MiB object_store_memory")
    assert set(head["total"]) == {"memory", "object_store_memory"}
    busy = parse_usage("0.5/1.0 CPU\n0.25/1.0 GPU\n512.00MiB/1.00GiB memory\n"
                       "1.00KiB/143.05MiB object_store_memory\n3.0/4.0 raychaos_driver\n"
                       "(no resource demands)")
    assert busy["available"] == {"CPU": 0.5, "GPU": 0.75, "memory": 2**29,
                                 "object_store_memory": 143.05 * 2**20 - 1024,
                                 "raychaos_driver": 1.0}
