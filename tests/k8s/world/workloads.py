"""KubeRay for the world, part two: the ``RayJob`` and ``RayService`` operators.

What kuberay-operator does for them, in its shapes (``ray-operator/apis/ray/v1/rayjob_types.go``,
``rayservice_types.go``), on the world's real Ray pods:

- **RayJob**: makes the RayCluster ``<name>-<5 chars>`` from ``spec.rayClusterSpec`` (owned by
  the RayJob, labelled ``ray.io/originated-from-crd: RayJob``), fills ``status.rayClusterName``,
  ``jobId``, ``dashboardURL``, ``jobDeploymentStatus`` Initializing → Running → Complete/Failed;
  once the cluster is ready it submits ``spec.entrypoint`` through the Jobs API (with
  ``entrypointResources``, ``runtimeEnvYAML``, ``metadata``) and copies the Jobs API's status
  into ``status.jobStatus``. In ``K8sJobMode`` (the default) the submitter is a Kubernetes Job
  running ``ray job submit`` + ``ray job logs --follow`` against the head: when the head goes
  away the submitter fails, and with ``backoffLimit`` 0 the RayJob goes ``Failed`` with reason
  ``SubmissionFailed`` although the Ray job may go on — modelled here as "the head pod this
  submission was made to is gone". ``HTTPMode`` just polls.
- **RayService**: makes a pending RayCluster from ``spec.rayClusterConfig``
  (``pendingServiceStatus.rayClusterName``), deploys ``serveConfigV2`` on it with
  ``PUT /api/serve/applications/`` once it is ready, promotes it to
  ``activeServiceStatus.rayClusterName`` when every application is RUNNING (deleting the one it
  replaces), keeps the ``<name>-serve-svc`` Service selecting ``ray.io/cluster: <active>,
  ray.io/serve: "true"``, and reports ``numServeEndpoints``, the ``Ready`` and
  ``UpgradeInProgress`` conditions and each application's status. A change of
  ``spec.rayClusterConfig`` starts an upgrade (a second cluster for a while).

For tests: the annotation ``raychaos.test/freeze-job-status: "true"`` on a RayJob makes the
operator stop copying the Jobs API's status — the RayJob stays as it was while the Ray job moves
on (kuberay#3903), a planted disagreement for ``job_status_consistent``.

The Jobs and Serve APIs are called on the head pod's address (the host routes to every pod),
from this controller's own thread, never under the store's lock.
"""

from __future__ import annotations

import copy
import hashlib
import http.client
import json
import logging
import secrets
import threading
from typing import Any

import yaml

from tests.k8s.world import resources as R
from tests.k8s.world.api import Api
from tests.k8s.world.controllers import pod_ready
from tests.k8s.world.store import now

__all__ = ["FREEZE", "Workloads"]

log = logging.getLogger(__name__)
FREEZE = "raychaos.test/freeze-job-status"
TERMINAL = {"SUCCEEDED", "FAILED", "STOPPED"}


