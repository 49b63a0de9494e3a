"""The bed's node agent: runs the pods the bed's kubelet (virtual-kubelet, ``raychaos-kubelet``)
hands it, on real network namespaces, with the same pod worker the KubeRay world uses.

Why a second process beside the Go kubelet: the kubelet's API — node registration, leases,
pod status writes, exec/logs/port-forward served to the API server over TLS — is
virtual-kubelet's, unchanged; what a container *is* on this machine (a process tree in its own
PID/mount/UTS namespace inside its pod's network namespace) is ours, in Python, shared with the
world. The two speak HTTP over a Unix socket (see build/kubelet/main.go for the routes).

What the agent also does, being the only part of the bed inside the node namespaces:

- ``/etc/hosts`` of every node and pod names each Service (``<svc>.<ns>.svc.cluster.local``,
  ``<svc>.<ns>.svc``, ``<svc>.<ns>``, ``<svc>``) after one of its endpoints' addresses, and the
  registry names after the bed's registry: a DNS-level stand-in for kube-proxy and CoreDNS
  (ours; KubeRay's head Service is headless, so this is what its DNS would answer);
- events (``Pulling``/``Pulled``, ``Killing``, ``BackOff``, ...) are written to the real API;
- env is resolved here when a container starts (fieldRef — ``status.podIP`` has a value only
  once the sandbox exists —, resourceFieldRef, secretKeyRef read from the API), as the kubelet
  does; virtual-kubelet's own resolution is off.

Run: ``python -m raychaos.testbed.node.agent CONFIG`` (JSON the bed writes: socket, state
folder, bed name, nodes, API server, token, CA).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import socketserver
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from raychaos.testbed.node.chaos import ChaosDaemon
from raychaos.testbed.node.kubelet import Kubelet
from raychaos.testbed.node.net import WorldNet
from raychaos.testbed.node.objects import event_body, now, quantity

__all__ = ["Agent", "LocalPods", "REGISTRY_HOSTS", "cleanup_host", "main", "world_name"]

log = logging.getLogger("testbed.agent")

#: names that resolve to the bed's registry (every image is "pulled" from it)
REGISTRY_HOSTS = ("registry.raychaos.test", "registry-1.docker.io", "docker.io", "ghcr.io",
                  "quay.io", "nvcr.io", "gcr.io", "registry.k8s.io")


def world_name(bed: str) -> str:
    """What the bed's namespaces, links, CPU groups and process markers are named after."""
    return f"bed-{bed}"


def cleanup_host(name: str) -> list[str]:
    """Remove what the pods of ``name`` (a world or a bed's :func:`world_name`) may have left on
    this machine: processes (by their marker), network namespaces, links, routes,
    /etc/netns entries, CPU groups. Returns what is still there (should be [])."""
    from raychaos.targets.local.cpu import cpu_groups
    from raychaos.testbed.node.kubelet import world_cpu_prefix
    from raychaos.testbed.node.runtime import sweep

    left = [f"process {p}" for p in sweep(f"{name}/")]
    net = WorldNet(name)
    net.destroy()
    left += net.leftovers()
    groups = cpu_groups()
    if groups is not None:  # its processes are gone: the node and pod groups are empty
        for group in groups.existing(world_cpu_prefix(name)):
            left += [f"cgroup {g}" for g in groups.remove(group)]
    return left


