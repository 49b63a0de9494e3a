"""The dashboard's GCS health in three answers: healthy, refused (down), and no answer in time
(late: a busy head behind the port-forward — the monitor does not count it as an outage unless
it stays silent). Plain sockets on loopback."""

from __future__ import annotations

import socket
import threading

import pytest

from raychaos.targets.kubernetes.dashboard import Dashboard

pytestmark = pytest.mark.unit


def _server(reply: bytes | None):  # noqa: ANN202
    """A loopback listener that answers every request with ``reply`` (None: never answers)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    held: list[socket.socket] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            held.append(conn)
            if reply is not None:
                conn.recv(65536)
                conn.sendall(reply)
                conn.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv, held


def test_healthy_refused_and_late_are_three_answers():
    ok, _ = _server(b"HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nsuccess")
    silent, held = _server(None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    try:
        def health(port: int) -> tuple[bool, bool]:
            up, _why, late = Dashboard(lambda: f"http://127.0.0.1:{port}").gcs_health(0.3)
            return up, late

        assert health(ok.getsockname()[1]) == (True, False)
        assert health(closed) == (False, False), "a refused connection is down"
        assert health(silent.getsockname()[1]) == (False, True), "no answer in time is late"
    finally:
        for sock in (ok, silent, *held):
            sock.close()


def test_a_503_for_a_missed_deadline_is_late_and_for_a_refusal_is_down():
    late, _ = _server(b"HTTP/1.1 503 Health check failed: RpcError: Deadline Exceeded\r\n"
                      b"Content-Length: 0\r\nConnection: close\r\n\r\n")
    down, _ = _server(b"HTTP/1.1 503 Health check failed: RpcError: failed to connect to all "
                      b"addresses; Connection refused\r\nContent-Length: 0\r\n"
                      b"Connection: close\r\n\r\n")
    try:
        assert Dashboard(lambda: f"http://127.0.0.1:{late.getsockname()[1]}").gcs_health(
            1.0)[::2] == (False, True)
        assert Dashboard(lambda: f"http://127.0.0.1:{down.getsockname()[1]}").gcs_health(
            1.0)[::2] == (False, False)
    finally:
        late.close()
        down.close()
