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
from typing import Any

from urllib3.exceptions import HTTPError as Urllib3Error

from raychaos.config import KubernetesSpec
from raychaos.errors import ConfigError, RollbackFailed, TargetUnavailable
from raychaos.targets import k8s_drain, k8s_head, k8s_network
from raychaos.targets.base import NodeInfo
from raychaos.targets.k8s_client import ApiException, ApiSession, status_message
from raychaos.targets.k8s_safety import (
    CORDONED_BY, RUN_ID, check_namespace, gpu_count, is_daemonset_pod,
)

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
        except ApiException as exc:
            api.close()
            if exc.status == 404:
                raise TargetUnavailable(f"{where}: no RayCluster {self.cluster!r} in namespace "
                                        f"{self.ns} (or the ray.io/v1 CRD is not installed)"
                                        ) from exc
            if exc.status in (401, 403):
                raise TargetUnavailable(f"{where}: HTTP {exc.status}, not allowed to read "
                                        f"rayclusters in namespace {self.ns}: "
                                        f"{status_message(exc)}") from exc
            raise TargetUnavailable(f"{where}: HTTP {exc.status} {exc.reason}") from exc
        except (Urllib3Error, OSError) as exc:
            api.close()
            raise TargetUnavailable(f"{where} is unreachable: {type(exc).__name__}") from exc
        except BaseException:
            api.close()  # e.g. ConfigError: several RayClusters and none named
            raise
        self.api = api

    def close(self) -> None:
        if self.api is not None:
            self.api.close()
            self.api = None

    def run_lock(self) -> Any:
        """One run at a time on this RayCluster: a coordination.k8s.io Lease next to it."""
        from raychaos.targets.k8s_lease import LeaseLock

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
        return api.read(api.core.list_namespaced_pod, self.ns,
                        label_selector=f"ray.io/cluster={self.cluster}")["items"]

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

    # The fault-facing signatures are the local target's: one experiment file drives both.
    def select_drain_victims(self, count: int | None, selector: Any) -> list[Any]:
        """Drains select and check their nodes before cordoning anything (NothingMatched)."""
        return []

    def drain_nodes(self, count: int | None = 1, selector: dict[str, str] | str | None = None,
                    deadline_s: float = 60.0, reason: str = "preemption", replace: bool = True,
                    replace_delay_s: float = 0.0, record: dict[str, Any] | None = None,
                    evict: bool = True) -> dict[str, Any]:
        """Cordon nodes (by label ``selector`` or ``count`` GPU nodes) and evict their Ray pods
        through the Eviction API; KubeRay recreates the evicted workers elsewhere (``replace``
        and ``replace_delay_s`` are the operator's business on Kubernetes)."""
        record = {} if record is None else record
        ev = k8s_drain.drain_nodes(
            self._api(), self.ns, self.cluster, self.run_id, record,
            selector=_label_selector(selector), count=None if selector else count, evict=evict,
            deadline_s=deadline_s, max_nodes=self.spec.max_nodes_at_once)
        ev.setdefault("reason", reason)
        return ev

    def throttle_registry_pulls(self, rate_bps: float, latency_ms: float = 0.0,
                                error_rate: float = 0.0, image_mb: float = 0.0,
                                restart_workers: list[str] | None = None,
                                record: dict[str, Any] | None = None,
                                nodes: list[str] | None = None,
                                registry_hosts: list[str] | None = None,
                                image: str = k8s_network.TOOL_IMAGE) -> dict[str, Any]:
        """Limit download rate from the registry hosts (the RayCluster's images' registries
        unless given) on ``nodes`` (the nodes running Ray pods unless given) with a privileged
        hostNetwork DaemonSet running ``tc``."""
        if latency_ms or error_rate or restart_workers:
            raise ConfigError("throttle_registry_pulls: latency_ms, error_rate and "
                              "restart_workers are not supported on the kubernetes target "
                              "(tc rate shaping only); leave them at their defaults")
        record = {} if record is None else record
        return k8s_network.throttle_registry_pulls(
            self._api(), self.ns, self.run_id, record, rate=_tc_rate(rate_bps),
            nodes=nodes or self._ray_node_names(), image=image,
            registry_hosts=registry_hosts or self._registry_hosts())

    def saturate_network(self, nodes: list[str] | None = None, bandwidth_bps: float = 0.0,
                         loss_pct: float = 0.0, latency_ms: float = 0.0, flood: bool = True,
                         partition: bool = False, flood_s: float = 120.0,
                         record: dict[str, Any] | None = None,
                         image: str = k8s_network.IPERF_IMAGE) -> dict[str, Any]:
        """Chaos Mesh NetworkChaos (bandwidth) on the Ray pods if installed, else iperf3 pod
        pairs pinned to ``nodes`` (Kubernetes node names) to saturate their links."""
        if loss_pct or latency_ms or partition:
            raise ConfigError("saturate_network: loss_pct, latency_ms and partition are not "
                              "supported on the kubernetes target yet (bandwidth and flood "
                              "only); leave them at their defaults")
        record = {} if record is None else record
        return k8s_network.saturate_network(
            self._api(), self.ns, self.cluster, self.run_id, record, nodes=nodes or None,
            rate=_tc_rate(bandwidth_bps or 10e6), duration_s=int(flood_s), image=image)

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

    def image_pull_seconds(self) -> list[float]:
        """Durations of image pulls the kubelet reported (``Pulled`` events) in the namespace."""
        return k8s_network.image_pull_seconds(self._api(), self.ns)

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
        except (ApiException, Urllib3Error, OSError) as exc:
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