def _hash(spec: Any) -> str:
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def _call(ip: str, method: str, path: str, body: Any = None, timeout: float = 5.0) -> Any:
    conn = http.client.HTTPConnection(ip, 8265, timeout=timeout)
    try:
        conn.request(method, path, body=None if body is None else json.dumps(body),
                     headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status >= 400:
            raise OSError(f"{method} {path}: HTTP {resp.status} {data[:200]!r}")
        return json.loads(data or b"null")
    finally:
        conn.close()


class Workloads:
    def __init__(self, api: Api, every_s: float = 1.0):
        self.api, self.every_s = api, every_s
        self._stop = threading.Event()
        self._deployed: set[str] = set()  # RayCluster uids serveConfigV2 was PUT to
        self._submitted_to: dict[str, str] = {}  # RayJob uid -> head pod uid (K8sJobMode)
        self._thread: threading.Thread | None = None
        self.errors: list[str] = []

    def start(self) -> Workloads:
        self._thread = threading.Thread(target=self._loop, daemon=True, name="world-workloads")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.reconcile()

    def reconcile(self) -> None:
        for plural, fn in (("rayjobs", self._rayjob), ("rayservices", self._rayservice)):
            for obj in self.api.store.list(plural):
                if obj["metadata"].get("deletionTimestamp"):
                    continue
                try:
                    fn(obj)
                except Exception as exc:  # noqa: BLE001 - keep the world running, keep why
                    log.exception("workloads %s", plural)
                    self.errors = (self.errors + [f"{plural}: {type(exc).__name__}: {exc}"])[-50:]

    # --- shared --------------------------------------------------------------------------------
    def _res(self, plural: str) -> R.Res:
        res = self.api.resolve("ray.io", "v1", plural)
        assert res is not None
        return res

    def _status(self, plural: str, obj: dict, status: dict) -> None:
        if status != obj.get("status"):
            self.api.update(self._res(plural), obj["metadata"]["namespace"],
                            obj["metadata"]["name"], {**obj, "status": status}, sub="status")

    def _make_cluster(self, owner: dict, kind: str, spec: dict) -> str:
        meta = owner["metadata"]
        name = f"{meta['name']}-{secrets.token_hex(3)[:5]}"
        annotations = dict(meta.get("annotations") or {})
        body = {"apiVersion": "ray.io/v1", "kind": "RayCluster",
                "metadata": {"name": name, "namespace": meta["namespace"],
                             "labels": {"ray.io/originated-from-crd": kind,
                                        "ray.io/originated-from-cr-name": meta["name"]},
                             "annotations": {k: v for k, v in annotations.items()
                                             if k == "ray.io/ft-enabled"} | {
                                 "ray.io/hash-of-spec": _hash(spec)},
                             "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": kind,
                                                  "name": meta["name"], "uid": meta["uid"],
                                                  "controller": True,
                                                  "blockOwnerDeletion": True}]},
                "spec": copy.deepcopy(spec)}
        self.api.create(self._res("rayclusters"), meta["namespace"], body)
        return name

    def _head(self, ns: str, cluster: str) -> dict | None:
        heads = [p for p in self.api.store.list("pods", ns, f"ray.io/cluster={cluster},"
                                                "ray.io/node-type=head")
                 if not p["metadata"].get("deletionTimestamp") and pod_ready(p)
                 and (p.get("status") or {}).get("podIP")]
        return heads[0] if heads else None

    def _cluster_ready(self, ns: str, cluster: str) -> bool:
        rc = self.api.store.get("rayclusters", ns, cluster)
        return bool(rc and (rc.get("status") or {}).get("state") == "ready")

    # --- RayJob --------------------------------------------------------------------------------
    def _rayjob(self, job: dict) -> None:
        meta, spec = job["metadata"], job["spec"]
        ns, st = meta["namespace"], copy.deepcopy(job.get("status") or {})
        mode = spec.get("submissionMode") or "K8sJobMode"
        if not st.get("rayClusterName"):
            cluster = self._make_cluster(job, "RayJob", spec["rayClusterSpec"])
            svc = f"{cluster}-head-svc"
            st.update({"rayClusterName": cluster, "jobId": spec.get("jobId") or
                       f"{meta['name']}-{secrets.token_hex(4)}",
                       "dashboardURL": f"{svc}.{ns}.svc.cluster.local:8265",
                       "jobDeploymentStatus": "Initializing", "startTime": now(),
                       "succeeded": 0, "failed": 0})
            return self._status("rayjobs", job, st)
        cluster, deploy = st["rayClusterName"], st.get("jobDeploymentStatus")
        if deploy in ("Complete", "Failed"):
            return None
        head = self._head(ns, cluster)
        if deploy == "Initializing":
            if not self._cluster_ready(ns, cluster) or head is None:
                return None
            body: dict[str, Any] = {"entrypoint": spec["entrypoint"],
                                    "submission_id": st["jobId"],
                                    "metadata": spec.get("metadata") or {}}
            if spec.get("runtimeEnvYAML"):
                body["runtime_env"] = yaml.safe_load(spec["runtimeEnvYAML"])
            if spec.get("entrypointResources"):
                body["entrypoint_resources"] = json.loads(spec["entrypointResources"])
            try:
                _call(head["status"]["podIP"], "POST", "/api/jobs/", body)
            except OSError:
                return None  # the dashboard is not up yet: next time
            self._submitted_to[meta["uid"]] = head["metadata"]["uid"]
            st.update({"jobDeploymentStatus": "Running", "jobStatus": "PENDING"})
            return self._status("rayjobs", job, st)
        if (meta.get("annotations") or {}).get(FREEZE) == "true":
            return None  # the planted disagreement: the RayJob no longer follows the job
        submitted_to = self._submitted_to.get(meta["uid"])
        if mode == "K8sJobMode" and submitted_to and (head is None or
                                                      head["metadata"]["uid"] != submitted_to):
            st.update({"jobDeploymentStatus": "Failed", "reason": "SubmissionFailed",
                       "message": "Job submitter has failed: the head it followed went away",
                       "endTime": now(), "failed": int(st.get("failed") or 0) + 1})
            return self._status("rayjobs", job, st)
        if head is None:
            return None
        try:
            info = _call(head["status"]["podIP"], "GET", f"/api/jobs/{st['jobId']}")
        except OSError:
            return None  # the dashboard is not back yet
        status = str((info or {}).get("status") or "")
        st["jobStatus"] = status
        if status in TERMINAL:
            ok = status == "SUCCEEDED"
            st.update({"jobDeploymentStatus": "Complete" if ok or status == "STOPPED"
                       else "Failed", "endTime": now(),
                       "succeeded" if ok else "failed":
                           int(st.get("succeeded" if ok else "failed") or 0) + 1})
            if not ok:
                st["reason"] = "AppFailed"
                st["message"] = str((info or {}).get("message") or "")[:200]
        return self._status("rayjobs", job, st)

    # --- RayService ----------------------------------------------------------------------------
    def _rayservice(self, rs: dict) -> None:
        meta, spec = rs["metadata"], rs["spec"]
        ns, st = meta["namespace"], copy.deepcopy(rs.get("status") or {})
        active = (st.get("activeServiceStatus") or {}).get("rayClusterName") or ""
        pending = (st.get("pendingServiceStatus") or {}).get("rayClusterName") or ""
        want = _hash(spec["rayClusterConfig"])
        active_rc = self.api.store.get("rayclusters", ns, active) if active else None
        if active and active_rc is None:
            active = ""  # deleted under us: start again
        if not pending and (not active or (active_rc or {}).get("metadata", {}).get(
                "annotations", {}).get("ray.io/hash-of-spec") != want):
            pending = self._make_cluster(rs, "RayService", spec["rayClusterConfig"])
        if pending:
            apps = self._apps(ns, pending, spec)
            if apps and all(a["status"] == "RUNNING" for a in apps.values()):
                if active:
                    self.api.delete(self._res("rayclusters"), ns, active, None)
                active, pending = pending, ""
                st["activeServiceStatus"] = {"rayClusterName": active,
                                             "applicationStatuses": apps}
            else:
                st["pendingServiceStatus"] = {"rayClusterName": pending,
                                              "applicationStatuses": apps or {}}
        if not pending:
            st.pop("pendingServiceStatus", None)
        if active:
            apps = self._apps(ns, active, spec)
            if apps:  # unreachable while the head is down: keep what was last seen
                st["activeServiceStatus"] = {"rayClusterName": active,
                                             "applicationStatuses": apps}
            self._serve_service(rs, active)
        endpoints = self._endpoints(ns, f"{meta['name']}-serve-svc") if active else 0
        ready = endpoints > 0
        st["numServeEndpoints"] = endpoints
        st["serviceStatus"] = "Running" if ready else "NotRunning"
        st["observedGeneration"] = meta.get("generation", 1)
        old = {c["type"]: c for c in (rs.get("status") or {}).get("conditions") or []}
        conds = [("Ready", ready, "NonZeroServeEndpoints" if ready else "ZeroServeEndpoints"),
                 ("UpgradeInProgress", bool(pending and active),
                  "BothActivePendingClustersExist" if pending and active else
                  "NoPendingCluster")]
        st["conditions"] = [{"type": t, "status": str(v), "reason": r,
                             "lastTransitionTime": old[t]["lastTransitionTime"]
                             if t in old and old[t]["status"] == str(v) else now()}
                            for t, v, r in conds]
        self._status("rayservices", rs, st)

    def _apps(self, ns: str, cluster: str, spec: dict) -> dict[str, dict]:
        """Each application's status on ``cluster``; deploys serveConfigV2 there first."""
        head = self._head(ns, cluster)
        rc = self.api.store.get("rayclusters", ns, cluster)
        if head is None or rc is None or not self._cluster_ready(ns, cluster):
            return {}
        ip = head["status"]["podIP"]
        try:
            if rc["metadata"]["uid"] not in self._deployed:
                _call(ip, "PUT", "/api/serve/applications/",
                      yaml.safe_load(spec.get("serveConfigV2") or "applications: []"),
                      timeout=30)
                self._deployed.add(rc["metadata"]["uid"])
            reply = _call(ip, "GET", "/api/serve/applications/")
        except OSError:
            return {}
        return {name: {"status": str(a.get("status") or ""),
                       "message": str(a.get("message") or "")[:200],
                       "serveDeploymentStatuses": {
                           d: {"status": str(v.get("status") or "")}
                           for d, v in (a.get("deployments") or {}).items()}}
                for name, a in ((reply or {}).get("applications") or {}).items()}

    def _serve_service(self, rs: dict, active: str) -> None:
        meta = rs["metadata"]
        ns, name = meta["namespace"], f"{meta['name']}-serve-svc"
        selector = {"ray.io/cluster": active, "ray.io/serve": "true"}
        svc = self.api.store.get("services", ns, name)
        if svc is None:
            self.api.create(R.BUILTIN["services"], ns, {"metadata": {
                "name": name, "namespace": ns, "labels": {"ray.io/serve": f"{meta['name']}-serve"},
                "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayService",
                                     "name": meta["name"], "uid": meta["uid"],
                                     "controller": True}]},
                "spec": {"selector": selector, "ports": [
                    {"name": "serve", "port": 8000, "targetPort": 8000, "protocol": "TCP"}]}})
        elif svc["spec"].get("selector") != selector:
            self.api.update(R.BUILTIN["services"], ns, name,
                            {**svc, "spec": {**svc["spec"], "selector": selector}})

    def _endpoints(self, ns: str, name: str) -> int:
        ep = self.api.store.get("endpoints", ns, name) or {}
        return sum(len(s.get("addresses") or []) for s in ep.get("subsets") or [])


