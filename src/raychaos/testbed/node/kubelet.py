"""The kubelet of the world's real nodes: runs each bound pod's containers as real processes
(see ``runtime.py``) and reports them through the pod's status, as a kubelet does.

Per pod, one worker thread: make the sandbox (a network namespace on the node's bridge, or the
node's own namespace for ``hostNetwork``), pull each image from the world registry *from the
node's namespace* (so a tc on the node's uplink slows it; events ``Pulling`` then ``Pulled``
"Successfully pulled image "X" in 1.234s (1.5s including waiting). Image size: N bytes.";
pulls are serialized per node, as ``serializeImagePulls`` does; ``IfNotPresent`` pulls once per
node), run init containers to completion, start the containers, restart a container whose main
process died when ``restartPolicy`` allows (``restartCount`` up, same pod), run readiness
probes (httpGet/tcpSocket/exec), and on deletion send SIGTERM to each container's PID 1, wait
up to the grace period, then SIGKILL the PID namespace and remove the pod object.
"""

from __future__ import annotations

import http.client
import logging
import re
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from raychaos.targets.local.cpu import PREFIX, cpu_groups, shares_for
from raychaos.targets.local.registry.server import pull_image
from raychaos.testbed.node.objects import quantity
from raychaos.testbed.node.podworker import PodWorker

__all__ = ["Events", "Kubelet", "PodStore", "go_duration", "normalize_image", "world_cpu_prefix"]


class PodStore(Protocol):
    """Where the kubelet reads its pods and writes their status: the world's API store, or
    the bed's agent (pods as virtual-kubelet handed them, status read back by it).
    ``store`` has ``list(kind, copy_=False)``, ``get(kind, ns, name)`` and
    ``mutate(kind, ns, name, fn)``; ``finish_pod`` is the kubelet's last word on a pod."""

    store: Any

    def finish_pod(self, ns: str, name: str, uid: str | None = None) -> None: ...


class Events(Protocol):
    """Writes one Event as the kubelet does (reason, message, type, node, container path)."""

    def __call__(self, obj: dict[str, Any], reason: str, message: str, component: str,
                 etype: str | None = None, host: str | None = None,
                 field_path: str | None = None) -> None: ...

log = logging.getLogger("world.kubelet")


def world_cpu_prefix(world: str) -> str:
    """What the world's node groups are named with: a CPU group per node (its capacity), side
    by side at the top (an idle node weighs nothing), a group per pod below its node's (the
    pod's requests) — how a kubelet gives pods their CPU requests, so a storm on the workers'
    nodes cannot starve the head's node (:mod:`raychaos.targets.local.cpu`)."""
    return f"{PREFIX}world-{world}--"


def go_duration(seconds: float) -> str:
    """A duration as Go prints it, truncated to milliseconds: 123ms, 12.3s, 1m23.456s."""
    ms = int(seconds * 1000)
    if ms < 1000:
        return f"{ms}ms"
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s = f"{rest / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    return (f"{h}h" if h else "") + (f"{m}m" if h or m else "") + s


def normalize_image(image: str) -> str:
    """``rayproject/ray:2.60.0`` → ``registry-1.docker.io/rayproject/ray:2.60.0`` (a tag added
    when missing), as a container runtime resolves a reference."""
    first = image.split("/", 1)[0]
    if "/" not in image or not ("." in first or ":" in first or first == "localhost"):
        image = "registry-1.docker.io/" + (image if "/" in image else "library/" + image)
    if ":" not in image.rsplit("/", 1)[-1]:
        image += ":latest"
    return image


