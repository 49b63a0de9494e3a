"""raychaos's own port-forward: a loopback listener whose every connection picks its pod anew.

Why not ``kubectl port-forward``: it resolves a Service to one pod when it starts and keeps
forwarding to that pod; when the head pod is replaced it dies (kubernetes/kubectl#686) and the
Jobs API, the dashboard and every "is the GCS up?" sample are gone for the rest of the run — and
it is one more thing a user must start. Here each accepted connection asks ``resolve()`` for the
pod of *now* (the head Service's pods, or Serve's), opens ``pods/portforward`` to it through the
API server (so any kubeconfig credential works, and nothing but the API server needs to be
reachable) and pipes bytes both ways. A connection that finds no pod, or a pod that refuses, is
closed at once: a client sees "connection closed", which is what an outage is.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable

from websocket import WebSocketException

from raychaos.errors import RaychaosError
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.streams import open_portforward

__all__ = ["LocalForward"]

log = logging.getLogger(__name__)
CHUNK = 1 << 16
#: The kubernetes client's own thread per port-forward stream (``kubernetes.stream.ws_client``).
PROXY_THREAD = "Kubernetes port forward proxy"
_hook_lock = threading.Lock()


def quiet_stream_ends() -> None:
    """Keep the kubernetes client's port-forward thread from printing a traceback when its
    stream dies (a head pod deleted mid-connection resets it: ``ConnectionResetError`` in a
    thread nobody joins, printed on the harness's log by :func:`threading.excepthook`). The
    connection's end reaches our relay as EOF, which is how an outage is told; the error is
    logged at debug. Any other thread's exception goes to the hook that was there before."""
    with _hook_lock:
        if not getattr(threading.excepthook, "raychaos_quiet", False):
            threading.excepthook = quieting(threading.excepthook)


class quieting:  # noqa: N801 - used as a function: quieting(previous hook) -> hook
    """``previous``, except for a network error ending a client port-forward thread."""

    raychaos_quiet = True  # what quiet_stream_ends looks for: installed already

    def __init__(self, previous: Callable[[threading.ExceptHookArgs], object]):
        self.previous = previous

    def __call__(self, args: threading.ExceptHookArgs) -> None:
        name = args.thread.name if args.thread is not None else ""
        if name.startswith(PROXY_THREAD) and args.exc_type is not None and issubclass(
                args.exc_type, (OSError, WebSocketException)):
            log.debug("%s: the stream ended: %r", name, args.exc_value)
            return
        self.previous(args)


class LocalForward:
    """``http://127.0.0.1:<port>`` → ``resolve()`` (a pod name and port), per connection."""

    def __init__(self, api: ApiSession, namespace: str, resolve: Callable[[], tuple[str, int]],
                 name: str):
        self.api, self.ns, self.resolve, self.name = api, namespace, resolve, name
        self._sock: socket.socket | None = None
        self._acceptor: threading.Thread | None = None
        self._stop = threading.Event()
        self.stats = {"connections": 0, "refused": 0}
        self.last_pod: str | None = None
        self.last_error: str | None = None

    def start(self) -> LocalForward:
        if self._sock is None:
            quiet_stream_ends()
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(64)
            self._sock = sock
            self._acceptor = threading.Thread(target=self._accept, daemon=True,
                                              name=f"raychaos-forward-{self.name}")
            self._acceptor.start()
        return self

    @property
    def url(self) -> str:
        self.start()
        assert self._sock is not None
        return f"http://127.0.0.1:{self._sock.getsockname()[1]}"

    def close(self) -> None:
        """Stop listening and end the accepting thread (a ``close`` alone does not wake a
        thread blocked in ``accept`` on Linux: the shutdown does)."""
        self._stop.set()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                self._sock.close()
        if self._acceptor is not None and self._acceptor is not threading.current_thread():
            self._acceptor.join(timeout=5.0)

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True,
                             name=f"raychaos-forward-{self.name}-conn").start()

    def _serve(self, conn: socket.socket) -> None:
        self.stats["connections"] += 1
        try:
            pod, port = self.resolve()
            remote, pf, core = open_portforward(self.api, self.ns, pod, port)
        except (RaychaosError, OSError) as exc:
            self.stats["refused"] += 1
            self.last_error = str(exc)
            conn.close()
            return
        self.last_pod = pod
        try:
            _pipe(conn, remote)
        finally:
            for closer in (conn.close, remote.close, pf.close, core.api_client.close):
                with contextlib.suppress(Exception):
                    closer()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until either side closes."""
    peers = {a: b, b: a}
    open_ = [a, b]
    while open_:
        try:
            ready, _, _ = select.select(open_, [], [], 60.0)
        except (OSError, ValueError):
            return
        if not ready:
            continue
        for src in ready:
            try:
                data = src.recv(CHUNK)
            except OSError:
                data = b""
            if not data:
                return  # one side is done: HTTP clients reconnect, so end both
            try:
                peers[src].sendall(data)
            except OSError:
                return
