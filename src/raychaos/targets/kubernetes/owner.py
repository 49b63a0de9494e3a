"""The KubeRay workload a target is named by — a ``RayJob`` or a ``RayService`` — and the
RayCluster behind it, followed when it changes.

Why a module of its own: platform teams run training as RayJobs and serving as RayServices, so
they name *those*, not the RayCluster KubeRay made for them (``<name>-<suffix>``, a new one per
RayJob retry and per RayService upgrade). KubeRay publishes the cluster in the object's status
(``status.rayClusterName`` for a RayJob, ``status.activeServiceStatus.rayClusterName`` for a
RayService; see ``ray-operator/apis/ray/v1/rayjob_types.go`` and ``rayservice_types.go``). During
a RayService upgrade there are two clusters for a while (``pendingServiceStatus``); the active one
is the target, and a switch is put on the timeline (``target_cluster_switched``). The object's
own status — a RayJob's ``jobStatus``/``jobDeploymentStatus``/``reason``, a RayService's
``Ready`` condition, ``numServeEndpoints`` and each application's status — goes on the timeline
whenever it changes (``rayjob_status``, ``rayservice_status``): it is one of the three readings
the job probes compare.

Serve traffic to a RayService goes the way its clients' does: through the ``<name>-serve-svc``
Service (``spec.serveService.metadata.name`` when set), i.e. to the Running pods its selector
picks *now* (KubeRay re-points it at the new cluster on an upgrade and selects only pods with a
healthy proxy, ``ray.io/serve=true``).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import Any

from raychaos.config.kubernetes_kind import check_name
from raychaos.errors import KubeApiError, TargetUnavailable
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.raycluster import is_running, pod_ready

__all__ = ["KINDS", "Owner", "ServeServiceResolver", "check_name", "cluster_of",
           "serve_service_name", "status_of"]

#: target.kubernetes.kind -> (plural, Kind) of the KubeRay workload objects raychaos follows.
KINDS = {"rayjob": ("rayjobs", "RayJob"), "rayservice": ("rayservices", "RayService")}
EV_SWITCHED = "target_cluster_switched"
def cluster_of(kind: str, obj: dict[str, Any]) -> str:
    """The RayCluster KubeRay runs ``obj`` on now ('' when it made none yet)."""
    status = obj.get("status") or {}
    if kind == "rayservice":
        return str((status.get("activeServiceStatus") or {}).get("rayClusterName") or "")
    return str(status.get("rayClusterName") or "")


def serve_service_name(obj: dict[str, Any]) -> str:
    svc = ((obj.get("spec") or {}).get("serveService") or {}).get("metadata") or {}
    return str(svc.get("name") or f"{obj['metadata']['name']}-serve-svc")


def _condition(status: dict[str, Any], kind: str) -> str | None:
    for c in status.get("conditions") or []:
        if c.get("type") == kind:
            return str(c.get("status"))
    return None


def status_of(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """The object's status as the harness reads it (JSON-friendly, stable keys)."""
    status = obj.get("status") or {}
    if kind == "rayjob":
        spec = obj.get("spec") or {}
        return {"job_id": status.get("jobId") or spec.get("jobId") or "",
                "job_status": status.get("jobStatus") or "",
                "job_deployment_status": status.get("jobDeploymentStatus") or "",
                "reason": status.get("reason") or "", "message": status.get("message") or "",
                "submission_mode": spec.get("submissionMode") or "K8sJobMode",
                "succeeded": status.get("succeeded"), "failed": status.get("failed")}
    active = status.get("activeServiceStatus") or {}
    apps = {name: str((a or {}).get("status") or "") for name, a in
            (active.get("applicationStatuses") or {}).items()}
    endpoints = status.get("numServeEndpoints", status.get("NumServeEndpoints"))
    ready = _condition(status, "Ready")
    return {"ready": None if ready is None else ready == "True",
            "service_status": status.get("serviceStatus") or "",
            "num_serve_endpoints": None if endpoints is None else int(endpoints),
            "applications": apps,
            "upgrade_in_progress": _condition(status, "UpgradeInProgress") == "True",
            "pending_cluster": (status.get("pendingServiceStatus") or {}).get(
                "rayClusterName") or ""}


