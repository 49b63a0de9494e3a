"""The Kubernetes target: a KubeRay ``RayCluster`` reached with the official ``kubernetes`` client.

Why it exists: faults and probes are written once against the Target protocol; this class maps
them onto the Kubernetes API and the cluster's Ray dashboard. ``connect`` checks, before any
fault, that the API answers, the RayCluster exists and we may read it — each failure is one
sentence — and starts the pod informer (one list, then a watch: no list per monitor sample).
The dashboard and Serve are reached through raychaos's own port-forward, re-resolved per
connection, so nothing needs to be started by the user and a head replacement does not cut the
harness off. The mechanics live in ``head``, ``drain``, ``registry`` and ``network``; the cluster
handle (pods, head Service, Ray's node table, driver placement) in ``raycluster``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from raychaos.config.settings import KubernetesSpec
from raychaos.errors import (
    ConfigError,
    KubeApiError,
    NothingMatched,
    RollbackFailed,
    TargetUnavailable,
)
from raychaos.targets.base import NodeInfo, Observation, Refusal, RunLock
from raychaos.targets.kubernetes import drain as k8s_drain
from raychaos.targets.kubernetes import head as k8s_head
from raychaos.targets.kubernetes import network as k8s_network
from raychaos.targets.kubernetes import rayfaults, rayobserve
from raychaos.targets.kubernetes import registry as k8s_registry
from raychaos.targets.kubernetes import review as k8s_review
from raychaos.targets.kubernetes import undo as k8s_undo
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.events import pod_changes, pull_events
from raychaos.targets.kubernetes.incluster import use_service_dns
from raychaos.targets.kubernetes.informer import Informer
from raychaos.targets.kubernetes.raycluster import (
    RayClusterHandle,
    gcs_ft_of,
    is_running,
    tc_rate,
)
from raychaos.targets.kubernetes.safety import (
    check_namespace,
    gpu_count,
    unsupported,
)
from raychaos.targets.kubernetes.scrape import PodScraper
from raychaos.targets.kubernetes.workload import Workload

__all__ = ["KubernetesTarget"]

#: Where a KubeRay Ray container exports Prometheus metrics when no port is named ``metrics``
METRICS_PORT = 8080


class KubernetesTarget:
    """A KubeRay RayCluster in one namespace. See :class:`raychaos.targets.base.Target`."""

    kind = "kubernetes"

    def __init__(self, spec: KubernetesSpec, run_id: str | None = None):
        self.spec = spec
        self.ns = spec.namespace
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.cluster = spec.cluster or (spec.name if spec.kind == "raycluster" else "") or ""
        self.workload: Workload | None = None  # the RayJob/RayService named (workload.py)
        self.api: ApiSession | None = None
        self.handle: RayClusterHandle | None = None
        self.raycluster: dict[str, Any] = {}
        self.drivers: dict[str, dict[str, Any]] = {}
        self._log_offsets: dict[str, int] = {}
        self.log_counts: dict[tuple[str, tuple[str, ...]], dict[str, Any]] = {}  # rayobserve
        self._pulled: Informer | None = None
        # a test bed on this machine: the reader of its CPU (False: not a bed; None: not asked)
        self._bed_cpu: Callable[[], float | None] | Literal[False] | None = None
        self._emitted: set[str] = set()
        self._pod_snapshot: dict[str, dict[str, Any]] | None = None
        self._metrics = PodScraper(spec.metrics_scrapes_per_s)

    # --- lifecycle -----------------------------------------------------------------------------
    def connect(self) -> None:
        check_namespace(self.ns, list(self.spec.allowed_namespaces))
        api = ApiSession.connect(self.spec.kubeconfig, self.spec.context, self.spec.dry_run)
        where = f"kubernetes API at {api.host}"
        try:
            if self.spec.kind != "raycluster" and self.spec.name:
                self.workload = Workload(api, self.ns, self.spec.kind, self.spec.name,
                                         self.spec.dashboard_url)
                self.cluster = self.workload.resolve()
            if not self.cluster:
                found = api.read(api.custom.list_namespaced_custom_object, "ray.io", "v1",
                                 self.ns, "rayclusters")["items"]
                if len(found) != 1:
                    raise (TargetUnavailable if not found else ConfigError)(
                        f"target.kubernetes.cluster: {len(found)} RayClusters in namespace "
                        f"{self.ns} ({', '.join(f['metadata']['name'] for f in found) or 'none'})"
                        f"; name one")
                self.cluster = found[0]["metadata"]["name"]
            self.raycluster = api.read(api.custom.get_namespaced_custom_object, "ray.io", "v1",
                                       self.ns, "rayclusters", self.cluster)
            handle = use_service_dns(RayClusterHandle(api, self.ns, self.cluster,
                                                      self.raycluster, self.spec.dashboard_url))
            self.handle = handle
            handle.find_token()
        except KubeApiError as exc:
            self._close(api)
            if exc.status == 404:
                raise TargetUnavailable(f"{where}: no RayCluster {self.cluster!r} in namespace "
                                        f"{self.ns} (or the ray.io/v1 CRD is not installed)"
                                        ) from exc
            if exc.status in (401, 403):
                raise TargetUnavailable(f"{where}: HTTP {exc.status}, not allowed to read "
                                        f"rayclusters in namespace {self.ns}: "
                                        f"{exc.message}") from exc
            raise TargetUnavailable(f"{where}: HTTP {exc.status} {exc.reason}") from exc
        except BaseException:
            self._close(api)  # e.g. ConfigError: several RayClusters and none named
            raise
        self.api = api

    def _close(self, api: ApiSession) -> None:
        if self.workload is not None:
            self.workload.close()
        if self.handle is not None:
            self.handle.close()
            self.handle = None
        if self._pulled is not None:
            self._pulled.stop()
            self._pulled = None
        api.close()

    def close(self) -> None:
        if self.api is not None:
            self._close(self.api)
            self.api = None

    def ensure_up(self, say: Callable[[str], None]) -> bool:  # a RayCluster must exist
        return False

    def down(self) -> dict[str, Any]:  # raychaos never deletes a user's RayCluster
        return {}

    def refusals(self, fault: str, args: Mapping[str, Any]) -> list[Refusal]:
        return unsupported(fault, args)

    def preflight(self, fault: str, args: Mapping[str, Any]) -> None:
        handle = self._handle()
        if fault == "drain_gpu_nodes":
            self.select_drain_victims(int(args.get("count", 1)), args.get("selector"))
        elif fault == "saturate_network":
            victims = [handle.pod_named(n) for n in args.get("nodes") or ["worker-1"]]
            handle.peer_for(victims)
            if float(args.get("bandwidth_mbit", 50.0) or 0) and \
                    not k8s_network.chaos_mesh_installed(self._api()):
                raise ConfigError("saturate_network: bandwidth_mbit needs Chaos Mesh "
                                  "(CRD networkchaos.chaos-mesh.org) on the cluster; install "
                                  "it, or set bandwidth_mbit: 0 and keep flood: true")
        elif fault == "throttle_registry_pulls":
            for name in args.get("restart_workers") or []:
                handle.pod_named(name)
        rayfaults.preflight(self, fault, args)

    def run_lock(self) -> RunLock:
        """One run at a time on this RayCluster: a coordination.k8s.io Lease next to it."""
        from raychaos.targets.kubernetes.lease import LeaseLock

        return LeaseLock(self._api(), self.ns, self.cluster)

    def _api(self) -> ApiSession:
        if self.api is None:
            raise TargetUnavailable("kubernetes target: connect() was not called")
        return self.api

    def _handle(self) -> RayClusterHandle:
        if self.handle is None or self.api is None:
            raise TargetUnavailable("kubernetes target: connect() was not called")
        return self.handle

    def gcs_ft(self) -> dict[str, Any]:
        """Whether GCS fault tolerance is configured, and how."""
        return gcs_ft_of(self.raycluster)

    def describe(self) -> dict[str, Any]:
        api, handle = self._api(), self._handle()
        groups: dict[str, int] = {}
        for p in handle.workers():
            g = p["metadata"]["labels"].get("ray.io/group", "?")
            groups[g] = groups.get(g, 0) + 1
        gpu_nodes = [n["metadata"]["name"] for n in api.read(api.core.list_node)["items"]
                     if gpu_count(n) > 0]
        fwd = handle.forwards.get("dashboard")
        return {"kind": self.kind, "api": api.host, "namespace": self.ns,
                "context": self.spec.context, "kubeconfig": self.spec.kubeconfig,
                "cluster": self.cluster, "run_id": self.run_id, "gcs_ft": self.gcs_ft(),
                "gcs_fault_tolerance": self.gcs_ft()["enabled"],
                "worker_groups": groups, "gpu_nodes": gpu_nodes, "dry_run": api.gate.dry_run,
                "tls_verify": bool(api.api_client.configuration.verify_ssl),
                "head_service": handle.head_service_name(),
                "dashboard": self.spec.dashboard_url or (
                    f"raychaos port-forward to the pods behind Service {self.ns}/"
                    f"{handle.head_service_name()} (re-resolved per connection)"
                    + (f"; {fwd.stats['connections']} connections, last pod {fwd.last_pod}"
                       if fwd else "")),
                "ray_auth": handle.token_source, "job_drivers": self.drivers,
                "owner": self.owner()}

    def owner(self) -> dict[str, Any]:
        """The RayJob/RayService named, and its status now ({} for a RayCluster)."""
        return self.workload.status() if self.workload is not None else {}

    # --- observation ---------------------------------------------------------------------------
    def nodes(self, timeout: float = 1.0) -> list[NodeInfo]:
        """Ray's node table (the dashboard's state API), each ALIVE node named by its pod."""
        return self._handle().nodes(max(timeout, 1.0))

    def gcs_alive(self, timeout: float = 0.5) -> bool:
        """The dashboard's GCS health check through the port-forward; False when unreachable.
        The dashboard gives the GCS 0.1 s: when it says the GCS missed that (late, not gone),
        the GCS itself is asked over gRPC with ``timeout`` (a slow GCS is alive)."""
        if self.handle is None:
            return False
        up, _why, late = self.handle.dashboard.gcs_health(timeout)
        return up or (late and self.handle.gcs.observe(timeout).up)

    def observe(self, deadline_s: float = 0.1) -> Observation:
        """The GCS asked over gRPC through the port-forward (node table and which raylets
        reported to this incarnation); see :mod:`raychaos.targets.kubernetes.gcs`."""
        if self.handle is None:
            return Observation(False, error="kubernetes target: connect() was not called")
        return self.handle.gcs.observe(max(deadline_s, 0.05))

    def head_identity(self) -> dict[str, Any]:
        head = self._handle().head_pod()
        if head is None:
            raise NothingMatched(f"kubernetes: no head pod of RayCluster {self.ns}/"
                                 f"{self.cluster}")
        return k8s_head.identity(head) | {"namespace": self.ns, "cluster": self.cluster}

    def serve_url(self, port: int = 8000) -> str:
        """Ray Serve through raychaos's port-forward to a pod with a Serve proxy (a worker
        first: it keeps serving while the head is down)."""
        handle = self._handle()
        via_service = self.workload and self.workload.serve_url(lambda: self._handle().pods())
        if via_service:  # a RayService: through <name>-serve-svc, as its clients go
            return via_service
        handle.note_serve_proxies()
        return handle.forward("serve").url

    def metrics_texts(self, timeout: float = 0.5) -> list[str]:
        """Each Running Ray pod's Prometheus metrics (object store, spill, resources), read
        through the API server's pod proxy (``pods/proxy``: nothing else needs to be reachable)
        from the port KubeRay exports them on (the container port named ``metrics``, else
        8080), at most ``metrics_scrapes_per_s`` requests a second (:mod:`.scrape`: a big
        cluster is read in turn); a pod that does not answer is left out."""
        api = self._api()
        running = {p["metadata"]["name"]: p for p in self._handle().pods() if is_running(p)}

        def fetch(name: str) -> str | None:
            port = next((p.get("containerPort") for c in running[name]["spec"]["containers"]
                         for p in c.get("ports") or [] if p.get("name") == "metrics"),
                        METRICS_PORT)
            try:
                return api.read_text(api.core.connect_get_namespaced_pod_proxy_with_path,
                                     f"{name}:{port}", self.ns, "metrics",
                                     _request_timeout=max(timeout, 1.0))
            except (KubeApiError, TargetUnavailable):
                return None

        return self._metrics.scrape(running, fetch)

    def cluster_events(self, since: float) -> list[dict[str, Any]]:
        """Image pulls the kubelet reported (``Pulled`` events) since ``since``, each once, and
        the Ray pods' restarts, replacements and readiness (from the informer: no request)."""
        if self._pulled is None:
            api = self._api()
            self._pulled = Informer(api, api.core.list_namespaced_event, self.ns,
                                    field_selector="reason=Pulled").start()
        fresh = [e for e in pull_events(self._pulled.items(), since - 1.0)
                 if e["uid"] not in self._emitted]
        self._emitted |= {e.pop("uid") for e in fresh}
        if self.workload is not None:  # its status; a switch to another RayCluster
            owned, moved = self.workload.events(self._handle())
            if moved is not None:
                self._handle().close()
                self.handle, self.cluster, self._pod_snapshot = moved, moved.name, None
                self.raycluster = moved.raycluster
            fresh += owned
        changes, self._pod_snapshot = pod_changes(self._pod_snapshot, self._handle().pods(),
                                                  time.time())
        return sorted(fresh + changes, key=lambda e: e["ts"])

    (gcs_call_ms, node_resources, raylet_alive, ray_log_counts, network_counters,
     job_history) = rayobserve.METHODS
    node_env, restart_with_env, cut_network, restore_network = rayfaults.METHODS

    def review_objects(self) -> list[dict[str, Any]]:  # the RayCluster, PDBs, pods
        return k8s_review.live_objects(self._api(), self.ns, self.raycluster)

    def sut_cpu_seconds(self) -> float | None:
        """The CPU of a test bed on this machine (``raychaos testbed``: its pods and its
        control plane are the system under test); None for a cluster on its own nodes."""
        if self._bed_cpu is None:
            from raychaos.testbed.sutcpu import local_sut

            self._bed_cpu = local_sut(self._api().host) or False
        return self._bed_cpu() if self._bed_cpu else None

    def node_storage(self) -> list[dict[str, Any]]:  # not observed in pods: review reads specs
        return [{"node": p["metadata"]["name"], "observed": False} for p in self._handle().pods()]

    def resize_dev_shm(self, *, nodes: list[str], size_mb: float,
                       record: dict[str, Any]) -> dict[str, Any]:
        raise ConfigError("resize_dev_shm: refused on the kubernetes target (see refusals)")

    def dashboard_url(self) -> str:
        return self._handle().dashboard.url

    # --- jobs: the Ray Jobs REST API through the dashboard -------------------------------------
    def submit_job(self, entrypoint: str, *, working_dir: str | None = None,
                   on_driver_node: bool = True, metadata: dict[str, str] | None = None) -> str:
        """Submit via the Jobs API; with ``on_driver_node`` the driver goes to a worker."""
        handle = self._handle()
        resources, where = handle.driver_placement() if on_driver_node else (
            None, {"placed_by": "ray", "why": "on_driver_node is false"})
        job_id = handle.dashboard.submit(entrypoint, working_dir, metadata or {}, resources)
        self.drivers[job_id] = {"entrypoint": entrypoint[:80], **where}
        return job_id

    def job_status(self, job_id: str) -> str:
        try:
            info = self._handle().dashboard.job(job_id)
        except (TargetUnavailable, KubeApiError):
            return "UNKNOWN"
        return "MISSING" if info is None else str(info.get("status", "UNKNOWN"))

    def stop_job(self, job_id: str) -> None:
        try:
            self._handle().dashboard.stop_job(job_id)
        except (TargetUnavailable, KubeApiError):
            pass

    def job_log_lines(self, job_id: str) -> list[str]:
        """New lines of the driver log; none while the dashboard is unreachable (they come
        when it is back: the log lives on the driver's worker)."""
        try:
            logs = self._handle().dashboard.job_logs(job_id)
        except (TargetUnavailable, KubeApiError):
            return []
        start = self._log_offsets.get(job_id, 0)
        if len(logs) < start:  # a log that shrank is not ours to replay (stats would double)
            start = len(logs)
        cut = logs.rfind("\n", start) + 1  # whole lines only; the rest next time
        if cut <= start:
            self._log_offsets[job_id] = start
            return []
        self._log_offsets[job_id] = cut
        return logs[start:cut].splitlines()

    # --- faults --------------------------------------------------------------------------------
    def kill_head(self, mode: str, record: dict[str, Any]) -> dict[str, Any]:
        """``pod``: delete the head pod (grace 0); ``head``: kill its container; ``gcs``: only
        ``gcs_server``."""
        return k8s_head.kill_head(self._api(), self.ns, self.cluster, mode, record)

    def wait_head_back(self, old: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self._api().gate.dry_run:  # nothing was deleted, so nothing will come back
            return {"back": True, "dry_run": True, "new": old}
        return k8s_head.wait_head_back(self._api(), self.ns, self.cluster, old, timeout)

    def select_drain_victims(self, count: int, selector: dict[str, str] | None
                             ) -> list[NodeInfo]:
        """The Kubernetes nodes a drain would cordon, as NodeInfo (changes nothing)."""
        nodes, _rule = k8s_drain.select_nodes(self._api(), self.ns, self.cluster,
                                              k8s_drain.label_selector(selector), count)
        return [NodeInfo(node_id=n["metadata"]["uid"], name=n["metadata"]["name"],
                         address="", state="ALIVE", gpus=gpu_count(n),
                         labels=dict(n["metadata"].get("labels") or {})) for n in nodes]

    def drain_nodes(self, *, count: int, selector: dict[str, str] | None, deadline_s: float,
                    reason: str, replace: bool, replace_delay_s: float,
                    record: dict[str, Any]) -> dict[str, Any]:
        """Cordon nodes and evict what runs on them (``kubectl drain``); KubeRay recreates the
        Ray pods (``replace_delay_s`` is the operator's business on Kubernetes)."""
        ev = k8s_drain.drain_nodes(
            self._api(), self.ns, self.cluster, self.run_id, record,
            selector=k8s_drain.label_selector(selector), count=count, deadline_s=deadline_s,
            max_nodes=self.spec.max_nodes_at_once,
            allowed_namespaces=list(self.spec.allowed_namespaces))
        ev.setdefault("reason", reason)
        return ev

    def throttle_registry_pulls(self, *, rate_bps: float, latency_ms: float, error_rate: float,
                                image_mb: float, restart_workers: list[str] | None,
                                record: dict[str, Any]) -> dict[str, Any]:
        """Shape pulls from the registry hosts of the RayCluster's images on every node its
        pods may run on; then restart ``restart_workers`` so their replacements pull."""
        api, handle = self._api(), self._handle()
        images = sorted({c.get("image", "") for p in handle.pods()
                         for c in p["spec"].get("containers", [])} - {""})
        restart = [handle.pod_named(n) for n in restart_workers or []]
        ev = k8s_registry.throttle_registry_pulls(
            api, self.ns, self.run_id, record, rate=tc_rate(rate_bps),
            nodes=handle.pool_nodes(), hosts=k8s_registry.registry_hosts(images))
        ev["images"] = images
        if restart and not api.gate.dry_run:
            ev["restarted"] = k8s_registry.restart_pods(api, self.ns, self.cluster, restart,
                                                        handle.pods())
        return ev

    def saturate_network(self, *, nodes: list[str], bandwidth_bps: float, loss_pct: float,
                         latency_ms: float, flood: bool, partition: bool, flood_s: float,
                         record: dict[str, Any], queue_ms: float = 100.0) -> dict[str, Any]:
        """Chaos Mesh bandwidth on the named Ray pods and a paced flood into them from another
        Ray pod for ``flood_s``; ``queue_ms`` (not 100) sizes the shaper's ``limit``."""
        victims = [self._handle().pod_named(n) for n in nodes]
        limit = 20971520 if queue_ms == 100.0 else max(3000, int(bandwidth_bps * queue_ms / 8e3))
        return k8s_network.saturate_network(
            self._api(), self.ns, self.run_id, record, victims=victims,
            peer=self._handle().peer_for(victims),
            rate=tc_rate(bandwidth_bps) if bandwidth_bps else None, flood=flood, flood_s=flood_s,
            flood_bps=bandwidth_bps * 2 if bandwidth_bps else 200e6, limit=limit)

    def planned_calls(self) -> list[dict[str, Any]]:
        """Mutating calls made — or, in dry-run, that would have been made — in order."""
        return list(self._api().gate.calls)

    # --- undo ----------------------------------------------------------------------------------
    def undo(self, record: dict[str, Any]) -> dict[str, Any]:
        """Revert one ledger record (dispatching on its undo ``kind`` or ``fault``); idempotent."""
        kind = (record.get("undo") or {}).get("kind") or record.get("fault")
        if kind in rayfaults.UNDO_KINDS:
            try:
                return rayfaults.undo(self._handle(), record)
            except (KubeApiError, TargetUnavailable) as exc:
                raise RollbackFailed(f"undo {kind}: {record.get('undo')} may still be applied: "
                                     f"{exc}") from exc
        return k8s_undo.undo(self._api(), self.ns, record)

    def cleanup_run(self, run_id: str | None = None) -> dict[str, Any]:
        """Delete every object labelled ``raychaos.io/run-id=<run_id>``; uncordon our nodes."""
        return k8s_undo.cleanup_run(self._api(), self.ns, run_id or self.run_id)
