"""KubeRay for the world: the ``ray.io/v1 RayCluster`` operator.

It does what kuberay-operator does for a RayCluster, in its shapes: the head Service
(``<cluster>-head-svc`` or ``headGroupSpec.headService.metadata.name``) and a Serve Service
selecting ``ray.io/serve: "true"``; the head pod and ``replicas`` worker pods per group with
KubeRay's labels, ownerReferences, ``ray start ... --block`` built from ``rayStartParams``
(num-cpus/memory/num-gpus defaulted from the container's limits, as KubeRay does), its env
(``RAY_gcs_rpc_server_reconnect_timeout_s=600`` on workers with GCS FT, an explicit
``RAY_AUTH_MODE``), the ``shared-mem`` /dev/shm volume, a ``wait-gcs-ready`` init container on
workers, and readiness probes on the dashboard's health endpoints. A missing head or worker is
recreated as a NEW pod (after ``replacement_delay_s``); a Failed head pod (``restartPolicy:
Never``) is deleted and replaced. Status: state, head (podIP, serviceName…), worker counts.

GCS fault tolerance (``spec.gcsFaultToleranceOptions`` or annotation ``ray.io/ft-enabled``):
the head gets Ray's ``RAY_gcs_storage=rocksdb`` on a per-cluster hostPath folder, so GCS state
survives both a container restart and a new head pod (see the world's README for why not Redis).
"""

from __future__ import annotations

import copy
import json
import shlex
import time
from pathlib import Path
from typing import Any

from tests.k8s.world import resources as R
from tests.k8s.world.api import Api
from tests.k8s.world.controllers import pod_ready, record_event
from tests.k8s.world.scheduler import quantity
from tests.k8s.world.store import now

__all__ = ["KubeRay", "gcs_ft_enabled", "RAYCLUSTER_CRDS"]

HEAD_PORTS = [("gcs-server", 6379), ("dashboard", 8265), ("client", 10001), ("metrics", 8080)]
SERVICE_PORTS = HEAD_PORTS + [("serve", 8000)]


def _crd(plural: str, kind: str, group: str = "ray.io", versions: tuple = ("v1",)) -> dict:
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced",
                     "names": {"plural": plural, "singular": kind.lower(), "kind": kind,
                               "listKind": kind + "List"},
                     "versions": [{"name": v, "served": True, "storage": i == 0,
                                   "subresources": {"status": {}}}
                                  for i, v in enumerate(versions)]}}


RAYCLUSTER_CRDS = [_crd("rayclusters", "RayCluster"), _crd("rayjobs", "RayJob"),
                   _crd("rayservices", "RayService")]


def gcs_ft_enabled(rc: dict) -> bool:
    notes = rc["metadata"].get("annotations") or {}
    return bool(rc["spec"].get("gcsFaultToleranceOptions")) or \
        str(notes.get("ray.io/ft-enabled", "")).lower() == "true"


def _flag(key: str, value: Any) -> str:
    if str(value).lower() == "true" and key in ("block", "head"):
        return f"--{key}"
    return f"--{key}={shlex.quote(str(value))}"


