"""The world's kube-apiserver over real HTTP: routing, RBAC recording and refusals, watches,
and the streaming subresources (exec, portforward, log, the service proxy).

Why: the harness talks to it with the unchanged official ``kubernetes`` client, so it must
speak the wire protocol: ``/api/v1`` and ``/apis/G/V`` paths, Status bodies, chunked watch
streams (BOOKMARK at the end when asked, 410 Expired for a too-old resourceVersion, 504 'Too
large resource version' when none is given, as the golden recorded), and WebSocket upgrades.
Every request is recorded as an RBAC ``(verb, group, resource)`` on this server instance.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.k8s.world import resources as R
from tests.k8s.world import websocket as W
from tests.k8s.world.api import Api
from tests.k8s.world.disruption import evict

__all__ = ["ApiServer"]

VERBS = {"GET": "get", "POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class ApiServer:
    """Serves ``api`` on 127.0.0.1; ``backend`` (the kubelet) runs exec/portforward/log."""

    def __init__(self, api: Api, backend: Any = None, proxy: Any = None):
        self.api = api
        self.backend = backend
        self.proxy = proxy  # callable(handler, ns, service, port_spec, path, method)
        self.rbac: set[tuple[str, str, str]] = set()
        self.requests: list[tuple[str, str, str]] = []  # (method, path, verb)
        self.forbidden: dict[tuple[str, str], str] = {}  # (verb, resource) -> user named
        self.user = "system:serviceaccount:ray:raychaos"
        self.no_rv_watch = "504"  # or "added": what a watch without resourceVersion does
        self.no_rv_delay_s = 3.0
        self.bookmark_every_s = 60.0
        self._http: ThreadingHTTPServer | None = None

    def forbid(self, verb: str, resource: str, user: str | None = None) -> None:
        """Answer 403 to ``verb`` on ``resource`` (e.g. "list", "pods") from now on."""
        self.forbidden[(verb, resource)] = user or self.user

    def start(self, port: int = 0) -> ApiServer:
        owner = self

        class Handler(_Handler):
            srv = owner

        self._http = _Quiet(("127.0.0.1", port), Handler)
        self._http.daemon_threads = True
        threading.Thread(target=self._http.serve_forever, args=(0.1,), daemon=True,
                         name="world-apiserver").start()
        return self

    @property
    def url(self) -> str:
        assert self._http is not None
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def stop(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()


class _Quiet(ThreadingHTTPServer):
    """A client hanging up mid-request (a watch closed early) is not worth a traceback."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


