"""A small stateful Kubernetes API server on 127.0.0.1 for the ``k8s`` test tier and the bench.

Why: the Kubernetes target must be tested with the real ``kubernetes`` client over real HTTP
(no patched client methods), and it must meet the API behaviours in KUBERNETES-NOTES.md: watches
from a resourceVersion with 410 Gone, eviction answering 201 or 429 under a PodDisruptionBudget
(a ``maxUnavailable`` PDB over RayCluster pods never allows one, KubeRay #2662), cordon adding
the unschedulable taint, delete options read from the body, and KubeRay replacing a deleted head
with a new pod (new UID). It records every request as an RBAC ``(verb, group, resource)`` so a
test can check ``deploy/rbac.yaml`` grants what the code uses.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["FakeKube", "RECORDED_RBAC"]

#: every (verb, group, resource) any FakeKube in this process has served — for the RBAC test
RECORDED_RBAC: set[tuple[str, str, str]] = set()

KINDS = {"pods": "Pod", "nodes": "Node", "poddisruptionbudgets": "PodDisruptionBudget",
         "daemonsets": "DaemonSet", "rayclusters": "RayCluster", "events": "Event",
         "customresourcedefinitions": "CustomResourceDefinition",
         "networkchaos": "NetworkChaos", "leases": "Lease"}


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def selector_matches(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``."""
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: dict, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return cur


def field_matches(selector: str | None, obj: dict) -> bool:
    for term in filter(None, (selector or "").split(",")):
        neg = "!=" in term
        k, v = term.split("!=" if neg else "=", 1)
        if (str(_field(obj, k) or "") == v) == neg:
            return False
    return True


def _merge(dst: dict, patch: dict) -> None:
    for k, v in patch.items():
        if v is None:
            dst.pop(k, None)
        elif isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


def pod_ready(pod: dict) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True"
               for c in pod.get("status", {}).get("conditions", []))