class _Store:
    """The pods virtual-kubelet gave this agent, in the world store's shape (``get``,
    ``list``, ``mutate``); each change bumps the pod's ``gen`` so the kubelet reports it."""

    def __init__(self, fetch: Any = None) -> None:
        self.lock = threading.RLock()
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.gen: dict[str, int] = {}
        self.fetch = fetch  # (kind, ns, name) -> the API's object or None (secrets for env)

    def get(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        if kind != "pods":
            return self.fetch(kind, ns, name) if self.fetch is not None else None
        with self.lock:
            pod = self.pods.get((ns, name))
            return json.loads(json.dumps(pod)) if pod is not None else None

    def list(self, kind: str, copy_: bool = True) -> list[dict[str, Any]]:
        with self.lock:
            pods = [p for p in self.pods.values() if not p.get("_gone")] if kind == "pods" \
                else []
            return [json.loads(json.dumps(p)) for p in pods] if copy_ else pods

    def mutate(self, kind: str, ns: str, name: str, fn: Any) -> None:
        with self.lock:
            pod = self.pods.get((ns, name))
            if kind == "pods" and pod is not None:
                fn(pod)
                uid = pod["metadata"]["uid"]
                self.gen[uid] = self.gen.get(uid, 0) + 1


class LocalPods:
    """What the kubelet reads pods from and writes status to (``PodStore``)."""

    def __init__(self, fetch: Any = None) -> None:
        self.store = _Store(fetch)

    def put(self, node: str, pod: dict[str, Any]) -> None:
        """virtual-kubelet's CreatePod/UpdatePod: the spec is the API's; the status is ours."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        uid = pod["metadata"]["uid"]
        with self.store.lock:
            cur = self.store.pods.get(key)
            if cur is not None and cur["metadata"]["uid"] == uid:
                cur["spec"] = dict(pod["spec"], nodeName=node)
                cur["metadata"]["labels"] = pod["metadata"].get("labels") or {}
                cur["metadata"]["annotations"] = pod["metadata"].get("annotations") or {}
                return
            pod = json.loads(json.dumps(pod))
            pod["spec"]["nodeName"] = node
            pod["status"] = {"phase": "Pending", "conditions": []}
            self.store.pods[key] = pod
            self.store.gen[uid] = self.store.gen.get(uid, 0) + 1

    def delete(self, uid: str, grace: int | None) -> bool:
        with self.store.lock:
            for pod in self.store.pods.values():
                if pod["metadata"]["uid"] == uid and not pod.get("_gone"):
                    if not pod["metadata"].get("deletionTimestamp"):
                        # no grace: virtual-kubelet found the pod already gone from the API
                        # and passed its own copy. Only a deletion with grace 0 is gone before
                        # its kubelet stopped it, and the API server writes that 0 before it
                        # removes the object, so a real kubelet sees it (and applies its floor
                        # of 1 s). Reading it as 30 kept a head deleted with grace 0 serving
                        # for 30 s beside its replacement, in 2 runs of 6.
                        pod["metadata"]["deletionTimestamp"] = now()
                        pod["metadata"]["deletionGracePeriodSeconds"] = 0 if grace is None \
                            else int(grace)
                    elif grace is not None and int(grace) < int(
                            pod["metadata"].get("deletionGracePeriodSeconds", 30)):
                        # deleted again with a shorter grace (`kubectl delete --grace-period`
                        # on a pod already terminating): a kubelet stops it sooner; a longer
                        # one never extends it
                        pod["metadata"]["deletionGracePeriodSeconds"] = int(grace)
                    return True
        return False

    def finish_pod(self, ns: str, name: str, uid: str | None = None) -> None:
        """The pod worker's last word: every container has stopped. The pod stays listed (as
        terminated) until virtual-kubelet has seen it; the API object is its to remove."""
        def fn(p: dict[str, Any]) -> None:
            for s in p.get("status", {}).get("containerStatuses") or []:
                if "terminated" not in s.get("state", {}):
                    s["state"] = {"terminated": {"exitCode": 137, "reason": "Error",
                                                 "finishedAt": now()}}
                s["ready"] = False
                s["started"] = False
            p["_gone"] = time.monotonic()
        with self.store.lock:
            pod = self.store.pods.get((ns, name))
            if pod is not None and (uid is None or pod["metadata"]["uid"] == uid):
                self.store.mutate("pods", ns, name, fn)

    def report(self, node: str) -> list[dict[str, Any]]:
        with self.store.lock:
            for key, pod in list(self.store.pods.items()):
                if pod.get("_gone") and time.monotonic() - pod["_gone"] > 120:
                    del self.store.pods[key]
            return [{"uid": p["metadata"]["uid"], "namespace": p["metadata"]["namespace"],
                     "name": p["metadata"]["name"], "gen": self.store.gen.get(
                         p["metadata"]["uid"], 0), "status": _status(p)}
                    for p in self.store.pods.values() if p["spec"].get("nodeName") == node]


def _status(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's status as the API takes it (the world's fields are the API's names)."""
    st: dict[str, Any] = json.loads(json.dumps(pod.get("status") or {}))
    if pod.get("_gone"):
        st["conditions"] = [dict(c, status="False") if c.get("type") in (
            "Ready", "ContainersReady") else c for c in st.get("conditions") or []]
    return st


