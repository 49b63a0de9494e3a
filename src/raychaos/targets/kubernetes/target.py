"""The Kubernetes target: a KubeRay ``RayCluster`` reached with the official ``kubernetes`` client.

Why it exists: faults and probes are written once against the Target protocol; this class maps
them onto the Kubernetes API (pod delete and exec for head kills, cordon + Eviction API for
drains, labelled DaemonSets / Chaos Mesh objects for network faults). ``connect`` checks, before
any fault, that the API answers, the RayCluster exists and we may read it — each failure is one
sentence. The mechanics live in ``k8s_head``, ``k8s_drain`` and ``k8s_network``; the Jobs API is
plain HTTP to the dashboard (``KubernetesSpec.dashboard_url``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from raychaos.config.settings import KubernetesSpec
from raychaos.errors import ConfigError, KubeApiError, RollbackFailed, TargetUnavailable
from raychaos.targets.base import NodeInfo, Refusal, RunLock
from raychaos.targets.kubernetes import drain as k8s_drain
from raychaos.targets.kubernetes import head as k8s_head
from raychaos.targets.kubernetes import network as k8s_network
from raychaos.targets.kubernetes import review as k8s_review
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.safety import (
    CORDONED_BY,
    RUN_ID,
    check_namespace,
    gpu_count,
    is_daemonset_pod,
)

#: What the Kubernetes target cannot do, per fault argument (checked before anything starts).
UNSUPPORTED: dict[str, dict[str, str]] = {
    "throttle_registry_pulls": {
        "latency_ms": "the kubernetes target shapes pull rate only (tc police); set it to 0",
        "error_rate": "the kubernetes target cannot fail registry requests; set it to 0",
        "restart_workers": "the kubernetes target does not restart pods for a throttle; "
                           "leave it out",
        "image_mb": "the image size on Kubernetes is the real image's; leave it out",
    },
    "saturate_network": {
        "loss_pct": "not supported on the kubernetes target yet (bandwidth and flood only); "
                    "set it to 0",
        "latency_ms": "not supported on the kubernetes target yet; set it to 0",
        "partition": "not supported on the kubernetes target yet; set it to false",
    },
}
#: The fault functions' defaults: an argument equal to these asks for nothing unsupported.
NEUTRAL: dict[str, Any] = {"latency_ms": 0.0, "error_rate": 0.0, "restart_workers": None,
                           "image_mb": 32.0, "loss_pct": 0.0, "partition": False}

__all__ = ["KubernetesTarget"]


def _label_selector(selector: dict[str, str] | str | None) -> str | None:
    if isinstance(selector, dict):
        return ",".join(f"{k}={v}" for k, v in selector.items()) or None
    return selector


def _tc_rate(bps: float) -> str:
    """tc's rate syntax for bits per second (kbit below 1 Mbit)."""
    return f"{max(1, round(bps / 1e6))}mbit" if bps >= 1e6 else f"{max(1, round(bps / 1e3))}kbit"