class FakeKube:
    """State + behaviours. ``start()`` serves it; ``url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.rv = 100
        self.store: dict[str, dict[tuple[str, str], dict]] = {k: {} for k in KINDS}
        self.log: list[tuple[int, str, str, dict]] = []  # (rv, resource, type, object)
        self.compacted_rv = 0  # watches from below this get 410 Gone
        self.requests: list[tuple[str, str, str, dict]] = []  # (method, path, verb, body)
        self.forbid: set[tuple[str, str]] = set()  # (verb, resource) → 403
        self.head_replace_delay = 0.05
        self.ready_delay = 0.05
        self.terminate_delay = 0.02
        self.replace_workers = True
        self.ready_events: dict[str, float] = {}  # pod uid → time.time() it became Ready
        self._timers: list[threading.Timer] = []
        self._server: ThreadingHTTPServer | None = None
        self.closed = False

    # --- serving -------------------------------------------------------------------------------
    def start(self) -> FakeKube:
        fake = self

        class Handler(_Handler):
            kube = fake

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()
        return self

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def stop(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify_all()
        for t in self._timers:
            t.cancel()
        if self._server:
            self._server.shutdown()
            self._server.server_close()

    def kubeconfig(self, path: str) -> str:
        """Write a kubeconfig pointing at this server; returns ``path``."""
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "fake",
               "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
               "users": [{"name": "fake", "user": {"token": "fake-token"}}],
               "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(doc, fh)
        return path

    def later(self, delay: float, fn: Any, *args: Any) -> None:
        t = threading.Timer(delay, fn, args)
        t.daemon = True
        self._timers.append(t)
        t.start()

    # --- state ---------------------------------------------------------------------------------
    def put(self, resource: str, obj: dict, event: str | None = None) -> dict:
        """Create or replace (no locking: callers hold ``self.lock``)."""
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", _now())
        meta.setdefault("labels", {})
        obj.setdefault("kind", KINDS[resource])
        key = (meta.get("namespace", ""), meta["name"])
        self.rv += 1
        meta["resourceVersion"] = str(self.rv)
        kind = event or ("MODIFIED" if key in self.store[resource] else "ADDED")
        self.store[resource][key] = obj
        self.log.append((self.rv, resource, kind, copy.deepcopy(obj)))
        self.lock.notify_all()
        return obj

    def remove(self, resource: str, ns: str, name: str) -> dict | None:
        obj = self.store[resource].pop((ns, name), None)
        if obj is not None:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.log.append((self.rv, resource, "DELETED", copy.deepcopy(obj)))
            self.lock.notify_all()
        return obj

    def compact(self) -> None:
        """Forget history, as etcd compaction does: older watches now get 410 Gone."""
        with self.lock:
            self.compacted_rv = self.rv + 1

    def get(self, resource: str, ns: str, name: str) -> dict | None:
        with self.lock:
            return copy.deepcopy(self.store[resource].get((ns, name)))

    def items(self, resource: str, ns: str | None = None) -> list[dict]:
        with self.lock:
            return [copy.deepcopy(o) for (n, _), o in self.store[resource].items()
                    if ns is None or n == ns]

    def mutating_requests(self) -> list[tuple[str, str]]:
        return [(m, p) for m, p, _, _ in self.requests if m not in ("GET", "HEAD")]

    # --- seeding: a KubeRay RayCluster ---------------------------------------------------------
    def seed_raycluster(self, name: str = "demo", ns: str = "ray", gpu_nodes: int = 2,
                        cpu_nodes: int = 1, workers_per_gpu_node: int = 2,
                        ft: bool = True) -> None:
        with self.lock:
            spec: dict[str, Any] = {"headGroupSpec": {}, "workerGroupSpecs": [
                {"groupName": "gpu", "replicas": gpu_nodes * workers_per_gpu_node}]}
            if ft:
                spec["gcsFaultToleranceOptions"] = {"redisAddress": "redis:6379"}
            rc = self.put("rayclusters", {"apiVersion": "ray.io/v1", "metadata": {
                "name": name, "namespace": ns}, "spec": spec})
            self.raycluster_uid = rc["metadata"]["uid"]
            self.put("nodes", self._node("cpu-0", gpus=0))
            for i in range(cpu_nodes - 1):
                self.put("nodes", self._node(f"cpu-{i + 1}", gpus=0))
            for i in range(gpu_nodes):
                self.put("nodes", self._node(f"gpu-{i}", gpus=8))
            self.put("pods", self._pod(name, ns, "head", "headgroup", "cpu-0"))
            for i in range(gpu_nodes):
                for _ in range(workers_per_gpu_node):
                    self.put("pods", self._pod(name, ns, "worker", "gpu", f"gpu-{i}", gpus=1))
            for i in range(gpu_nodes):  # a DaemonSet pod and a mirror pod on each GPU node
                ds = self._pod(name, ns, "worker", "gpu", f"gpu-{i}")
                ds["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "dcgm"}]
                ds["metadata"]["name"] = f"dcgm-{i}"
                ds["metadata"]["labels"] = {"ray.io/cluster": name, "app": "dcgm-exporter"}
                self.put("pods", ds)
            self.put("events", {"metadata": {"name": "pulled-1", "namespace": ns},
                                "reason": "Pulled", "involvedObject": {"name": f"{name}-head"},
                                "message": 'Successfully pulled image "rayproject/ray:2.60.0" in '
                                           "12.3s (12.3s including waiting). Image size: 1 bytes."})

    def _node(self, name: str, gpus: int) -> dict:
        alloc = {"cpu": "16", "memory": "64Gi"}
        if gpus:
            alloc["nvidia.com/gpu"] = str(gpus)
        return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
                "spec": {}, "status": {"allocatable": alloc, "addresses": [
                    {"type": "InternalIP", "address": f"10.0.0.{len(self.store['nodes']) + 1}"}]}}

    def _pod(self, cluster: str, ns: str, node_type: str, group: str, node: str,
             gpus: int = 0, ready: bool = True) -> dict:
        suffix = uuid.uuid4().hex[:8]
        name = f"{cluster}-head-{suffix}" if node_type == "head" else \
            f"{cluster}-{group}-worker-{suffix}"
        limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
        return {"metadata": {
            "name": name, "namespace": ns,
            "labels": {"ray.io/cluster": cluster, "ray.io/node-type": node_type,
                       "ray.io/group": group},
            "ownerReferences": [{"kind": "RayCluster", "name": cluster,
                                 "uid": getattr(self, "raycluster_uid", "")}]},
            "spec": {"nodeName": node, "containers": [
                {"name": "ray-head" if node_type == "head" else "ray-worker",
                 "resources": {"limits": limits}}]},
            "status": {"phase": "Running" if ready else "Pending", "podIP": "10.1.0.9",
                       "containerStatuses": [{"name": "ray", "restartCount": 0}],
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}

    # --- KubeRay and kubelet behaviours --------------------------------------------------------
    def _replace(self, old: dict) -> None:
        """KubeRay: a missing head or worker pod is recreated as a new pod (new name, new UID)."""
        labels = old["metadata"]["labels"]
        with self.lock:
            if self.closed:
                return
            cordoned = {n for (_, n), o in self.store["nodes"].items()
                        if o["spec"].get("unschedulable")}
            node = old["spec"].get("nodeName", "")
            if not node or node in cordoned:
                free = sorted(n for (_, n), o in self.store["nodes"].items()
                              if n not in cordoned
                              and (labels["ray.io/node-type"] == "head"
                                   or "nvidia.com/gpu" in o["status"]["allocatable"]))
                node = free[0] if free else ""
            gpus = int(old["spec"]["containers"][0]["resources"]["limits"].get(
                "nvidia.com/gpu", 0))
            new = self._pod(labels["ray.io/cluster"], old["metadata"]["namespace"],
                            labels["ray.io/node-type"], labels["ray.io/group"], node,
                            gpus=gpus, ready=False)
            self._from_template(new)
            if not node:
                new["spec"].pop("nodeName")
                new["status"]["conditions"].append({
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": "0/6 nodes are available: node(s) were unschedulable."})
            self.put("pods", new)
        if node:
            self.later(self.ready_delay, self._make_ready, new["metadata"]["namespace"],
                       new["metadata"]["name"])

    def _from_template(self, pod: dict) -> None:
        """KubeRay builds a pod from its group's template: its labels and container env."""
        meta = pod["metadata"]
        rc = self.store["rayclusters"].get((meta["namespace"], meta["labels"]["ray.io/cluster"]))
        spec = (rc or {}).get("spec", {})
        group = meta["labels"].get("ray.io/group")
        groups = [spec.get("headGroupSpec") or {}] if meta["labels"].get(
            "ray.io/node-type") == "head" else [g for g in spec.get("workerGroupSpecs") or []
                                                if g.get("groupName") == group]
        template = (groups[0] if groups else {}).get("template") or {}
        meta["labels"].update((template.get("metadata") or {}).get("labels") or {})
        containers = (template.get("spec") or {}).get("containers") or [{}]
        if containers[0].get("env"):
            pod["spec"]["containers"][0]["env"] = copy.deepcopy(containers[0]["env"])

    def _make_ready(self, ns: str, name: str) -> None:
        with self.lock:
            pod = self.store["pods"].get((ns, name))
            if pod is None or self.closed:
                return
            pod["status"]["phase"] = "Running"
            pod["status"]["conditions"][0]["status"] = "True"
            self.ready_events[pod["metadata"]["uid"]] = time.time()
            self.put("pods", pod)

    def _finish_termination(self, ns: str, name: str) -> None:
        with self.lock:
            if self.closed:
                return
            old = self.remove("pods", ns, name)
        if old and self.replace_workers and self._is_ray(old):
            self._replace(old)

    @staticmethod
    def _is_ray(pod: dict) -> bool:
        refs = pod["metadata"].get("ownerReferences", [])
        return any(r["kind"] == "RayCluster" for r in refs)

    def delete_pod(self, ns: str, name: str) -> dict | None:
        with self.lock:
            old = self.remove("pods", ns, name)
        if old and self._is_ray(old):
            is_head = old["metadata"]["labels"].get("ray.io/node-type") == "head"
            delay = self.head_replace_delay if is_head else self.terminate_delay
            if is_head or self.replace_workers:
                self.later(delay, self._replace, old)
        return old

    def pdb_verdict(self, pod: dict) -> str | None:
        """Why an eviction of ``pod`` is forbidden (a message), or None. Caller holds the lock."""
        if pod["status"].get("phase") == "Pending":
            return None
        ns = pod["metadata"]["namespace"]
        for (n, _), pdb in self.store["poddisruptionbudgets"].items():
            sel = ",".join(f"{k}={v}" for k, v in
                           pdb["spec"].get("selector", {}).get("matchLabels", {}).items())
            if n != ns or not selector_matches(sel, pod["metadata"]["labels"]):
                continue
            allowed = self._disruptions_allowed(pdb, sel, ns)
            pdb["status"] = {"disruptionsAllowed": allowed}
            if allowed < 1:
                return "Cannot evict pod as it would violate the pod's disruption budget."
        return None

    def _disruptions_allowed(self, pdb: dict, sel: str, ns: str) -> int:
        pods = [p for (n, _), p in self.store["pods"].items()
                if n == ns and selector_matches(sel, p["metadata"]["labels"])]
        healthy = sum(1 for p in pods if pod_ready(p) and "deletionTimestamp" not in p["metadata"])
        spec = pdb["spec"]
        if "maxUnavailable" in spec:
            if any(self._is_ray(p) for p in pods):  # no scale subresource on rayclusters
                return 0
            return max(0, healthy - (len(pods) - int(spec["maxUnavailable"])))
        return max(0, healthy - int(spec.get("minAvailable", 0)))

    def evict(self, ns: str, name: str) -> tuple[int, dict]:
        with self.lock:
            pod = self.store["pods"].get((ns, name))
            if pod is None:
                return 404, _status(404, "NotFound", f'pods "{name}" not found')
            why = self.pdb_verdict(pod)
            if why:
                return 429, _status(429, "TooManyRequests", why)
            pod["metadata"]["deletionTimestamp"] = _now()
            pod["status"]["conditions"] = [
                {"type": "Ready", "status": "False"},
                {"type": "DisruptionTarget", "status": "True",
                 "reason": "EvictionByEvictionAPI"}]
            self.put("pods", pod)
        self.later(self.terminate_delay, self._finish_termination, ns, name)
        return 201, {"kind": "Status", "apiVersion": "v1", "status": "Success"}


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": message}