def default_workload(kind: str, name: str, ns: str, cluster_spec: dict,
                     loads_dir: str, submission_mode: str = "K8sJobMode",
                     gcs_ft: bool = True) -> dict:
    """The world's RayJob (a short training-like driver on the CPU worker) or RayService (the
    catalog's Serve app, a proxy on every node) over ``cluster_spec``."""
    notes = {"ray.io/ft-enabled": "true"} if gcs_ft else {}
    meta = {"name": name, "namespace": ns, "annotations": notes}
    if kind == "rayjob":
        return {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": meta, "spec": {
            "submissionMode": submission_mode, "rayClusterSpec": cluster_spec,
            "entrypoint": f"python {loads_dir}/train_steps.py --steps 600 --step-s 1",
            "entrypointResources": json.dumps({"raychaos_driver": 0.01}),
            "shutdownAfterJobFinishes": False, "backoffLimit": 0}}
    serve = {"proxy_location": "EveryNode", "http_options": {"host": "0.0.0.0", "port": 8000},
             "applications": [{"name": "raychaos", "route_prefix": "/",
                               "import_path": "serve_app:app",
                               "runtime_env": {"env_vars": {"PYTHONPATH": loads_dir}}}]}
    return {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": meta, "spec": {
        "serveConfigV2": yaml.safe_dump(serve), "rayClusterConfig": cluster_spec}}


def cluster_behind(store: Any, ns: str, kind: str, name: str) -> str:
    """The RayCluster a RayJob/RayService runs on now ('' before the operator made one)."""
    obj = store.get("rayjobs" if kind == "rayjob" else "rayservices", ns, name) or {}
    st = obj.get("status") or {}
    if kind == "rayservice":
        return str((st.get("activeServiceStatus") or {}).get("rayClusterName") or "")
    return str(st.get("rayClusterName") or "")