class KubernetesTarget:
    """A KubeRay RayCluster in one namespace. See :class:`raychaos.targets.base.Target`."""

    kind = "kubernetes"

    def __init__(self, spec: KubernetesSpec, run_id: str | None = None):
        self.spec = spec
        self.ns = spec.namespace
        self.run_id = run_id or uuid.uuid4().hex[:12]
        self.cluster = spec.cluster or ""
        self.api: ApiSession | None = None
        self.raycluster: dict[str, Any] = {}
        self._log_offsets: dict[str, int] = {}

    # --- lifecycle -----------------------------------------------------------------------------
    def connect(self) -> None:
        check_namespace(self.ns, list(self.spec.allowed_namespaces))
        api = ApiSession.connect(self.spec.kubeconfig, self.spec.context, self.spec.dry_run)
        where = f"kubernetes API at {api.host}"
        try:
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
        except KubeApiError as exc:
            api.close()
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
            api.close()  # e.g. ConfigError: several RayClusters and none named
            raise
        self.api = api

    def close(self) -> None:
        if self.api is not None:
            self.api.close()
            self.api = None

    def ensure_up(self, say: Callable[[str], None]) -> bool:
        """raychaos never creates a RayCluster: it must exist (checked by :meth:`connect`)."""
        return False

    def down(self) -> dict[str, Any]:
        """raychaos never deletes a user's RayCluster; nothing to do."""
        return {}

    def refusals(self, fault: str, args: Mapping[str, Any]) -> list[Refusal]:
        if fault == "resize_dev_shm":
            return [("", "the kubernetes target does not roll pods onto another /dev/shm; "
                         "`raychaos review` checks the RayCluster's shared-memory sizeLimit")]
        return [(arg, why) for arg, why in UNSUPPORTED.get(fault, {}).items()
                if arg in args and args[arg] != NEUTRAL.get(arg)]

    def preflight(self, fault: str, args: Mapping[str, Any]) -> None:
        if fault == "drain_gpu_nodes":
            self.select_drain_victims(int(args.get("count", 1)), args.get("selector"))

    def run_lock(self) -> RunLock:
        """One run at a time on this RayCluster: a coordination.k8s.io Lease next to it."""
        from raychaos.targets.kubernetes.lease import LeaseLock

        return LeaseLock(self._api(), self.ns, self.cluster)

    def _api(self) -> ApiSession:
        if self.api is None:
            raise TargetUnavailable("kubernetes target: connect() was not called")
        return self.api

    def gcs_ft(self) -> dict[str, Any]:
        """Whether GCS fault tolerance is configured, and how."""
        spec = self.raycluster.get("spec", {})
        notes = self.raycluster.get("metadata", {}).get("annotations") or {}
        if spec.get("gcsFaultToleranceOptions"):
            return {"enabled": True, "via": "spec.gcsFaultToleranceOptions"}
        if str(notes.get("ray.io/ft-enabled", "")).lower() == "true":
            return {"enabled": True, "via": "annotation ray.io/ft-enabled"}
        return {"enabled": False, "via": None}

    def describe(self) -> dict[str, Any]:
        api = self._api()
        pods = self._ray_pods()
        groups: dict[str, int] = {}
        for p in pods:
            labels = p["metadata"]["labels"]
            if labels.get("ray.io/node-type") == "worker" and not is_daemonset_pod(p):
                g = labels.get("ray.io/group", "?")
                groups[g] = groups.get(g, 0) + 1
        gpu_nodes = [n["metadata"]["name"] for n in api.read(api.core.list_node)["items"]
                     if gpu_count(n) > 0]
        return {"kind": self.kind, "api": api.host, "namespace": self.ns,
                "context": self.spec.context, "kubeconfig": self.spec.kubeconfig,
                "cluster": self.cluster, "run_id": self.run_id, "gcs_ft": self.gcs_ft(),
                "worker_groups": groups, "gpu_nodes": gpu_nodes, "dry_run": api.gate.dry_run,
                "dashboard_url": self.spec.dashboard_url
                or "not set: port-forward the head service's 8265 and set dashboard_url"}

    # --- observation ---------------------------------------------------------------------------
    def _ray_pods(self) -> list[dict[str, Any]]:
        api = self._api()
        pods: list[dict[str, Any]] = api.read(api.core.list_namespaced_pod, self.ns,
                                               label_selector=f"ray.io/cluster={self.cluster}"
                                               )["items"]
        return pods

    def nodes(self, timeout: float = 1.0) -> list[NodeInfo]:
        """Ray nodes as pods: Ready → ALIVE, terminating → DRAINING, otherwise DEAD."""
        out = []
        for p in self._ray_pods():
            meta = p["metadata"]
            if is_daemonset_pod(p):
                continue
            ready = k8s_head._ready(p)
            state = "DRAINING" if "deletionTimestamp" in meta else "ALIVE" if ready else "DEAD"
            out.append(NodeInfo(node_id=meta["uid"], name=meta["name"],
                                address=p.get("status", {}).get("podIP") or "", state=state,
                                is_head=meta["labels"].get("ray.io/node-type") == "head",
                                gpus=gpu_count(p), labels=dict(meta["labels"])))
        return out

    def gcs_alive(self, timeout: float = 0.5) -> bool:
        """Dashboard ``/api/version`` when reachable, else the head pod's readiness."""
        if self.spec.dashboard_url:
            try:
                self._http("GET", "/api/version", timeout=timeout)
                return True
            except TargetUnavailable:
                return False
        try:
            return bool(self.head_identity()["ready"])
        except Exception:  # noqa: BLE001 - a probe answers False, never raises
            return False

    def head_identity(self) -> dict[str, Any]:
        return k8s_head.head_identity(self._api(), self.ns, self.cluster)

    def serve_url(self, port: int = 8000) -> str:
        """Ray Serve as clients reach it; needs ``serve_url`` in the target settings."""
        if not self.spec.serve_url:
            raise TargetUnavailable(
                f"kubernetes: no serve_url set; port-forward the Serve service "
                f"(`kubectl -n {self.ns} port-forward svc/{self.cluster}-serve-svc "
                f"{port}:{port}`) and set serve_url to http://127.0.0.1:{port}")
        return self.spec.serve_url.rstrip("/")

    def metrics_texts(self, timeout: float = 0.5) -> list[str]:
        """Not read on Kubernetes yet (the raylets' metrics ports are inside the pods)."""
        return []

    def cluster_events(self, since: float) -> list[dict[str, Any]]:
        """Image pulls the kubelet reported (``Pulled`` events) since ``since``."""
        return k8s_network.pull_events(self._api(), self.ns, since)

    def review_objects(self) -> list[dict[str, Any]]:
        """The RayCluster as stored, the namespace's PDBs and the cluster's pods."""
        return k8s_review.live_objects(self._api(), self.ns, self.raycluster)

    def node_storage(self) -> list[dict[str, Any]]:
        """Not observed inside pods (that needs exec); the review reads the declared sizes."""
        return [{"node": p["metadata"]["name"], "observed": False} for p in self._ray_pods()]

    def resize_dev_shm(self, *, nodes: list[str], size_mb: float,
                       record: dict[str, Any]) -> dict[str, Any]:
        raise ConfigError("resize_dev_shm: refused on the kubernetes target (see refusals)")

    def dashboard_url(self) -> str:
        if not self.spec.dashboard_url:
            raise TargetUnavailable(
                f"kubernetes: no dashboard_url set; run `kubectl -n {self.ns} port-forward "
                f"svc/{self.cluster}-head-svc 8265:8265` and set dashboard_url to "
                f"http://127.0.0.1:8265")
        return self.spec.dashboard_url.rstrip("/")

    # --- jobs: the Ray Jobs REST API over plain HTTP -------------------------------------------
    def _http(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> Any:
        url = self.dashboard_url() + path
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
                raw = resp.read()
        except (urllib.error.URLError, OSError) as exc:
            raise TargetUnavailable(f"Ray dashboard at {url}: {exc}") from exc
        return json.loads(raw) if raw else {}

    def submit_job(self, entrypoint: str, *, working_dir: str | None = None,
                   on_driver_node: bool = True, metadata: dict[str, str] | None = None) -> str:
        """Submit via the Jobs API; ``on_driver_node`` is ignored (KubeRay places drivers)."""
        body: dict[str, Any] = {"entrypoint": entrypoint, "metadata": metadata or {}}
        if working_dir and not working_dir.startswith(("gcs://", "s3://", "gs://", "https://")):
            # a folder on this machine: Ray's own client uploads it to the cluster first
            from ray.job_submission import JobSubmissionClient

            try:
                return str(JobSubmissionClient(self.dashboard_url()).submit_job(
                    entrypoint=entrypoint, runtime_env={"working_dir": working_dir},
                    metadata=metadata or {}))
            except Exception as exc:
                raise TargetUnavailable(f"Jobs API at {self.dashboard_url()}: {exc}") from exc
        if working_dir:
            body["runtime_env"] = {"working_dir": working_dir}
        return str(self._http("POST", "/api/jobs/", body)["submission_id"])

    def job_status(self, job_id: str) -> str:
        try:
            return str(self._http("GET", f"/api/jobs/{job_id}").get("status", "UNKNOWN"))
        except TargetUnavailable:
            return "UNKNOWN"

    def stop_job(self, job_id: str) -> None:
        try:
            self._http("POST", f"/api/jobs/{job_id}/stop")
        except TargetUnavailable:
            pass

    def job_log_lines(self, job_id: str) -> list[str]:
        logs = str(self._http("GET", f"/api/jobs/{job_id}/logs").get("logs", ""))
        start = self._log_offsets.get(job_id, 0)
        self._log_offsets[job_id] = len(logs)
        return logs[start:].splitlines()

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
        api = self._api()
        nodes = k8s_drain.select_nodes(api, self.ns, self.cluster, _label_selector(selector),
                                       None if selector else count)
        return [NodeInfo(node_id=n["metadata"]["uid"], name=n["metadata"]["name"],
                         address="", state="ALIVE", gpus=gpu_count(n),
                         labels=dict(n["metadata"].get("labels") or {})) for n in nodes]

    def drain_nodes(self, *, count: int, selector: dict[str, str] | None, deadline_s: float,
                    reason: str, replace: bool, replace_delay_s: float,
                    record: dict[str, Any]) -> dict[str, Any]:
        """Cordon nodes (by label ``selector`` or ``count`` GPU nodes) and evict their Ray pods
        through the Eviction API; KubeRay recreates the evicted workers elsewhere (``replace``
        and ``replace_delay_s`` are the operator's business on Kubernetes)."""
        ev = k8s_drain.drain_nodes(
            self._api(), self.ns, self.cluster, self.run_id, record,
            selector=_label_selector(selector), count=None if selector else count, evict=True,
            deadline_s=deadline_s, max_nodes=self.spec.max_nodes_at_once)
        ev.setdefault("reason", reason)
        return ev

    def throttle_registry_pulls(self, *, rate_bps: float, latency_ms: float, error_rate: float,
                                image_mb: float, restart_workers: list[str] | None,
                                record: dict[str, Any]) -> dict[str, Any]:
        """Limit download rate from the registry hosts of the RayCluster's images on the nodes
        running Ray pods, with a privileged hostNetwork DaemonSet running ``tc``."""
        return k8s_network.throttle_registry_pulls(
            self._api(), self.ns, self.run_id, record, rate=_tc_rate(rate_bps),
            nodes=self._ray_node_names(), image=k8s_network.TOOL_IMAGE,
            registry_hosts=self._registry_hosts())

    def saturate_network(self, *, nodes: list[str], bandwidth_bps: float, loss_pct: float,
                         latency_ms: float, flood: bool, partition: bool, flood_s: float,
                         record: dict[str, Any]) -> dict[str, Any]:
        """Chaos Mesh NetworkChaos (bandwidth) on the Ray pods if installed, else iperf3 pod
        pairs pinned to ``nodes`` (Kubernetes node names) to saturate their links."""
        return k8s_network.saturate_network(
            self._api(), self.ns, self.cluster, self.run_id, record, nodes=nodes or None,
            rate=_tc_rate(bandwidth_bps or 10e6), duration_s=int(flood_s),
            image=k8s_network.IPERF_IMAGE)

    def _ray_node_names(self) -> list[str]:
        return sorted({p["spec"].get("nodeName") for p in self._ray_pods()
                       if p["spec"].get("nodeName")})

    def _registry_hosts(self) -> list[str]:
        hosts = set()
        for pod in self._ray_pods():
            for c in pod["spec"].get("containers", []):
                first = c.get("image", "").split("/")[0]
                hosts.add(first if ("." in first or ":" in first) and "/" in c.get("image", "")
                          else "registry-1.docker.io")
        return sorted(hosts)

    def planned_calls(self) -> list[dict[str, Any]]:
        """Mutating calls made — or, in dry-run, that would have been made — in order."""
        return list(self._api().gate.calls)

    # --- undo ----------------------------------------------------------------------------------
    def undo(self, record: dict[str, Any]) -> dict[str, Any]:
        """Revert one ledger record (dispatching on its undo ``kind`` or ``fault``); idempotent."""
        undo = record.get("undo") or {}
        kind = undo.get("kind") or record.get("fault")
        api = self._api()
        try:
            if kind == "kill_head" or not undo:
                return {"undone": True, "note": "nothing to revert: KubeRay recreates the head"}
            if kind == "drain_nodes":
                return {"undone": True, "uncordoned": k8s_drain.uncordon(api, undo["nodes"])}
            if kind in k8s_network.UNDO_KINDS:
                return {"undone": True, "deleted": k8s_network.delete_created(api, undo)}
        except (KubeApiError, TargetUnavailable) as exc:
            raise RollbackFailed(f"undo {kind}: {undo} may still be applied: {exc}") from exc
        raise RollbackFailed(f"undo: unknown fault kind {kind!r} in record {record.get('id')}")

    def cleanup_run(self, run_id: str | None = None) -> dict[str, Any]:
        """Delete every object labelled ``raychaos.io/run-id=<run_id>``; uncordon our nodes."""
        api = self._api()
        rid = run_id or self.run_id
        nodes = [n["metadata"]["name"] for n in api.read(
            api.core.list_node, label_selector=f"{CORDONED_BY}={rid}")["items"]]
        return {"run_id": rid, "uncordoned": k8s_drain.uncordon(api, nodes),
                "deleted": k8s_network.delete_labelled(api, self.ns, f"{RUN_ID}={rid}")}
