"""A read the API server answers "come back in N s" (HTTP 429 with ``Retry-After``: the real
kube-apiserver's "storage is (re)initializing" for a CRD just established, seen on the test bed
under load; API Priority and Fairness shedding load) is asked again after the wait. It is the
kubernetes client's pool (urllib3's default ``Retry``, up to 3 times for GETs) that does it: this
pins that the session keeps that default; other errors are not retried."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from raychaos.errors import KubeApiError
from raychaos.targets.kubernetes.client import ApiSession

pytestmark = pytest.mark.unit


class Server(BaseHTTPRequestHandler):
    """Answers each GET from ``Server.answers`` in turn (the last one for ever)."""

    answers: list[tuple[int, dict[str, str], dict[str, Any]]] = []
    seen: list[float] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        Server.seen.append(time.monotonic())
        code, headers, body = Server.answers[min(len(Server.seen), len(Server.answers)) - 1]
        raw = json.dumps(body).encode()
        self.send_response(code)
        for k, v in {"Content-Type": "application/json", **headers}.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


def _status(code: int, message: str, retry: int | None = None) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
            "code": code, **({"details": {"retryAfterSeconds": retry}} if retry else {})}


POD = {"kind": "Pod", "metadata": {"name": "p1", "namespace": "ray"}}


@pytest.fixture
def api() -> Iterator[ApiSession]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conf = client.Configuration()
    conf.host = f"http://127.0.0.1:{server.server_address[1]}"
    session = ApiSession(client.ApiClient(conf))
    Server.seen = []
    try:
        yield session
    finally:
        server.shutdown()
        server.server_close()
        session.close()


def test_a_read_told_to_come_back_is_asked_again_after_the_wait(api):
    # what the real kube-apiserver sent: the header, and the Status's retryAfterSeconds
    Server.answers = [(429, {"Retry-After": "1"}, _status(429, "storage is (re)initializing", 1)),
                      (200, {}, POD)]
    assert api.read(api.core.read_namespaced_pod, "p1", "ray")["metadata"]["name"] == "p1"
    assert len(Server.seen) == 2 and Server.seen[1] - Server.seen[0] >= 0.9


@pytest.mark.parametrize("code,headers,body", [
    (404, {}, _status(404, 'pods "p1" not found')),
    (500, {}, _status(500, "etcdserver: request timed out")),  # no Retry-After: not retried
])
def test_other_errors_are_not_asked_again(api, code, headers, body):
    Server.answers = [(code, headers, body), (200, {}, POD)]
    with pytest.raises(KubeApiError) as err:
        api.read(api.core.read_namespaced_pod, "p1", "ray")
    assert err.value.status == code and len(Server.seen) == 1