PATH = re.compile(r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
                  r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<res>[^/]+)(?:/(?P<name>[^/]+))?"
                  r"(?:/(?P<sub>[^/]+))?$")


class _Handler(BaseHTTPRequestHandler):
    """Routes one request to :class:`FakeKube`; JSON in, JSON (or a chunked watch) out."""

    kube: FakeKube
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else delayed ACKs add ~40 ms to every reply

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet tests
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}") if n else {}

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._route("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")

    def _route(self, method: str) -> None:
        url = urlsplit(self.path)
        q = {k: v[-1] for k, v in parse_qs(url.query).items()}
        body = self._body() if method != "GET" else {}
        m = PATH.match(url.path)
        if not m:
            return self._send(404, _status(404, "NotFound", f"no route {url.path}"))
        group = m["g"] or ""
        res, name, sub, ns = m["res"], m["name"], m["sub"], m["ns"] or ""
        watch = q.get("watch") in ("true", "1")
        verb = {"GET": "watch" if watch else ("get" if name else "list"), "POST": "create",
                "PATCH": "patch", "DELETE": "delete" if name else "deletecollection"}[method]
        resource = f"{res}/{sub}" if sub else res
        k = self.kube
        k.requests.append((method, self.path, verb, body))
        RECORDED_RBAC.add((verb, group, resource))
        if (verb, resource) in k.forbid:
            return self._send(403, _status(403, "Forbidden", f'{resource} is forbidden: User '
                                           f'"system:serviceaccount:ray:raychaos" cannot {verb}'
                                           f' resource "{resource}" in namespace "{ns}"'))
        if res not in k.store:
            return self._send(404, _status(404, "NotFound", f"the server could not find the "
                                           f"requested resource ({resource})"))
        if watch:
            return self._watch(res, ns, q)
        if sub == "eviction":
            return self._send(*k.evict(ns, name))
        if sub:
            return self._send(404, _status(404, "NotFound", f"no subresource {sub}"))
        if method == "GET":
            return self._get(res, ns, name, q)
        if method == "POST":
            body.setdefault("metadata", {})["namespace"] = ns if ns else None
            if not ns:
                body["metadata"].pop("namespace")
            with k.lock:
                if (ns, body["metadata"].get("name")) in k.store[res]:
                    return self._send(409, _status(409, "AlreadyExists", "already exists"))
                obj = k.put(res, body)
            return self._send(201, obj)
        if method == "PATCH":
            with k.lock:
                obj = k.store[res].get((ns, name))
                if obj is None:
                    return self._send(404, _status(404, "NotFound", f'{res} "{name}" not found'))
                _merge(obj, body)
                if res == "nodes":
                    taints = [t for t in obj["spec"].get("taints", [])
                              if t["key"] != "node.kubernetes.io/unschedulable"]
                    if obj["spec"].get("unschedulable"):
                        taints.append({"key": "node.kubernetes.io/unschedulable",
                                       "effect": "NoSchedule"})
                    obj["spec"]["taints"] = taints
                obj = k.put(res, obj)
            return self._send(200, obj)
        # DELETE: options come from the body; a query grace period is ignored when a body is sent
        if res == "pods":
            obj = k.delete_pod(ns, name)
        else:
            with k.lock:
                obj = k.remove(res, ns, name)
        if obj is None:
            return self._send(404, _status(404, "NotFound", f'{res} "{name}" not found'))
        return self._send(200, obj)

    def _get(self, res: str, ns: str, name: str | None, q: dict) -> None:
        k = self.kube
        if name:
            obj = k.get(res, ns, name)
            if obj is None:
                return self._send(404, _status(404, "NotFound", f'{res} "{name}" not found'))
            return self._send(200, obj)
        with k.lock:
            items = [copy.deepcopy(o) for (n, _), o in k.store[res].items()
                     if (not ns or n == ns)
                     and selector_matches(q.get("labelSelector"), o["metadata"]["labels"])
                     and field_matches(q.get("fieldSelector"), o)]
            if res == "poddisruptionbudgets":
                for pdb in items:
                    sel = ",".join(f"{a}={b}" for a, b in
                                   pdb["spec"]["selector"].get("matchLabels", {}).items())
                    pdb["status"] = {"disruptionsAllowed": k._disruptions_allowed(
                        pdb, sel, pdb["metadata"]["namespace"])}
            rv = str(k.rv)
        self._send(200, {"kind": KINDS[res] + "List", "apiVersion": "v1",
                         "metadata": {"resourceVersion": rv}, "items": items})

    def _watch(self, res: str, ns: str, q: dict) -> None:
        k = self.kube
        start = int(q.get("resourceVersion") or 0)
        deadline = time.monotonic() + float(q.get("timeoutSeconds") or 30)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(obj: dict) -> None:
            data = json.dumps(obj).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        try:
            if start and start < k.compacted_rv:
                chunk({"type": "ERROR", "object": _status(
                    410, "Expired", f"too old resource version: {start} ({k.compacted_rv})")})
                return
            seen = start
            while True:
                with k.lock:
                    batch = [(rv, t, o) for rv, r, t, o in k.log
                             if rv > seen and r == res
                             and (not ns or o["metadata"].get("namespace") == ns)]
                    if not batch:
                        left = deadline - time.monotonic()
                        if left <= 0 or k.closed:
                            return
                        k.lock.wait(min(left, 0.5))
                        continue
                for rv, typ, obj in batch:
                    seen = rv
                    if selector_matches(q.get("labelSelector"), obj["metadata"]["labels"]):
                        chunk({"type": typ, "object": obj})
        except (BrokenPipeError, ConnectionResetError):
            return
        finally:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass
