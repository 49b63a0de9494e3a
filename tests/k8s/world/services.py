"""How Services work in the world: names in every pod's /etc/hosts, ClusterIPs routed to a Ready
endpoint (a small kube-proxy), the API server's service proxy
(``/api/v1/namespaces/NS/services/[SCHEME:]NAME[:PORT]/proxy/PATH``, resolved per request to a
Ready endpoint), and KubeRay's Serve marking (``ray.io/serve=true`` on pods answering on 8000).

Why together: all four answer "where does a Service name lead right now", from the same
Endpoints objects the endpoints controller keeps.
"""

from __future__ import annotations

import http.client
import logging
import threading
from typing import Any

from raychaos.testbed.node.kubelet import tcp_ok
from tests.k8s.world import resources as R

__all__ = ["Services", "REGISTRY_HOSTS"]

log = logging.getLogger("world.services")

#: registry names that resolve to the world's registry (images are "pulled" from it)
REGISTRY_HOSTS = ("registry.raychaos.test", "registry-1.docker.io", "docker.io", "ghcr.io",
                  "quay.io", "nvcr.io", "gcr.io", "registry.k8s.io")
HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
       "transfer-encoding", "upgrade", "host", "authorization", "content-length"}


class Services:
    def __init__(self, world: Any):
        self.w = world
        self.routes: dict[str, tuple | None] = {}
        self._hosts_base = ""
        self._stop = threading.Event()

    # --- /etc/hosts ----------------------------------------------------------------------------
    def base_hosts(self) -> str:
        lines = ["127.0.0.1 localhost", f"{self.w.net.registry_ip} " + " ".join(REGISTRY_HOSTS)]
        store = self.w.store
        for svc in sorted(store.list("services", copy_=False),
                          key=lambda s: (s["metadata"]["namespace"], s["metadata"]["name"])):
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            addr = svc["spec"].get("clusterIP")
            if not addr or addr == "None":
                ep = self.ready_endpoint(ns, name)
                addr = ep[0] if ep else None
            if addr:
                lines.append(f"{addr} {name}.{ns}.svc.cluster.local {name}.{ns}.svc {name}.{ns} "
                             f"{name}")
        return "\n".join(lines) + "\n"

    def hosts_text(self, ip: str | None = None, hostname: str | None = None) -> str:
        base = self._hosts_base or self.base_hosts()
        return base + (f"{ip} {hostname}\n" if ip and hostname else "")

    def sync(self) -> None:
        """Controller step: hosts files and ClusterIP routes follow Services and Endpoints."""
        with self.w.store.lock:
            base = self.base_hosts()
            wanted = self._vip_targets()
        if base != self._hosts_base:
            self._hosts_base = base
            net = self.w.net
            net.write_hosts(base, [n.netns for n in net.nodes.values()])
            for wk in list(self.w.kubelet.workers.values()):
                if wk.netns and wk.ip and wk.netns not in {n.netns for n in net.nodes.values()}:
                    net.write_hosts(base + f"{wk.ip} {wk.name}\n", [wk.netns])
        for vip, target in wanted.items():
            if self.routes.get(vip) != target:
                self.w.net.route_vip(vip, target[:3] if target else None,
                                     dict(target[3]) if target else None)
                self.routes[vip] = target

    def _vip_targets(self) -> dict[str, tuple | None]:
        out: dict[str, tuple | None] = {}
        prefix = self.w.net.service_prefix + "."
        workers = {wk.uid: wk for wk in list(self.w.kubelet.workers.values())}
        for svc in self.w.store.list("services", copy_=False):
            vip = svc["spec"].get("clusterIP") or ""
            if not vip.startswith(prefix):
                continue
            target = None
            ep = self.ready_endpoint(svc["metadata"]["namespace"], svc["metadata"]["name"],
                                     with_ref=True)
            if ep:
                wk = workers.get(ep[2])
                if wk is not None and wk.netns:
                    ports = tuple(sorted(
                        (int(p["port"]), int(p["targetPort"])) for p in svc["spec"].get("ports")
                        or [] if str(p.get("targetPort", p["port"])).isdigit()
                        and int(p["targetPort"]) != int(p["port"])))
                    target = (wk.node, wk.netns, wk.ip, ports)
            out[vip] = target
        for vip in self.routes:
            out.setdefault(vip, None)
        return out

    def ready_endpoint(self, ns: str, name: str, port: Any = None,
                       with_ref: bool = False) -> tuple | None:
        """(ip, port, pod uid) of the first Ready endpoint; ``port`` a service port name or
        number (None: the first)."""
        ep = self.w.store.raw("endpoints", ns, name)
        svc = self.w.store.raw("services", ns, name)
        if not ep or not svc:
            return None
        sports = svc["spec"].get("ports") or []
        want = next((p for p in sports if port is None or str(p.get("port")) == str(port)
                     or p.get("name") == port), None)
        for subset in ep.get("subsets") or []:
            for addr in subset.get("addresses") or []:
                eport = next((p["port"] for p in subset.get("ports") or []
                              if want is None or p.get("name") == want.get("name")), None)
                return addr["ip"], eport, (addr.get("targetRef") or {}).get("uid")
        return None

    # --- the API server's service proxy ----------------------------------------------------------
    def proxy(self, handler: Any, ns: str, name: str, tail: str, method: str, raw: bytes,
              plural: str = "services") -> None:
        """``services/NAME[:PORT]/proxy/...`` to a Ready endpoint, ``pods/NAME:PORT/proxy/...``
        to the pod's address (as the API server does, Ready or not)."""
        parts = name.split(":")
        if len(parts) == 3 or (len(parts) == 2 and parts[0] in ("http", "https")):
            parts = parts[1:]
        obj_name, port = parts[0], parts[1] if len(parts) > 1 else None
        if plural == "pods":
            pod = self.w.store.get("pods", ns, obj_name)
            if pod is None:
                return handler.send_json(404, R.not_found(R.BUILTIN["pods"], obj_name))
            ip = (pod.get("status") or {}).get("podIP")
            ep: tuple | None = (ip, int(port) if port and port.isdigit() else 80, None)
            if not ip:
                return handler.send_json(503, R.status(503, "ServiceUnavailable",
                                                       f'pod "{obj_name}" has no address'))
        else:
            if self.w.store.get("services", ns, obj_name) is None:
                return handler.send_json(404, R.not_found(R.BUILTIN["services"], obj_name))
            with self.w.store.lock:
                ep = self.ready_endpoint(ns, obj_name, port)
            if not ep or not ep[1]:
                return handler.send_json(503, R.status(503, "ServiceUnavailable",
                                                       f'no endpoints available for service '
                                                       f'"{obj_name}"'))
        assert ep is not None
        query = handler.path.split("?", 1)[1] if "?" in handler.path else ""
        path = "/" + tail + (("?" + query) if query else "")
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP}
        try:
            conn = http.client.HTTPConnection(ep[0], ep[1], timeout=60)
            conn.request(method, path, body=raw or None, headers=headers)
            resp = conn.getresponse()
            body = resp.read()
            conn.close()
        except (OSError, http.client.HTTPException) as exc:
            return handler.send_json(503, R.status(503, "ServiceUnavailable",
                                                   f"error trying to reach service: {exc}"))
        handler.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in HOP:
                handler.send_header(k, v)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    # --- KubeRay's Serve marking ---------------------------------------------------------------
    def start_serve_prober(self, every_s: float = 2.0) -> None:
        threading.Thread(target=self._serve_loop, args=(every_s,), daemon=True,
                         name="world-serve-prober").start()

    def stop(self) -> None:
        self._stop.set()

    def _serve_loop(self, every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                for wk in list(self.w.kubelet.workers.values()):
                    pod = wk.pod()
                    if not pod or not wk.ip or (pod["metadata"].get("labels") or {}).get(
                            "ray.io/is-ray-node") != "yes":
                        continue
                    want = "true" if tcp_ok(wk.ip, 8000, 0.3) else "false"
                    if pod["metadata"]["labels"].get("ray.io/serve") != want:
                        self.w.store.mutate("pods", wk.ns, wk.name, lambda p, v=want: p[
                            "metadata"]["labels"].__setitem__("ray.io/serve", v))
            except Exception:  # noqa: BLE001 - the prober must outlive a pod vanishing
                log.exception("serve prober")