class KubeRay:
    def __init__(self, api: Api, storage_root: Path, replacement_delay_s: float = 0.0,
                 head_delay_s: float = 0.0, head_restart_policy: str | None = None,
                 probe_period_s: int = 1):
        self.api = api
        self.storage_root = Path(storage_root)
        self.replacement_delay_s = replacement_delay_s
        self.head_delay_s = head_delay_s
        self.head_restart_policy = head_restart_policy
        self.probe_period_s = probe_period_s
        self._missing_since: dict[tuple[str, str, str], float] = {}

    def reconcile(self) -> None:
        with self.api.store.lock:
            for rc in self.api.store.list("rayclusters"):
                if not rc["metadata"].get("deletionTimestamp"):
                    self._cluster(rc)

    # --- one RayCluster ------------------------------------------------------------------------
    def _cluster(self, rc: dict) -> None:
        api, store = self.api, self.api.store
        meta, spec = rc["metadata"], rc["spec"]
        ns, name = meta["namespace"], meta["name"]
        self._services(rc)
        self._token_secret(rc)
        pods = [p for p in store.list("pods", ns, f"ray.io/cluster={name}")
                if any(r.get("uid") == meta["uid"] for r in
                       p["metadata"].get("ownerReferences") or [])]
        for p in pods:  # a pod that ended (restartPolicy Never/OnFailure) is replaced
            if p.get("status", {}).get("phase") in ("Failed", "Succeeded") and \
                    not p["metadata"].get("deletionTimestamp"):
                api.delete(R.BUILTIN["pods"], ns, p["metadata"]["name"], {"gracePeriodSeconds": 0})
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")
                and p.get("status", {}).get("phase") not in ("Failed", "Succeeded")]
        heads = [p for p in live if p["metadata"]["labels"].get("ray.io/node-type") == "head"]
        if not heads and self._due((ns, name, "head"), self.head_delay_s):
            self._create(rc, spec["headGroupSpec"], "head", "headgroup")
        groups = spec.get("workerGroupSpecs") or []
        for g in groups:
            gname = g["groupName"]
            mine = [p for p in live if p["metadata"]["labels"].get("ray.io/group") == gname
                    and p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
            doomed = set((g.get("scaleStrategy") or {}).get("workersToDelete") or [])
            for p in mine:
                if p["metadata"]["name"] in doomed:
                    api.delete(R.BUILTIN["pods"], ns, p["metadata"]["name"], None)
            mine = [p for p in mine if p["metadata"]["name"] not in doomed]
            want = 0 if spec.get("suspend") else int(g.get("replicas", g.get("minReplicas", 0)))
            if len(mine) < want and heads and \
                    self._due((ns, name, gname), self.replacement_delay_s if pods else 0.0):
                for _ in range(want - len(mine)):
                    self._create(rc, g, "worker", gname)
            for p in sorted(mine, key=lambda p: (pod_ready(p), p["metadata"]["name"]))[
                    : max(0, len(mine) - want)]:
                api.delete(R.BUILTIN["pods"], ns, p["metadata"]["name"], None)
        self._status(rc, heads, live, groups)

    def _due(self, key: tuple[str, str, str], delay: float) -> bool:
        first = self._missing_since.setdefault(key, time.monotonic())
        if time.monotonic() - first >= delay:
            self._missing_since.pop(key, None)
            return True
        return False

    def head_service_name(self, rc: dict) -> str:
        hs = rc["spec"]["headGroupSpec"].get("headService") or {}
        return (hs.get("metadata") or {}).get("name") or f"{rc['metadata']['name']}-head-svc"

    def _owner(self, rc: dict) -> list[dict]:
        return [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": rc["metadata"]["name"],
                 "uid": rc["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]

    def _token_secret(self, rc: dict) -> None:
        """With ``authOptions.mode: token``: a Secret named after the cluster holding a random
        ``auth_token``, as kuberay-operator creates it."""
        import base64
        import secrets
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        if ((rc["spec"].get("authOptions") or {}).get("mode") or "").lower() != "token" or \
                self.api.store.raw("secrets", ns, name) is not None:
            return
        token = base64.b64encode(secrets.token_hex(24).encode()).decode()
        self.api.create(R.BUILTIN["secrets"], ns, {"metadata": {
            "name": name, "namespace": ns, "ownerReferences": self._owner(rc)},
            "type": "Opaque", "data": {"auth_token": token}})

    def _services(self, rc: dict) -> None:
        ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
        common = {"app.kubernetes.io/name": "kuberay",
                  "app.kubernetes.io/created-by": "kuberay-operator", "ray.io/cluster": name}
        for svc_name, node_type, sel, ports in (
                (self.head_service_name(rc), "head",
                 {"ray.io/cluster": name, "ray.io/node-type": "head"}, SERVICE_PORTS),
                (f"{name}-serve-svc", "serve", {"ray.io/cluster": name, "ray.io/serve": "true"},
                 [("serve", 8000)])):
            if self.api.store.raw("services", ns, svc_name) is not None:
                continue
            self.api.create(R.BUILTIN["services"], ns, {"metadata": {
                "name": svc_name, "namespace": ns, "ownerReferences": self._owner(rc),
                "labels": common | {"ray.io/node-type": node_type,
                                    "ray.io/identifier": f"{name}-{node_type}"}},
                "spec": {"selector": sel, "ports": [
                    {"name": n, "port": p, "targetPort": p, "protocol": "TCP"}
                    for n, p in ports],
                    # as KubeRay's head Service (common/service.go): the head's address is
                    # published while its health checks fail (a slow GCS, a restart); KubeRay
                    # makes it headless too, here it keeps a virtual IP
                    **({"publishNotReadyAddresses": True} if node_type == "head" else {})}})

    # --- pods ----------------------------------------------------------------------------------
    def _create(self, rc: dict, group: dict, node_type: str, gname: str) -> None:
        pod = self.build_pod(rc, group, node_type, gname)
        code, reply = self.api.create(R.BUILTIN["pods"], rc["metadata"]["namespace"], pod)
        if code == 201:
            kind = "Head" if node_type == "head" else "Worker"
            record_event(self.api, rc, f"Created{kind}Pod", f"Created {node_type} Pod "
                         f"{rc['metadata']['namespace']}/{reply['metadata']['name']}",
                         "raycluster-controller")

    def build_pod(self, rc: dict, group: dict, node_type: str, gname: str) -> dict:
        meta, spec = rc["metadata"], rc["spec"]
        ns, name = meta["namespace"], meta["name"]
        ft = gcs_ft_enabled(rc)
        tmpl = copy.deepcopy(group.get("template") or {})
        pmeta = tmpl.setdefault("metadata", {})
        pspec = tmpl.setdefault("spec", {})
        pmeta["generateName"] = f"{name}-head-" if node_type == "head" else \
            f"{name}-{gname}-worker-"
        pmeta["namespace"] = ns
        pmeta.setdefault("labels", {}).update({
            "ray.io/cluster": name, "ray.io/node-type": node_type, "ray.io/group": gname,
            "ray.io/is-ray-node": "yes", "ray.io/identifier": f"{name}-{node_type}",
            "app.kubernetes.io/name": "kuberay",
            "app.kubernetes.io/created-by": "kuberay-operator"})
        pmeta.setdefault("annotations", {})["ray.io/ft-enabled"] = str(ft).lower()
        pmeta["ownerReferences"] = self._owner(rc)
        if node_type == "head" and self.head_restart_policy:
            pspec["restartPolicy"] = self.head_restart_policy
        svc = f"{self.head_service_name(rc)}.{ns}.svc.cluster.local"
        c = pspec["containers"][0]
        params = {str(k): v for k, v in (group.get("rayStartParams") or {}).items()}
        limits = (c.get("resources") or {}).get("limits") or {}
        if "num-cpus" not in params and "cpu" in limits:
            params["num-cpus"] = str(max(0, int(quantity(limits["cpu"]))))
        if "memory" not in params and "memory" in limits:
            params["memory"] = str(int(quantity(limits["memory"])))
        if "num-gpus" not in params and "nvidia.com/gpu" in limits:
            params["num-gpus"] = str(int(quantity(limits["nvidia.com/gpu"])))
        for key in ("resources", "labels"):
            if isinstance(params.get(key), dict):
                params[key] = json.dumps(params[key])
        if node_type == "head":
            params.setdefault("dashboard-host", "0.0.0.0")
            params.setdefault("port", "6379")
            args = ["ray start --head"]
        else:
            args = [f"ray start --address={svc}:6379"]
        params.setdefault("metrics-export-port", "8080")
        params.setdefault("dashboard-agent-listen-port", "52365")
        args += [_flag(k, v) for k, v in params.items() if k not in ("block", "head", "address")]
        args.append("--block")
        cmd = " ".join(args)
        overwrite = (pmeta.get("annotations") or {}).get("ray.io/overwrite-container-cmd")
        if overwrite != "true":
            c["command"] = ["/bin/bash", "-lc", "--"]
            c["args"] = [f"ulimit -n 65536; {cmd}"]
        env = c.setdefault("env", [])
        have = {e["name"] for e in env}
        auth = ((spec.get("authOptions") or {}).get("mode") or "disabled").lower()
        add: list[dict[str, Any]] = [
            {"name": "RAY_CLUSTER_NAME", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.labels['ray.io/cluster']"}}},
            {"name": "RAY_CLOUD_INSTANCE_ID", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.name"}}},
            {"name": "RAY_NODE_TYPE_NAME", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.labels['ray.io/group']"}}},
            {"name": "KUBERAY_GEN_RAY_START_CMD", "value": cmd},
            {"name": "RAY_PORT", "value": "6379"},
            {"name": "RAY_ADDRESS", "value": "127.0.0.1:6379" if node_type == "head"
             else f"{svc}:6379"},
            {"name": "RAY_USAGE_STATS_KUBERAY_IN_USE", "value": "1"},
            {"name": "RAY_USAGE_STATS_ENABLED", "value": "0"},
            {"name": "RAY_AUTH_MODE", "value": "token" if auth == "token" else "disabled"},
            {"name": "RAY_DASHBOARD_ENABLE_K8S_DISK_USAGE", "value": "1"}]
        if auth == "token":  # the Secret the operator made (KubeRay >= 1.5.1 authOptions)
            add.append({"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": name, "key": "auth_token"}}})
        if node_type != "head":
            add += [{"name": "FQ_RAY_IP", "value": svc},
                    {"name": "RAY_IP", "value": self.head_service_name(rc)}]
        if ft and node_type == "head":
            add += [{"name": "RAY_external_storage_namespace", "value": (meta.get(
                        "annotations") or {}).get("ray.io/external-storage-namespace",
                                                  meta["uid"])},
                    {"name": "RAY_gcs_storage", "value": "rocksdb"},
                    {"name": "RAY_gcs_storage_path", "value": "/tmp/ray-gcs"}]
        if ft and node_type != "head":
            add.append({"name": "RAY_gcs_rpc_server_reconnect_timeout_s", "value": "600"})
        env += [e for e in add if e["name"] not in have]
        if node_type == "head":
            ports = c.setdefault("ports", [])
            for pname, port in HEAD_PORTS:
                if not any(p.get("containerPort") == port for p in ports):
                    ports.append({"containerPort": port, "name": pname, "protocol": "TCP"})
        mounts = c.setdefault("volumeMounts", [])
        vols = pspec.setdefault("volumes", [])
        if not any(m.get("mountPath") == "/dev/shm" for m in mounts):
            vols.append({"name": "shared-mem", "emptyDir": {
                "medium": "Memory", "sizeLimit": limits.get("memory", "1Gi")}})
            mounts.append({"name": "shared-mem", "mountPath": "/dev/shm"})
        if ft and node_type == "head":
            folder = self.storage_root / f"{ns}-{name}-{meta['uid'][:8]}"
            vols.append({"name": "ray-gcs-storage", "hostPath": {
                "path": str(folder), "type": "DirectoryOrCreate"}})
            mounts.append({"name": "ray-gcs-storage", "mountPath": "/tmp/ray-gcs"})
        path, port = ("/api/gcs_healthz", 8265) if node_type == "head" else \
            ("/api/local_raylet_healthz", 52365)
        c.setdefault("readinessProbe", {"httpGet": {"path": path, "port": port},
                                        "initialDelaySeconds": 0, "timeoutSeconds": 2,
                                        "periodSeconds": self.probe_period_s,
                                        "successThreshold": 1, "failureThreshold": 10})
        if node_type != "head":
            pspec.setdefault("initContainers", []).insert(0, {
                "name": "wait-gcs-ready", "image": c.get("image", ""),
                "imagePullPolicy": c.get("imagePullPolicy", "IfNotPresent"),
                "command": ["/bin/bash", "-lc", "--"],
                "args": [f"until (echo > /dev/tcp/{svc}/6379) 2>/dev/null; do echo wait for "
                         f"GCS to be ready; sleep 1; done"],
                "env": [{"name": "FQ_RAY_IP", "value": svc}],
                "resources": {"limits": {"cpu": "200m", "memory": "256Mi"},
                              "requests": {"cpu": "200m", "memory": "256Mi"}}})
        return {"apiVersion": "v1", "kind": "Pod", "metadata": pmeta, "spec": pspec}

    # --- status --------------------------------------------------------------------------------
    def _status(self, rc: dict, heads: list[dict], live: list[dict], groups: list[dict]) -> None:
        meta = rc["metadata"]
        workers = [p for p in live if p["metadata"]["labels"].get("ray.io/node-type") == "worker"]
        ready_workers = sum(1 for p in workers if pod_ready(p))
        desired = sum(int(g.get("replicas", 0)) for g in groups)
        head = heads[0] if heads else None
        head_ready = bool(head and pod_ready(head))
        old = rc.get("status") or {}
        state = "ready" if old.get("state") == "ready" or (
            head_ready and ready_workers >= desired) else ""
        svc = self.api.store.raw("services", meta["namespace"], self.head_service_name(rc)) or {}
        cpu = gpu = mem = 0.0
        for g in [rc["spec"]["headGroupSpec"]] + groups:
            n = 1 if g is rc["spec"]["headGroupSpec"] else int(g.get("replicas", 0))
            lim = ((g.get("template") or {}).get("spec", {}).get("containers") or [{}])[0].get(
                "resources", {}).get("limits") or {}
            cpu += n * quantity(lim.get("cpu", 0))
            gpu += n * quantity(lim.get("nvidia.com/gpu", 0))
            mem += n * quantity(lim.get("memory", 0))
        st: dict[str, Any] = {
            "desiredWorkerReplicas": desired, "availableWorkerReplicas": ready_workers,
            "readyWorkerReplicas": ready_workers,
            "minWorkerReplicas": sum(int(g.get("minReplicas", 0)) for g in groups),
            "maxWorkerReplicas": sum(int(g.get("maxReplicas", g.get("replicas", 0)))
                                     for g in groups),
            "desiredCPU": f"{cpu:g}", "desiredGPU": f"{gpu:g}", "desiredMemory": str(int(mem)),
            "desiredTPU": "0",
            "endpoints": {n: str(p) for n, p in SERVICE_PORTS},
            "head": {"podIP": (head or {}).get("status", {}).get("podIP", ""),
                     "podName": (head or {}).get("metadata", {}).get("name", ""),
                     "serviceIP": svc.get("spec", {}).get("clusterIP", ""),
                     "serviceName": self.head_service_name(rc)},
            "observedGeneration": meta.get("generation", 1),
            "conditions": [
                {"type": "HeadPodReady", "status": "True" if head_ready else "False",
                 "reason": "HeadPodRunningAndReady" if head_ready else "HeadPodNotFound"
                 if not head else "HeadPodNotReady"},
                {"type": "RayClusterProvisioned", "status": "True" if state else "False",
                 "reason": "AllPodRunningAndReadyFirstTime" if state else
                 "RayClusterPodsProvisioning"}]}
        if state:
            st["state"] = state
        for c in st["conditions"]:
            prev = next((o for o in old.get("conditions") or [] if o["type"] == c["type"]), None)
            c["lastTransitionTime"] = prev["lastTransitionTime"] if prev and \
                prev["status"] == c["status"] else now()
        comparable = {k: v for k, v in old.items() if k != "lastUpdateTime"}
        if comparable != st:
            st["lastUpdateTime"] = now()
            self.api.update(self.api.resolve("ray.io", "v1", "rayclusters"),  # type: ignore
                            meta["namespace"], meta["name"], {**rc, "status": st}, sub="status")