class Kubelet:
    def __init__(self, api: PodStore, net: Any, state_dir: Path, world: str, hosts_text: Any,
                 events: Events, nice_for: Any = None, restart_backoff_s: float = 10.0,
                 serial_starts: bool = True):
        self.api, self.net, self.state_dir, self.world = api, net, Path(state_dir), world
        self.events = events
        self.hosts_text = hosts_text
        self.nice_for = nice_for or (lambda pod: 0)
        self.restart_backoff_s = restart_backoff_s
        self.serial_starts = serial_starts
        self.nodes: set[str] = set()
        self.workers: dict[str, PodWorker] = {}
        self.images: dict[str, set[str]] = {}
        self.pull_locks: dict[str, threading.Lock] = {}
        self.start_lock = threading.Lock()
        self.starting: dict[str, float] = {}  # pod uid -> when its Ray container started
        self.lock = threading.Lock()
        self.stopping = False
        self.cpu = cpu_groups()  # None: not root / no CPU controller (pods run ungrouped)

    # --- CPU: a group per node (its capacity) and per pod (its request), as a kubelet does ---
    def add_node(self, name: str, cpus: float = 2.0) -> None:
        if self.cpu is not None:
            self.cpu.ensure(f"{world_cpu_prefix(self.world)}{name}", shares_for(cpus))
        self.nodes.add(name)
        self.images.setdefault(name, set())
        self.pull_locks.setdefault(name, threading.Lock())

    def sync(self) -> None:
        if self.stopping:
            return
        pods = [p for p in self.api.store.list("pods", copy_=False)
                if p["spec"].get("nodeName") in self.nodes]
        with self.lock:
            for p in pods:
                uid = p["metadata"]["uid"]
                if uid not in self.workers:
                    w = PodWorker(self, p["metadata"]["namespace"], p["metadata"]["name"], uid,
                                  p["spec"]["nodeName"])
                    self.workers[uid] = w
                    w.start()
            for uid in [u for u, w in self.workers.items() if not w.is_alive() and w.done]:
                self.workers.pop(uid)

    def pod_cpu_group(self, pod: dict[str, Any], node: str) -> tuple[Any, str] | None:
        """The pod's group under its node's, weighted by the pod's CPU requests. A pod with
        none (BestEffort) weighs one CPU here, not the kubelet's 2 shares: this box's tool
        pods (tc, iperf3) would otherwise wait seconds behind a task storm."""
        if self.cpu is None:
            return None
        cpus = sum(quantity(((c.get("resources") or {}).get("requests") or {}).get("cpu", 0))
                   for c in pod["spec"]["containers"]) or 1.0
        group = f"{world_cpu_prefix(self.world)}{node}/{pod['metadata']['uid']}"
        self.cpu.ensure(group, shares_for(cpus))
        return self.cpu, group

    def remove_pod_cpu_group(self, node: str, uid: str) -> None:
        if self.cpu is not None:
            self.cpu.remove(f"{world_cpu_prefix(self.world)}{node}/{uid}")

    def stop(self) -> None:
        self.stopping = True
        with self.lock:
            workers = list(self.workers.values())
        for w in workers:
            w.abort = True
        for w in workers:
            w.join(timeout=30)

    # --- for the API server ------------------------------------------------------------------
    def worker(self, pod: dict[str, Any]) -> PodWorker | None:
        return self.workers.get(pod["metadata"]["uid"])

    def pod_address(self, pod: dict[str, Any]) -> str | None:
        ip = pod.get("status", {}).get("podIP")
        return str(ip) if ip else None

    def exec(self, pod: dict[str, Any], container: str, command: list[str], stdin: bool = False,
             tty: bool = False) -> tuple[Any, str | None]:
        w = self.worker(pod)
        if w is None:
            return None, None  # not this kubelet's pod
        c = w.containers.get(container)
        proc = c.exec(command, stdin) if c else None
        if proc is None:
            return None, f'unable to upgrade connection: container not found ("{container}")'
        return proc, None

    def log(self, pod: dict[str, Any], container: str, previous: bool) -> str | None:
        w = self.worker(pod)
        if w is None:
            return None
        n = w.state.get(container, {}).get("restarts", 0) - (1 if previous else 0)
        path = w.dir / f"{container}-{n}.log"
        return path.read_text(errors="replace") if path.exists() else None

    def pull(self, node: str, image: str, policy: str, pod: dict[str, Any], cname: str) -> None:
        """Pull ``image`` on ``node`` as the kubelet does; raises RuntimeError on failure."""
        fp = f"spec.containers{{{cname}}}"
        host = self.net.nodes[node]
        if policy == "Never" or (policy == "IfNotPresent" and image in self.images[node]):
            self.events(pod, "Pulled", f'Container image "{image}" already '
                         f"present on machine", "kubelet", host=node, field_path=fp)
            return
        self.events(pod, "Pulling", f'Pulling image "{image}"', "kubelet", host=node,
                     field_path=fp)
        t0 = time.monotonic()
        with self.pull_locks[node]:
            t1 = time.monotonic()
            dest = self.state_dir / "nodes" / node / "images" / re.sub(r"[^\w.-]", "_", image)
            try:
                got = pull_image(normalize_image(image), dest, netns=host.netns, timeout=900)
            except Exception as exc:  # noqa: BLE001 - reported as the kubelet does
                self.events(pod, "Failed", f'Failed to pull image "{image}": {exc}',
                             "kubelet", "Warning", host=node, field_path=fp)
                raise RuntimeError(f"ErrImagePull: {exc}") from exc
            finally:
                shutil.rmtree(dest, ignore_errors=True)
            took = time.monotonic() - t1
        self.images[node].add(image)
        self.events(pod, "Pulled", f'Successfully pulled image "{image}" in '
                     f"{go_duration(took)} ({go_duration(time.monotonic() - t0)} including "
                     f"waiting). Image size: {got['bytes']} bytes.", "kubelet", host=node,
                     field_path=fp)


def http_status(ip: str, port: int, path: str, timeout: float) -> int | None:
    """The HTTP status a GET answered with; None when nothing answered in time."""
    try:
        conn = http.client.HTTPConnection(ip, port, timeout=timeout)
        conn.request("GET", path)
        status = conn.getresponse().status
        conn.close()
        return status
    except (OSError, http.client.HTTPException):
        return None


def tcp_ok(ip: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False