class Owner:
    """One RayJob or RayService in a namespace: its current RayCluster and status.

    ``poll`` re-reads the object at most every ``poll_s`` (one GET; the monitor calls it once a
    second through ``cluster_events``) and returns the timeline events of what changed."""

    def __init__(self, api: ApiSession, ns: str, kind: str, name: str, poll_s: float = 2.0):
        self.api, self.ns, self.kind, self.name, self.poll_s = api, ns, kind, name, poll_s
        self.plural, self.Kind = KINDS[kind]
        self.obj: dict[str, Any] = {}
        self.cluster = ""
        self.switches: list[dict[str, Any]] = []
        self._status: dict[str, Any] | None = None
        self._read_at = 0.0
        self._lock = threading.Lock()

    def read(self) -> dict[str, Any]:
        self.obj = self.api.read(self.api.custom.get_namespaced_custom_object, "ray.io", "v1",
                                 self.ns, self.plural, self.name)
        self._read_at = time.monotonic()
        return self.obj

    def resolve(self) -> str:
        """Read the object and the RayCluster behind it; one sentence when there is none."""
        try:
            obj = self.read()
        except KubeApiError as exc:
            if exc.status == 404:
                raise TargetUnavailable(
                    f"target.kubernetes.name: no {self.Kind} {self.name!r} in namespace "
                    f"{self.ns} (or the ray.io/v1 {self.plural} CRD is not installed)") from exc
            raise
        cluster = cluster_of(self.kind, obj)
        if not cluster:
            field = ("status.activeServiceStatus.rayClusterName" if self.kind == "rayservice"
                     else "status.rayClusterName")
            st = status_of(self.kind, obj)
            state = st.get("job_deployment_status") or st.get("service_status") or "no status"
            raise TargetUnavailable(
                f"target.kubernetes.name: {self.Kind} {self.ns}/{self.name} has no {field} yet "
                f"({state!r}): wait until KubeRay has made its RayCluster")
        self.cluster = cluster
        self._status = status_of(self.kind, obj)
        return cluster

    def status(self, fresh: bool = True) -> dict[str, Any]:
        """What :meth:`Target.owner` returns: the object, its cluster and status now."""
        if fresh:
            try:
                self.read()
            except (KubeApiError, TargetUnavailable) as exc:
                return {**self._describe(), "error": str(exc)}
        return {**self._describe(), **status_of(self.kind, self.obj)}

    def _describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "namespace": self.ns,
                               "cluster": self.cluster, "switches": list(self.switches),
                               "serves_own_apps": self.kind == "rayservice"}
        if self.kind == "rayservice" and self.obj:
            out["serve_service"] = serve_service_name(self.obj)
        return out

    def poll(self, now_wall: float) -> list[dict[str, Any]]:
        """Timeline events since the last poll: a status change, a switch of the cluster."""
        with self._lock:
            if time.monotonic() - self._read_at < self.poll_s:
                return []
            try:
                obj = self.read()
            except (KubeApiError, TargetUnavailable):
                self._read_at = time.monotonic()  # the monitor notes API errors elsewhere
                return []
            events: list[dict[str, Any]] = []
            st = status_of(self.kind, obj)
            if st != self._status:
                self._status = st
                events.append({"ts": now_wall, "event": f"{self.kind}_status",
                               "node": self.name, **st})
            cluster = cluster_of(self.kind, obj)
            if cluster and cluster != self.cluster:
                switch = {"ts": now_wall, "event": EV_SWITCHED, "node": cluster,
                          "from": self.cluster, "to": cluster,
                          "owner": f"{self.Kind} {self.ns}/{self.name}"}
                self.switches.append({k: v for k, v in switch.items() if k != "node"})
                self.cluster = cluster
                events.append(switch)
            return events


class ServeServiceResolver:
    """Which pod a new Serve connection goes to: the pods the RayService's Serve Service sends
    traffic to now, as kube-proxy does — those its selector (read at most every ``ttl_s``)
    matches that are Running and Ready (the EndpointSlice controller's ``ready``), unless the
    Service publishes not-ready addresses — round-robin.

    Readiness is how KubeRay steers Serve traffic off a worker: a worker pod always carries
    ``ray.io/serve=true``, and its readiness probe includes its Serve proxy's ``/-/healthz``
    (failure threshold 1). Ray Serve runs no proxy on a node without replicas, so such a worker
    is NotReady and out of the Service; sending it requests anyway (as this did by label alone)
    met a refused port and counted Serve errors no client of the Service sees (the real
    operator on the bed: 8 % of requests "lost" in a healthy RayService head kill)."""

    def __init__(self, owner: Owner, pods: Callable[[], list[dict[str, Any]]],
                 ttl_s: float = 2.0, port: int = 8000):
        self.owner, self.pods, self.ttl_s, self.port = owner, pods, ttl_s, port
        self._selector: dict[str, str] = {}
        self._not_ready_too = False
        self._at = float("-inf")
        self._rr = itertools.count()

    def selector(self) -> dict[str, str]:
        if time.monotonic() - self._at >= self.ttl_s:
            api = self.owner.api
            name = serve_service_name(self.owner.obj or {"metadata": {"name": self.owner.name}})
            svc = api.read_or_none(api.core.read_namespaced_service, name, self.owner.ns)
            if svc is None:
                raise TargetUnavailable(f"kubernetes: no Service {self.owner.ns}/{name} in front "
                                        f"of RayService {self.owner.name}")
            self._selector = dict((svc.get("spec") or {}).get("selector") or {})
            self._not_ready_too = bool((svc.get("spec") or {}).get("publishNotReadyAddresses"))
            for p in (svc.get("spec") or {}).get("ports") or []:
                if p.get("name") == "serve" or p.get("port") == 8000:
                    target = p.get("targetPort", p.get("port"))
                    self.port = int(target) if str(target).isdigit() else self.port
            self._at = time.monotonic()
        return self._selector

    def __call__(self) -> tuple[str, int]:
        sel = self.selector()
        pods = sorted((p for p in self.pods() if is_running(p) and (
            self._not_ready_too or pod_ready(p)) and all(
            (p["metadata"].get("labels") or {}).get(k) == v for k, v in sel.items())),
            key=lambda p: p["metadata"]["name"])
        if not pods:
            raise TargetUnavailable(f"kubernetes: no Ready pod behind Service "
                                    f"{self.owner.ns}/{serve_service_name(self.owner.obj)} "
                                    f"(selector {sel})")
        return pods[next(self._rr) % len(pods)]["metadata"]["name"], self.port

