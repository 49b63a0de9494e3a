"""One KubeRay RayCluster as the harness sees it: its pods (an informer), its head Service, the
port-forwards to its dashboard and Serve, and Ray's own view of its nodes.

Why a handle: the target's observation methods, the Jobs API, driver placement and the faults
all need the same few facts — which pod is the head *now*, which workers there are, the name of
the head Service (KubeRay publishes it in ``status.head.serviceName`` and honours
``headGroupSpec.headService.metadata.name``; ``<cluster>-head-svc`` is only the default) — and
none of them may cost an API request per monitor sample.

Names: a fault argument may name a pod by its name, ``head``, or ``worker-N`` — the N-th worker
pod counting GPU workers first, then by group and age, as the local target numbers its workers
(``worker-1`` is the GPU worker in both of the catalog's clusters).
"""

from __future__ import annotations

import itertools
from typing import Any

from raychaos.errors import NothingMatched, TargetUnavailable
from raychaos.targets.base import NodeInfo
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.dashboard import DRIVER_SHARE, Dashboard, auth_token
from raychaos.targets.kubernetes.forward import LocalForward
from raychaos.targets.kubernetes.gcs import GcsObserver, gcs_port
from raychaos.targets.kubernetes.informer import PodInformer
from raychaos.targets.kubernetes.safety import gpu_count, is_daemonset_pod

__all__ = ["RayClusterHandle", "gcs_ft_of", "is_running", "pod_ready", "tc_rate"]

DASHBOARD_PORT, SERVE_PORT = 8265, 8000


def gcs_ft_of(raycluster: dict[str, Any]) -> dict[str, Any]:
    """Whether a RayCluster configures GCS fault tolerance, and how."""
    spec = raycluster.get("spec", {})
    notes = raycluster.get("metadata", {}).get("annotations") or {}
    if spec.get("gcsFaultToleranceOptions"):
        return {"enabled": True, "via": "spec.gcsFaultToleranceOptions"}
    if str(notes.get("ray.io/ft-enabled", "")).lower() == "true":
        return {"enabled": True, "via": "annotation ray.io/ft-enabled"}
    return {"enabled": False, "via": None}


def tc_rate(bps: float) -> str:
    """tc's rate syntax for bits per second (kbit below 1 Mbit)."""
    return f"{max(1, round(bps / 1e6))}mbit" if bps >= 1e6 else f"{max(1, round(bps / 1e3))}kbit"


def pod_ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


def is_running(pod: dict[str, Any]) -> bool:
    """Not terminating, Running, with an address: worth a connection attempt."""
    st = pod.get("status") or {}
    return "deletionTimestamp" not in pod["metadata"] and st.get("phase") == "Running" \
        and bool(st.get("podIP"))


def _match(selector: dict[str, str], labels: dict[str, str] | None) -> bool:
    labels = labels or {}
    return all(labels.get(k) == v for k, v in selector.items())