class Agent:
    def __init__(self, cfg: dict[str, Any]):
        from raychaos.testbed.access import ApiClient

        self.cfg = cfg
        self.name = world_name(cfg["bed"])
        self.state = Path(cfg["state"])
        self.api = ApiClient(cfg["server"], cfg["token"], Path(cfg["ca"]))
        self.pods = LocalPods(self._fetch)
        self.net = WorldNet(self.name)
        self._hosts = ""
        self._stop = threading.Event()
        self.kubelet: Kubelet | None = None

    def start(self) -> None:
        self.net.setup()
        self._start_registry()
        self.kubelet = Kubelet(self.pods, self.net, self.state, self.name, self.hosts_text,
                               self.event, nice_for=_nice_for)
        self.chaos = ChaosDaemon(
            lambda method, path, body=None, ctype="application/json": self.api.call(
                method, path, body, content_type=ctype), self._pod_netns)
        for node in self.cfg["nodes"]:
            self.net.add_node(node["name"])
            self.kubelet.add_node(node["name"], quantity(node.get("cpu", "2")))
        self.sync_hosts()
        threading.Thread(target=self._loop, daemon=True, name="agent-sync").start()

    def _start_registry(self) -> None:
        """The image registry every pull goes to, in its own namespace on the bed's bridge (a
        real HTTP transfer of ``image_mb`` MiB of layers: a tc on a node's uplink slows it)."""
        import subprocess

        from raychaos.targets.local.registry import server as registry
        from raychaos.testbed.node.runtime import MARKER

        env = dict(os.environ, **{MARKER: f"{self.name}/registry"})
        self.registry = subprocess.Popen(
            ["ip", "netns", "exec", self.net.registry_netns, sys.executable, registry.__file__,
             "serve", self.net.registry_ip, "80", str(self.cfg.get("image_mb", 8))],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        assert self.registry.stdout is not None
        line = self.registry.stdout.readline()
        if b"listening" not in line:
            raise RuntimeError(f"the bed's registry did not start: {line!r}")

    def stop(self) -> None:
        self._stop.set()
        if self.kubelet is not None:
            self.kubelet.stop()
        if getattr(self, "registry", None) is not None:
            self.registry.kill()
            self.registry.wait(10)

    # --- what the kubelet is given -------------------------------------------------------------
    def _fetch(self, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        """An object the pod's env refers to (``secretKeyRef``), read when the container
        starts, as the kubelet reads it."""
        code, body = self.api.call("GET", f"/api/v1/namespaces/{ns}/{kind}/{name}")
        return body if code == 200 and isinstance(body, dict) else None

    def event(self, obj: dict[str, Any], reason: str, message: str, component: str,
              etype: str | None = None, host: str | None = None,
              field_path: str | None = None) -> None:
        body = {"apiVersion": "v1", "kind": "Event",
                **event_body(obj, reason, message, component, etype, host, field_path)}
        meta, ns = obj["metadata"], body["metadata"]["namespace"]
        try:
            self.api.call("POST", f"/api/v1/namespaces/{ns}/events", body)
        except OSError as exc:  # an event lost is not a pod lost
            log.warning("event %s for %s not written: %s", reason, meta["name"], exc)

    def hosts_text(self, ip: str | None = None, hostname: str | None = None) -> str:
        return (self._hosts or self._base_hosts()) + (
            f"{ip} {hostname}\n" if ip and hostname else "")

    def _base_hosts(self) -> str:
        lines = ["127.0.0.1 localhost", f"{self.net.registry_ip} " + " ".join(REGISTRY_HOSTS)]
        code, svcs = self.api.call("GET", "/api/v1/services")
        code2, slices = self.api.call("GET", "/apis/discovery.k8s.io/v1/endpointslices")
        if code != 200 or code2 != 200:
            return self._hosts or "\n".join(lines) + "\n"
        addrs: dict[tuple[str, str], list[tuple[bool, str]]] = {}
        for es in slices.get("items") or []:
            owner = (es["metadata"]["namespace"],
                     (es["metadata"].get("labels") or {}).get("kubernetes.io/service-name", ""))
            for ep in es.get("endpoints") or []:
                ready = (ep.get("conditions") or {}).get("ready") is not False
                addrs.setdefault(owner, []).extend((ready, a) for a in ep.get("addresses") or [])
        for svc in sorted(svcs.get("items") or [], key=lambda s: (
                s["metadata"]["namespace"], s["metadata"]["name"])):
            ns, name = svc["metadata"]["namespace"], svc["metadata"]["name"]
            cands = sorted(addrs.get((ns, name), []), key=lambda x: (not x[0], x[1]))
            if cands:
                lines.append(f"{cands[0][1]} {name}.{ns}.svc.cluster.local {name}.{ns}.svc "
                             f"{name}.{ns} {name}")
        return "\n".join(lines) + "\n"

    def sync_hosts(self) -> None:
        base = self._base_hosts()
        if base == self._hosts:
            return
        self._hosts = base
        self.net.write_hosts(base, [n.netns for n in self.net.nodes.values()])
        assert self.kubelet is not None
        nodes = {n.netns for n in self.net.nodes.values()}
        for wk in list(self.kubelet.workers.values()):
            if wk.netns and wk.ip and wk.netns not in nodes:
                self.net.write_hosts(base + f"{wk.ip} {wk.name}\n", [wk.netns])

    def _pod_netns(self) -> list[tuple[str, str, dict[str, str], str, str]]:
        """(namespace, name, labels, netns, ip) of each pod in a network namespace of its own."""
        assert self.kubelet is not None
        nodes = {n.netns for n in self.net.nodes.values()}
        out = []
        for wk in list(self.kubelet.workers.values()):
            pod = wk.pod()
            if pod is not None and wk.netns and wk.ip and wk.netns not in nodes:
                out.append((pod["metadata"]["namespace"], pod["metadata"]["name"],
                            dict(pod["metadata"].get("labels") or {}), wk.netns, wk.ip))
        return out

    def _loop(self) -> None:
        tick = 0
        while not self._stop.wait(0.25):
            tick += 1
            try:
                assert self.kubelet is not None
                self.kubelet.sync()
                self.sync_hosts()
                if tick % 2 == 0:
                    self.chaos.reconcile()
            except Exception:  # noqa: BLE001 - one bad step must not end the node
                log.exception("agent sync failed")

    # --- what virtual-kubelet asks -------------------------------------------------------------
    def container(self, uid: str, name: str, previous: bool) -> dict[str, Any] | None:
        assert self.kubelet is not None
        w = self.kubelet.workers.get(uid)
        if w is None:
            return None
        c = w.containers.get(name)
        n = w.state.get(name, {}).get("restarts", 0) - (1 if previous else 0)
        path = w.dir / f"{name}-{n}.log"
        pid = c.init_pid() if c is not None and not previous else None
        return {"pid": pid, "log": str(path) if n >= 0 and path.exists() else "",
                "env": c.env if c is not None else {}}


def _nice_for(pod: dict[str, Any]) -> int:
    """Workers yield CPU to the head on this shared box (see the world's note on it)."""
    kind = (pod["metadata"].get("labels") or {}).get("ray.io/node-type")
    return 5 if kind == "worker" else -5 if kind == "head" else 0


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    #: socketserver's default backlog is 5: when the agent was slow to accept (a busy box),
    #: the kubelet's next connections were refused at once ("connect: resource temporarily
    #: unavailable" on a Unix socket) and port-forwards to running pods failed as "no running
    #: container". A container runtime's socket listens with the system's maximum.
    request_queue_size = socket.SOMAXCONN


def _handler(agent: Agent) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            log.debug(format, *args)

        def _send(self, code: int, body: Any) -> None:
            raw = json.dumps(body).encode() if not isinstance(body, bytes) else body
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _body(self) -> Any:
            n = int(self.headers.get("Content-Length") or 0)
            return json.loads(self.rfile.read(n)) if n else {}

        def do_GET(self) -> None:  # noqa: N802
            url = urlparse(self.path)
            q = {k: v[-1] for k, v in parse_qs(url.query).items()}
            parts = url.path.strip("/").split("/")
            if parts == ["pods"]:
                return self._send(200, {"pods": agent.pods.report(q.get("node", ""))})
            if len(parts) == 3 and parts[0] == "containers":
                info = agent.container(parts[1], parts[2], q.get("previous") == "1")
                if info is None:
                    return self._send(404, {"error": f"no pod {parts[1]} on this agent"})
                return self._send(200, info)
            return self._send(404, {"error": f"no route {url.path}"})

        def do_PUT(self) -> None:  # noqa: N802
            parts = urlparse(self.path).path.strip("/").split("/")
            body = self._body()
            if len(parts) == 2 and parts[0] == "pods":
                agent.pods.put(body["node"], body["pod"])
                return self._send(200, {})
            return self._send(404, {"error": "no route"})

        def do_DELETE(self) -> None:  # noqa: N802
            parts = urlparse(self.path).path.strip("/").split("/")
            body = self._body()
            if len(parts) == 2 and parts[0] == "pods":
                if agent.pods.delete(parts[1], body.get("grace")):
                    return self._send(200, {})
                return self._send(404, {"error": f"pod {parts[1]} is not on this agent"})
            return self._send(404, {"error": "no route"})

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m raychaos.testbed.node.agent")
    parser.add_argument("config", help="the bed's agent config (JSON)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    cfg = json.loads(Path(args.config).read_text())
    agent = Agent(cfg)
    agent.start()
    sock = Path(cfg["socket"])
    if sock.exists():
        sock.unlink()
    server = _Server(str(sock), _handler(agent))
    os.chmod(sock, 0o600)

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"raychaos-agent: serving {sock} for nodes "
          f"{', '.join(n['name'] for n in cfg['nodes'])}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
