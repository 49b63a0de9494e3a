"""The bed's node agent without namespaces: the pods virtual-kubelet hands it, the status it
reports back (every change counted, so the kubelet tells the API server), deletion within the
pod's grace, and the HTTP routes the Go kubelet calls, over a real Unix socket."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from raychaos.testbed.node.agent import LocalPods, _handler, _Server

pytestmark = pytest.mark.unit


def _pod(name: str = "demo-head-abc", uid: str = "u1") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ray", "uid": uid,
                         "labels": {"ray.io/node-type": "head"}},
            "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0",
                                     "env": [{"name": "RAY_PORT", "value": "6379"}]}]}}


def test_a_pod_is_pending_on_its_node_and_an_update_keeps_its_status():
    pods = LocalPods()
    pods.put("head-0", _pod())
    [row] = pods.report("head-0")
    assert row["status"]["phase"] == "Pending" and row["gen"] == 1
    assert pods.report("cpu-0") == []
    pods.store.mutate("pods", "ray", "demo-head-abc",
                      lambda p: p["status"].update(phase="Running", podIP="198.19.17.10"))
    changed = _pod()
    changed["metadata"]["labels"]["ray.io/serve"] = "true"
    pods.put("head-0", changed)
    [row] = pods.report("head-0")
    assert row["status"] == {"phase": "Running", "conditions": [], "podIP": "198.19.17.10"}
    assert row["gen"] == 2  # the status change, not the label
    assert pods.store.get("pods", "ray", "demo-head-abc")["metadata"]["labels"][
        "ray.io/serve"] == "true"


def test_a_pod_recreated_under_its_name_is_a_new_pod():
    pods = LocalPods()
    pods.put("head-0", _pod(uid="u1"))
    pods.store.mutate("pods", "ray", "demo-head-abc", lambda p: p["status"].update(
        phase="Running"))
    pods.put("head-0", _pod(uid="u2"))
    [row] = pods.report("head-0")
    assert row["uid"] == "u2" and row["status"]["phase"] == "Pending"


def test_delete_sets_the_grace_and_finish_reports_every_container_stopped():
    pods = LocalPods()
    pods.put("head-0", _pod())
    pods.store.mutate("pods", "ray", "demo-head-abc", lambda p: p["status"].update(
        phase="Running", containerStatuses=[{"name": "ray-head", "ready": True,
                                             "state": {"running": {}}}],
        conditions=[{"type": "Ready", "status": "True"}]))
    assert not pods.delete("nope", 30)
    assert pods.delete("u1", 0)
    meta = pods.store.get("pods", "ray", "demo-head-abc")["metadata"]
    assert meta["deletionGracePeriodSeconds"] == 0 and meta["deletionTimestamp"]
    assert pods.delete("u1", 30)  # asked again (virtual-kubelet may): the first grace holds
    assert pods.store.get("pods", "ray", "demo-head-abc")["metadata"][
        "deletionGracePeriodSeconds"] == 0
    pods.put("cpu-0", _pod("demo-head-def", "u3"))
    # virtual-kubelet found it gone from the API already: a deletion with grace 0
    assert pods.delete("u3", None)
    assert pods.store.get("pods", "ray", "demo-head-def")["metadata"][
        "deletionGracePeriodSeconds"] == 0
    pods.finish_pod("ray", "demo-head-abc", "u2")  # another pod's last word: not this one
    assert "terminated" not in pods.report("head-0")[0]["status"]["containerStatuses"][0][
        "state"]
    pods.finish_pod("ray", "demo-head-abc", "u1")
    [row] = pods.report("head-0")
    [cs] = row["status"]["containerStatuses"]
    assert "terminated" in cs["state"] and not cs["ready"]
    assert [c["status"] for c in row["status"]["conditions"]] == ["False"]
    assert [p["metadata"]["name"] for p in pods.store.list("pods")] == ["demo-head-def"]


class _FakeAgent:
    def __init__(self) -> None:
        self.pods = LocalPods()

    def container(self, uid: str, name: str, previous: bool) -> dict[str, Any] | None:
        if uid != "u1":
            return None
        return {"pid": None if previous else 4242, "log": f"/logs/{name}-{int(previous)}",
                "env": {"A": "1"}}


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str) -> None:
        super().__init__("agent")
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.path)


def _call(sock: Path, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    conn = _UnixConnection(str(sock))
    raw = json.dumps(body).encode() if body is not None else None
    conn.request(method, path, body=raw, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = json.loads(resp.read() or b"null")
    conn.close()
    return resp.status, data


@pytest.fixture()
def served(tmp_path):
    agent = _FakeAgent()
    sock = tmp_path / "agent.sock"
    server = _Server(str(sock), _handler(agent))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield agent, sock
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_the_routes_the_go_kubelet_calls(served):
    agent, sock = served
    assert _call(sock, "PUT", "/pods/u1", {"node": "head-0", "pod": _pod()}) == (200, {})
    code, body = _call(sock, "GET", "/pods?node=head-0")
    assert code == 200 and [p["name"] for p in body["pods"]] == ["demo-head-abc"]
    assert _call(sock, "GET", "/containers/u1/ray-head?previous=0")[1]["pid"] == 4242
    assert _call(sock, "GET", "/containers/u1/ray-head?previous=1")[1]["pid"] is None
    assert _call(sock, "GET", "/containers/u9/ray-head")[0] == 404
    assert _call(sock, "DELETE", "/pods/u9", {"grace": 30})[0] == 404
    assert _call(sock, "DELETE", "/pods/u1", {"grace": 5}) == (200, {})
    assert agent.pods.store.get("pods", "ray", "demo-head-abc")["metadata"][
        "deletionGracePeriodSeconds"] == 5
    assert _call(sock, "GET", "/nowhere")[0] == 404


def test_a_burst_of_kubelet_connections_waits_for_a_busy_agent_instead_of_being_refused(
        tmp_path):
    """While the agent is slow to accept (a busy box), the kubelet's connections queue: with
    socketserver's backlog of 5 the seventh was refused at once (EAGAIN on a Unix socket) and
    the kubelet failed a port-forward to a running pod as "no running container" — Serve
    requests closed mid-run on the bed. All 64 are answered once the agent gets to them."""
    sock = tmp_path / "agent.sock"
    server = _Server(str(sock), _handler(_FakeAgent()))  # type: ignore[arg-type]
    clients = []
    try:
        for _ in range(64):  # nobody accepts yet: each waits in the listen queue
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.setblocking(False)
            clients.append(c)
            c.connect(str(sock))  # BlockingIOError (EAGAIN) once the queue is full
            c.setblocking(True)
            c.sendall(b"GET /containers/u9/ray-head HTTP/1.1\r\nHost: agent\r\n"
                      b"Connection: close\r\n\r\n")
        thread = threading.Thread(target=server.serve_forever,
                                  kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        for c in clients:
            c.settimeout(30)
            reply = b""
            while chunk := c.recv(4096):  # to the end: the agent closes after its answer
                reply += chunk
            assert reply.startswith(b"HTTP/1.1 404"), reply  # answered: no such pod
        server.shutdown()
        thread.join(5)
    finally:
        for c in clients:
            c.close()
        server.server_close()


@pytest.mark.parametrize(("image", "command", "args", "argv"), [
    # the official Redis image: its entrypoint runs redis-server, protected mode off
    ("redis:7.4", [], ["--appendonly", "yes"],
     ["redis-server", "--protected-mode", "no", "--appendonly", "yes"]),
    ("docker.io/library/redis@sha256:00", [], [], ["redis-server", "--protected-mode", "no"]),
    ("redis:7", [], ["redis-server", "--port", "7000"],
     ["redis-server", "--protected-mode", "no", "--port", "7000"]),
    # a command replaces the entrypoint; KubeRay's Ray pods always give one
    ("redis:7.4", ["sleep"], ["5"], ["sleep", "5"]),
    ("rayproject/ray:2.60.0", ["/bin/bash", "-lc", "--"], ["ray start --head"],
     ["/bin/bash", "-lc", "--", "ray start --head"]),
    ("busybox", [], ["true"], ["true"]),  # unknown: its args as they are
])
def test_a_container_runs_what_its_image_would(image, command, args, argv):
    from raychaos.testbed.node.runtime import argv_of

    assert argv_of(image, command, args) == argv


def test_only_a_first_start_waits_its_turn_a_restart_goes_at_once(tmp_path):
    """The bed's one-Ray-start-at-a-time gate holds a first start while another Ray pod is
    starting (not Ready, under 90 s); a container restarting after it exited does not wait (a
    head whose gcs_server was killed waited 77 s behind a never-Ready RayService worker)."""
    import time
    from types import SimpleNamespace

    from raychaos.testbed.node.podworker import PodWorker

    kubelet = SimpleNamespace(state_dir=tmp_path, serial_starts=True,
                              start_lock=threading.Lock(), starting={"worker": time.monotonic()})
    w = PodWorker(kubelet, "ray", "demo-head-abc", "head", "head-0")
    pod = {"metadata": {"labels": {"ray.io/is-ray-node": "yes"}}}
    w.state["ray-head"] = {"restarts": 1}
    w._gate(pod, "ray-head")  # returns at once: a restart
    assert "head" not in kubelet.starting
    w.state["ray-head"] = {"restarts": 0}
    gated = threading.Thread(target=w._gate, args=(pod, "ray-head"), daemon=True)
    gated.start()
    gated.join(1.5)
    assert gated.is_alive(), "a first start went while another Ray pod was starting"
    kubelet.starting.pop("worker")  # the worker is Ready
    gated.join(10)
    assert not gated.is_alive() and "head" in kubelet.starting


class _Container:
    """A container that ignores SIGTERM (bash as PID 1, KubeRay #503) until SIGKILL."""

    def __init__(self) -> None:
        self.signals: list[int] = []

    def exit_code(self) -> int | None:
        return None

    def signal_init(self, sig: int) -> None:
        self.signals.append(sig)


def test_a_pod_deleted_again_with_a_shorter_grace_is_stopped_within_that_grace():
    """`kubectl delete --grace-period=1` on a pod already terminating with 30 s: the agent
    takes the shorter grace (never a longer one), and the pod worker kills within it."""
    import signal
    import time
    from types import SimpleNamespace

    from raychaos.testbed.node.podworker import PodWorker

    pods = LocalPods()
    pods.put("head-0", _pod())
    assert pods.delete("u1", 30) and pods.delete("u1", 60)
    assert pods.store.get("pods", "ray", "demo-head-abc")["metadata"][
        "deletionGracePeriodSeconds"] == 30  # a longer grace never extends it
    kubelet = SimpleNamespace(api=SimpleNamespace(store=pods.store), state_dir=Path("/nonexistent"),
                              events=lambda *a, **k: None)
    worker = PodWorker(kubelet, "ray", "demo-head-abc", "u1", "head-0")
    worker.containers = {"ray-head": _Container()}  # type: ignore[dict-item]
    shorten = threading.Timer(0.5, lambda: pods.delete("u1", 1))
    shorten.start()
    t0 = time.monotonic()
    try:
        worker._terminate(pods.store.get("pods", "ray", "demo-head-abc"))
    finally:
        shorten.cancel()
    took = time.monotonic() - t0
    # the first grace (30 s) gave way to the second (1 s, from when it came): SIGTERM again
    assert 1.4 <= took < 20, took  # well inside the first grace's 30 s, on a starved lane too
    assert worker.containers["ray-head"].signals[:2] == [signal.SIGTERM, signal.SIGTERM]