class RayClusterHandle:
    def __init__(self, api: ApiSession, ns: str, name: str, raycluster: dict[str, Any],
                 dashboard_url: str | None = None):
        self.api, self.ns, self.name, self.raycluster = api, ns, name, raycluster
        self.informer = PodInformer(api, ns, f"ray.io/cluster={name}").start()
        self._head_selector: dict[str, str] | None = None
        self._dashboard_port = DASHBOARD_PORT
        self.forwards: dict[str, LocalForward] = {}
        self.given_url = dashboard_url
        self.dashboard = Dashboard(self._dashboard_url)
        # the node table on a connection of its own: a slow one that times out (and so closes
        # its connection) must not cost the next GCS health check a new port-forward stream
        self.node_table = Dashboard(self._dashboard_url)
        self.token_source = "not looked up yet"
        self._serve_rr = itertools.count()
        self.serve_proxies: list[str] = []  # pod IPs Serve reported proxies on
        self.gcs = GcsObserver(self)  # the monitor's question, over gRPC to the head's GCS

    def close(self) -> None:
        self.gcs.close()
        self.informer.stop()
        for fwd in self.forwards.values():
            fwd.close()

    # --- pods ----------------------------------------------------------------------------------
    def pods(self) -> list[dict[str, Any]]:
        """The cluster's Ray pods (DaemonSet pods excluded), from the informer."""
        return [p for p in self.informer.pods() if not is_daemonset_pod(p)]

    def head_pod(self) -> dict[str, Any] | None:
        heads = [p for p in self.pods() if p["metadata"]["labels"].get("ray.io/node-type")
                 == "head" and "deletionTimestamp" not in p["metadata"]]
        heads.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
        return heads[0] if heads else None

    def workers(self) -> list[dict[str, Any]]:
        """Live worker pods, in ``worker-N`` order: GPU workers first, then group, then age."""
        live = [p for p in self.pods() if p["metadata"]["labels"].get("ray.io/node-type")
                == "worker" and "deletionTimestamp" not in p["metadata"]]
        return sorted(live, key=lambda p: (-gpu_count(p), p["metadata"]["labels"].get(
            "ray.io/group", ""), p["metadata"].get("creationTimestamp", ""),
            p["metadata"]["name"]))

    def pod_named(self, name: str) -> dict[str, Any]:
        """A pod by its name, ``head`` or ``worker-N``; NothingMatched names what exists."""
        workers = self.workers()
        if name == "head":
            pod = self.head_pod()
        elif name.startswith("worker-") and name[7:].isdigit():
            n = int(name[7:])
            pod = workers[n - 1] if 0 < n <= len(workers) else None
        else:
            pod = next((p for p in self.pods() if p["metadata"]["name"] == name), None)
        if pod is None:
            known = ["head"] + [f"worker-{i} ({p['metadata']['name']})"
                                for i, p in enumerate(workers, 1)]
            raise NothingMatched(f"kubernetes: no pod {name!r} in RayCluster "
                                 f"{self.ns}/{self.name} (known: {', '.join(known)})")
        return pod

    def pool_nodes(self) -> list[str]:
        """Nodes the cluster's pods run on, and those its groups' nodeSelectors allow (where
        a replacement may be scheduled)."""
        names = {(p.get("spec") or {}).get("nodeName") for p in self.pods()} - {None, ""}
        spec = self.raycluster.get("spec") or {}
        for group in [spec.get("headGroupSpec") or {}, *(spec.get("workerGroupSpecs") or [])]:
            sel = ((group.get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
            if sel:
                names |= {n["metadata"]["name"] for n in self.api.read(
                    self.api.core.list_node, label_selector=",".join(
                        f"{k}={v}" for k, v in sel.items()))["items"]}
        return sorted(str(n) for n in names if n)

    def peer_for(self, victims: list[dict[str, Any]]) -> dict[str, Any]:
        """A Running Ray pod outside ``victims`` to measure (and flood) from."""
        names = {v["metadata"]["name"] for v in victims}
        for pod in [*self.workers(), self.head_pod()]:
            if pod and pod["metadata"]["name"] not in names and is_running(pod):
                return pod
        raise NothingMatched(f"saturate_network: every Ray pod of {self.ns}/{self.name} is "
                             f"targeted; leave one out to measure against")

    # --- the head Service, the dashboard, Serve ------------------------------------------------
    def head_service_name(self) -> str:
        status = (self.raycluster.get("status") or {}).get("head") or {}
        spec = ((self.raycluster.get("spec") or {}).get("headGroupSpec") or {}).get(
            "headService") or {}
        return str(status.get("serviceName") or (spec.get("metadata") or {}).get("name")
                   or f"{self.name}-head-svc")

    def _head_target(self) -> tuple[dict[str, str], int]:
        """The head Service's selector and the dashboard's target port (read once)."""
        if self._head_selector is None:
            svc = self.api.read_or_none(self.api.core.read_namespaced_service,
                                        self.head_service_name(), self.ns)
            selector = dict(((svc or {}).get("spec") or {}).get("selector") or {}) or {
                "ray.io/cluster": self.name, "ray.io/node-type": "head"}
            for port in ((svc or {}).get("spec") or {}).get("ports") or []:
                if port.get("name") == "dashboard" or port.get("port") == DASHBOARD_PORT:
                    target = port.get("targetPort", port.get("port"))
                    self._dashboard_port = int(target) if str(target).isdigit() else \
                        DASHBOARD_PORT
            self._head_selector = selector
        return self._head_selector, self._dashboard_port

    def resolve_dashboard(self) -> tuple[str, int]:
        """The pod behind the head Service now (Running, newest), and the dashboard port."""
        selector, port = self._head_target()
        pods = [p for p in self.pods() if is_running(p) and _match(selector,
                                                                   p["metadata"].get("labels"))]
        if not pods:
            raise TargetUnavailable(f"kubernetes: no Running pod behind Service "
                                    f"{self.ns}/{self.head_service_name()}")
        pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
        return pods[0]["metadata"]["name"], port

    def resolve_serve(self) -> tuple[str, int]:
        """A pod with a Serve proxy, workers first (they keep serving while the head is down),
        round-robin: pods KubeRay labelled ``ray.io/serve=true``, else those Serve reported."""
        running = [p for p in self.pods() if is_running(p)]
        labelled = [p for p in running if p["metadata"]["labels"].get("ray.io/serve") == "true"]
        reported = [p for p in running if p["status"].get("podIP") in self.serve_proxies]
        workers = [p for p in running if p["metadata"]["labels"].get("ray.io/node-type")
                   == "worker"]
        for group in (labelled, reported, workers):
            if group:
                group.sort(key=lambda p: (p["metadata"]["labels"].get("ray.io/node-type")
                                          == "head", p["metadata"]["name"]))
                preferred = [p for p in group if p["metadata"]["labels"].get(
                    "ray.io/node-type") != "head"] or group
                return preferred[next(self._serve_rr) % len(preferred)]["metadata"]["name"], \
                    SERVE_PORT
        raise TargetUnavailable(f"kubernetes: no Running pod of RayCluster {self.ns}/"
                                f"{self.name} to reach Serve on")

    def resolve_gcs(self) -> tuple[str, int]:
        """The head pod of now (as for the dashboard) and its GCS port."""
        pod, _port = self.resolve_dashboard()
        return pod, gcs_port(self.raycluster)

    def forward(self, kind: str) -> LocalForward:
        if kind not in self.forwards:
            resolve = {"dashboard": self.resolve_dashboard, "gcs": self.resolve_gcs}.get(
                kind, self.resolve_serve)
            self.forwards[kind] = LocalForward(self.api, self.ns, resolve, kind).start()
        return self.forwards[kind]

    def _dashboard_url(self) -> str:
        return self.given_url or self.forward("dashboard").url

    def find_token(self) -> None:
        token, self.token_source = auth_token(self.api, self.ns, self.raycluster,
                                              self.head_pod())
        self.dashboard.token = self.node_table.token = token

    def note_serve_proxies(self) -> None:
        """Remember the pods Serve runs proxies on (from the dashboard's Serve API)."""
        try:
            reply = self.dashboard.json("GET", "/api/serve/applications/", timeout=5)
        except Exception:  # noqa: BLE001 - a hint for resolve_serve, not required
            return
        self.serve_proxies = [p.get("node_ip") for p in (reply.get("proxies") or {}).values()
                              if p.get("status") in ("HEALTHY", None)]

    # --- Ray's view ----------------------------------------------------------------------------
    def nodes(self, timeout: float) -> list[NodeInfo]:
        """Ray's node table with each node named by the pod at its address (a DEAD one too:
        a pod cut off, or restarted in place, keeps its address — "which pod died" is what a
        reader wants; with no such pod, Ray's own name for it); a node whose pod is
        terminating (evicted, deleted) reads DRAINING."""
        rows = self.node_table.ray_nodes(timeout)
        by_ip = {p["status"].get("podIP"): p for p in self.pods() if p.get("status")}
        out = []
        for r in rows:
            ip, state = str(r.get("node_ip", "")), str(r.get("state", "DEAD"))
            at = by_ip.get(ip)
            pod = at if state == "ALIVE" else None
            if pod is not None and "deletionTimestamp" in pod["metadata"]:
                state = "DRAINING"
            res = {k: float(v) for k, v in (r.get("resources_total") or {}).items()
                   if isinstance(v, int | float)}
            labels = {**((pod or {}).get("metadata", {}).get("labels") or {}),
                      **{str(k): str(v) for k, v in (r.get("labels") or {}).items()}}
            out.append(NodeInfo(node_id=str(r.get("node_id", "")),
                                name=at["metadata"]["name"] if at else str(
                                    r.get("node_name") or ip),
                                address=ip, state=state, is_head=bool(r.get("is_head_node")),
                                gpus=res.get("GPU", 0.0), cpus=res.get("CPU", 0.0),
                                labels=labels, resources=res))
        return out

    def driver_placement(self) -> tuple[dict[str, float] | None, dict[str, Any]]:
        """Resources that put a job's driver on a worker — a CPU worker where there is one —
        by that node's ``node:<ip>`` resource; and what was chosen, for the evidence."""
        try:
            rows = self.dashboard.ray_nodes(10.0)
        except Exception as exc:  # noqa: BLE001 - placement is best effort, and said so
            return None, {"placed_by": "ray", "why": f"Ray's node table unreadable: {exc}"}
        by_ip = {p["status"].get("podIP"): p for p in self.pods() if p.get("status")}
        workers = [r for r in rows if r.get("state") == "ALIVE" and not r.get("is_head_node")]
        workers.sort(key=lambda r: (float((r.get("resources_total") or {}).get("GPU", 0)),
                                    str(r.get("node_ip"))))
        for r in workers:
            key = f"node:{r.get('node_ip')}"
            if key in (r.get("resources_total") or {}):
                pod = by_ip.get(r.get("node_ip")) or {}
                return {key: DRIVER_SHARE}, {
                    "placed_by": key, "pod": (pod.get("metadata") or {}).get("name"),
                    "node": (pod.get("spec") or {}).get("nodeName"),
                    "ray_node_id": r.get("node_id")}
        return None, {"placed_by": "ray", "why": "no ALIVE worker node: Ray places the driver"}