def _parse(path: str) -> dict[str, Any] | None:
    # each segment decoded, as the API server does (clients send ``pods/NAME%3APORT/proxy``)
    parts = [unquote(p) for p in path.split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    if not rest:
        return None
    ns = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    res = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else ""
    tail = "/".join(rest[3:])
    if res == "namespaces" and name and not ns:
        ns = name
    return {"group": group, "version": version, "ns": ns, "res": res, "name": name,
            "sub": sub, "tail": tail}


class _Handler(BaseHTTPRequestHandler):
    srv: ApiServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._route("PUT")

    def do_PATCH(self) -> None:  # noqa: N802
        self._route("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")

    # --- replies -------------------------------------------------------------------------------
    def send_json(self, code: int, body: Any, headers: dict | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, code: int, text: str, ctype: str = "text/plain; charset=utf-8") -> None:
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self) -> tuple[bytes, bool]:
        if "chunked" in (self.headers.get("Transfer-Encoding") or ""):
            data = b""
            while True:
                n = int(self.rfile.readline().strip() or b"0", 16)
                if n == 0:
                    self.rfile.readline()
                    return data, True
                data += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        return (self.rfile.read(n) if n else b""), n > 0

    # --- routing -------------------------------------------------------------------------------
    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        q = {k: v[-1] for k, v in query.items()}
        raw, has_body = self.read_body() if method != "GET" else (b"", False)
        if url.path in ("/version", "/healthz", "/readyz", "/livez", "/api", "/apis"):
            return self._discovery(url.path)
        p = _parse(url.path)
        if p is None:
            return self.send_text(404, "404 page not found\n")
        api, srv = self.srv.api, self.srv
        res = api.resolve(p["group"], p["version"], p["res"])
        if res is None:
            return self.send_text(404, "404 page not found\n")
        name, sub, ns = p["name"], p["sub"], p["ns"] if res.namespaced else ""
        if res.plural == "namespaces":
            ns = ""
        watch = q.get("watch") in ("true", "1") and method == "GET"
        verb = VERBS[method]
        if method == "GET" and not name:
            verb = "watch" if watch else "list"
        elif method == "DELETE" and not name:
            verb = "deletecollection"
        resource = f"{res.plural}/{sub}" if sub else res.plural
        srv.rbac.add((verb, res.group, resource))
        srv.requests.append((method, self.path, verb))
        user = srv.forbidden.get((verb, resource))
        if user:
            return self.send_json(403, R.forbidden(res, verb, user, ns, name),
                                  {"X-Content-Type-Options": "nosniff"})
        if sub == "proxy" and res.plural in ("services", "pods") and self.srv.proxy is not None:
            # any body, passed on as sent; the path as sent (a trailing slash matters)
            raw_name = url.path.split(f"/{res.plural}/", 1)[1].split("/", 1)[0]
            tail = url.path.split(f"/{raw_name}/proxy", 1)[1].lstrip("/")
            return self.srv.proxy(self, ns, name, tail, method, raw, res.plural)
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            return self.send_json(400, R.status(400, "BadRequest", "invalid JSON body"))
        if sub:
            return self._subresource(method, res, ns, name, sub, p["tail"], q, query, body,
                                     has_body, raw)
        if watch:
            return self._watch(res, ns, q)
        if method == "GET":
            return self.send_json(*(api.get(res, ns, name) if name else
                                    api.list(res, ns, q.get("labelSelector"),
                                             q.get("fieldSelector"))))
        if method == "POST":
            return self.send_json(*api.create(res, ns, body))
        if method == "PUT":
            return self.send_json(*api.update(res, ns, name, body))
        if method == "PATCH":
            return self.send_json(*api.update(res, ns, name, body,
                                              patch_type=self.headers.get("Content-Type")))
        if not name:
            return self._delete_collection(res, ns, q)
        opts = body if has_body and isinstance(body, dict) else None
        if has_body and opts is None:
            opts = {}
        return self.send_json(*api.delete(res, ns, name, opts, q.get("gracePeriodSeconds")))

    def _delete_collection(self, res: R.Res, ns: str, q: dict) -> None:
        api = self.srv.api
        items = api.store.list(res.plural, ns or None, q.get("labelSelector"),
                               q.get("fieldSelector"))
        for o in items:
            api.delete(res, ns, o["metadata"]["name"], None, q.get("gracePeriodSeconds"))
        self.send_json(200, {"kind": res.kind + "List", "apiVersion": res.api_version,
                             "metadata": {"resourceVersion": str(api.store.rv)},
                             "items": [api.wire(res, o, True) for o in items]})

    def _discovery(self, path: str) -> None:
        if path == "/version":
            return self.send_json(200, {"major": "1", "minor": "36", "gitVersion": "v1.36.2",
                                        "platform": "linux/amd64"})
        if path == "/api":
            return self.send_json(200, {"kind": "APIVersions", "versions": ["v1"]})
        if path == "/apis":
            groups = sorted({(r.group, r.version) for r in R.BUILTIN.values() if r.group})
            return self.send_json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
                {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v}]}
                for g, v in groups]})
        return self.send_text(200, "ok")

    # --- subresources --------------------------------------------------------------------------
    def _subresource(self, method: str, res: R.Res, ns: str, name: str, sub: str, tail: str,
                     q: dict, query: dict, body: Any, has_body: bool, raw: bytes) -> None:
        api = self.srv.api
        if sub == "status" and method in ("PUT", "PATCH"):
            return self.send_json(*api.update(res, ns, name, body, sub="status",
                                              patch_type=self.headers.get("Content-Type")
                                              if method == "PATCH" else None))
        if sub == "status" and method == "GET":
            return self.send_json(*api.get(res, ns, name))
        if res.plural == "pods" and sub == "eviction" and method == "POST":
            code, reply, headers = evict(api, ns, name, body)
            return self.send_json(code, reply, headers)
        if res.plural == "pods" and sub == "binding" and method == "POST":
            return self.send_json(*api.bind(ns, name, ((body or {}).get("target") or {})
                                            .get("name", "")))
        if res.plural == "pods" and sub in ("exec", "attach", "portforward"):
            return self._stream(sub, ns, name, q, query)
        if res.plural == "pods" and sub == "log":
            return self._log(ns, name, q)
        return self.send_text(404, "404 page not found\n")

    def _stream(self, sub: str, ns: str, name: str, q: dict, query: dict) -> None:
        api, backend = self.srv.api, self.srv.backend
        if (self.headers.get("Upgrade") or "").lower() != "websocket":
            return self.send_json(400, R.status(400, "BadRequest", "Upgrade request required"))
        pod = api.store.get("pods", ns, name)
        if pod is None:
            return self.send_json(404, R.not_found(R.BUILTIN["pods"], name))
        ws = W.accept(self)
        if ws is None:
            return self.send_json(400, R.status(400, "BadRequest", "Upgrade request required"))
        try:
            if sub == "portforward":
                ports = [int(p) for v in query.get("ports", []) for p in v.split(",")]
                ip = backend.pod_address(pod) if backend else None
                if not ip:  # the port numbers first (the protocol), then the error
                    import struct
                    for i, port in enumerate(ports):
                        ws.send_channel(2 * i, struct.pack("<H", port))
                        ws.send_channel(2 * i + 1, struct.pack("<H", port))
                        ws.send_channel(2 * i + 1, f"error forwarding port {port} to pod "
                                                   f"{name}: the pod has no address".encode())
                    return ws.close()
                return W.run_portforward(ws, [(ip, p) for p in ports])
            container = q.get("container") or pod["spec"]["containers"][0]["name"]
            command = query.get("command", [])
            proc, err = (backend.exec(pod, container, command, stdin=q.get("stdin") == "true",
                                      tty=q.get("tty") == "true")
                         if backend else (None, None))
            if proc is None and err is None:
                err = self._no_kubelet(pod, container, command)
            W.run_exec(ws, proc, err)
        except OSError:
            ws.closed = True

    @staticmethod
    def _no_kubelet(pod: dict, container: str, command: list[str]) -> str:
        m = pod["metadata"]
        cmd = "&".join(f"command={c}" for c in command)
        url = f"https://127.0.0.1:10299/exec/{m['namespace']}/{m['name']}/{container}?{cmd}" \
              "&error=1&output=1"
        return (f'error sending request: Post "{url}": dial tcp 127.0.0.1:10299: connect: '
                f"connection refused")

    def _log(self, ns: str, name: str, q: dict) -> None:
        pod = self.srv.api.store.get("pods", ns, name)
        if pod is None:
            return self.send_json(404, R.not_found(R.BUILTIN["pods"], name))
        container = q.get("container") or pod["spec"]["containers"][0]["name"]
        text = self.srv.backend.log(pod, container, q.get("previous") == "true") \
            if self.srv.backend else None
        if text is None:
            return self.send_json(400, R.status(400, "BadRequest", f'container "{container}" '
                                  f'in pod "{name}" is waiting to start: ContainerCreating'))
        if q.get("tailLines"):
            text = "\n".join(text.splitlines()[-int(q["tailLines"]):]) + "\n"
        return self.send_text(200, text)

    # --- watch ---------------------------------------------------------------------------------
    def _watch(self, res: R.Res, ns: str, q: dict) -> None:
        api, store, srv = self.srv.api, self.srv.api.store, self.srv
        labels, fields = q.get("labelSelector"), q.get("fieldSelector")
        rv_text = q.get("resourceVersion")
        timeout = float(q.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        bookmarks = q.get("allowWatchBookmarks") == "true"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(event: dict) -> None:
            data = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        def matches(obj: dict) -> bool:
            meta = obj["metadata"]
            if ns and meta.get("namespace") != ns:
                return False
            from tests.k8s.world.store import field_match, label_match
            return label_match(labels, meta.get("labels")) and field_match(fields, obj)

        try:
            with store.lock:
                current = store.rv
                oldest = store.oldest_rv
            if not rv_text and srv.no_rv_watch == "504":
                time.sleep(min(srv.no_rv_delay_s, timeout + 1))
                return chunk({"type": "ERROR", "object": R.status(
                    504, "Timeout", f"Timeout: Too large resource version: {current + 1}, "
                    f"current: {current}", {"causes": [{"reason": "ResourceVersionTooLarge",
                                                        "message": "Too large resource version"}],
                                            "retryAfterSeconds": 1})})
            seen = int(rv_text) if rv_text and rv_text != "0" else current
            if rv_text and rv_text != "0" and seen < oldest:
                return chunk({"type": "ERROR", "object": R.status(
                    410, "Expired", f"too old resource version: {seen} ({oldest})")})
            if not rv_text or rv_text == "0":
                for o in store.list(res.plural, ns or None, labels, fields):
                    chunk({"type": "ADDED", "object": api.wire(res, o)})
            last_bookmark = time.monotonic()
            while True:
                with store.lock:
                    batch = store.events_since(seen, res.plural)
                    if not batch:
                        left = deadline - time.monotonic()
                        if left <= 0 or store.closed:
                            break
                        store.lock.wait(min(left, 1.0))
                        batch = store.events_since(seen, res.plural)
                    latest = store.rv
                for rv, typ, obj in batch:
                    seen = rv
                    if matches(obj):
                        chunk({"type": typ, "object": api.wire(res, obj)})
                if bookmarks and time.monotonic() - last_bookmark > srv.bookmark_every_s:
                    chunk(self._bookmark(res, max(seen, latest)))
                    last_bookmark = time.monotonic()
                if time.monotonic() >= deadline or store.closed:
                    break
            if bookmarks:
                chunk(self._bookmark(res, max(seen, store.rv)))
        except (BrokenPipeError, ConnectionResetError):
            return
        finally:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass

    @staticmethod
    def _bookmark(res: R.Res, rv: int) -> dict:
        obj: dict[str, Any] = {"kind": res.kind, "apiVersion": res.api_version,
                               "metadata": {"resourceVersion": str(rv)}}
        if res.plural == "pods":
            obj |= {"spec": {"containers": None}, "status": {}}
        return {"type": "BOOKMARK", "object": obj}
