"""Stopping an informer ends its thread at once: ``stop`` only set a flag, and the thread sat
in its watch until the server ended it (up to ``WATCH_S``, 30 s) — the "threads still running"
line of every test run that made a Kubernetes target listed raychaos-informer-ray x12."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.informer import WATCH_S, PodInformer

pytestmark = pytest.mark.unit


class Pods(BaseHTTPRequestHandler):
    """A list of one pod; a watch that sends one event and then nothing, until the client goes
    or the test ends (a quiet namespace)."""

    watching = threading.Event()
    done = threading.Event()

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        pod = {"metadata": {"name": "p1", "resourceVersion": "5"}}
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        if "watch=true" not in self.path:
            body = json.dumps({"metadata": {"resourceVersion": "5"}, "items": [pod]}).encode()
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        line = json.dumps({"type": "MODIFIED", "object": {
            "metadata": {"name": "p1", "resourceVersion": "6"}}}).encode() + b"\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.flush()
        Pods.watching.set()
        Pods.done.wait(WATCH_S + 10)


def test_stop_ends_the_watching_thread_at_once():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Pods)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    conf = client.Configuration()
    conf.host = f"http://127.0.0.1:{server.server_address[1]}"
    api = ApiSession(client.ApiClient(conf))
    informer = PodInformer(api, "ray", "ray.io/cluster=demo").start()
    try:
        assert [p["metadata"]["name"] for p in informer.pods(timeout=10)] == ["p1"]
        assert Pods.watching.wait(10), "the informer never watched"
        assert informer.wait_for(lambda pods: pods[0]["metadata"]["resourceVersion"] == "6",
                                 timeout=10), "the watch's event never arrived"
        thread = informer._thread
        assert thread is not None and thread.is_alive()
        informer.stop()
        # judged against the alternative: the server would end this watch after WATCH_S (30 s)
        thread.join(WATCH_S / 3)
        assert not thread.is_alive(), "stop() left the thread in its watch"
        assert informer.stats["watches"] == 1, informer.stats
    finally:
        Pods.done.set()
        server.shutdown()
        server.server_close()
        api.close()
