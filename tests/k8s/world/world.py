"""``World``: the KubeRay test world — a Kubernetes API over HTTP whose pods are real Ray nodes.

It wires the parts together: the store and API server (``api``, ``server``), the controllers
(scheduler, node lifecycle, disruption, DaemonSet, endpoints, GC), KubeRay, the network
(``net``), the registry process, and the kubelets (``real`` nodes run processes, ``sim``
nodes only write status, ``none`` nodes are API objects). ``start()`` brings it up in this
process; ``stop()`` ends everything it started and returns what is left (nothing, or a bug).
The CLI (``python -m tests.k8s.world up|down``) runs one as a daemon.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from raychaos.testbed.node.runtime import MARKER, VENV_BIN, marked
from tests.k8s.world import resources as R
from tests.k8s.world._host import REGISTRY_SCRIPT
from tests.k8s.world.api import Api
from tests.k8s.world.controllers import ControllerManager, pod_ready, record_event
from tests.k8s.world.kuberay import RAYCLUSTER_CRDS, KubeRay
from tests.k8s.world.server import ApiServer
from tests.k8s.world.simkubelet import SimKubelet, running_status
from tests.k8s.world.store import Store
from tests.k8s.world.workloads import Workloads, cluster_behind, default_workload

__all__ = ["World", "NodeSpec", "default_nodes", "default_raycluster", "STATE_ROOT"]

log = logging.getLogger("world")
STATE_ROOT = Path("/tmp/raychaos-world")
IMAGE = "registry.raychaos.test/rayproject/ray:2.60.0"
GiB = 1 << 30


@dataclass
class NodeSpec:
    name: str
    cpu: str = "2"
    memory: str = "8Gi"
    gpus: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[dict] = field(default_factory=list)
    kubelet: str = "real"  # real | sim | none


def default_nodes(kubelet: str = "real") -> list[NodeSpec]:
    gpu_taint = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    # The head node is the biggest machine, as a production head node often is: each node's
    # CPU group weighs its capacity, so on this 2-core box a restarting head wins the CPU from a
    # storm on the workers as a head on a machine of its own would (at the workers' weight, a
    # restart's dozen Python processes took 40 s to start the dashboard agent, past the
    # raylet's fixed 15 s wait: a crash loop no real cluster shows).
    return [NodeSpec("head-0", cpu="8", labels={"raychaos.io/node-pool": "head"},
                     kubelet=kubelet),
            NodeSpec("cpu-0", labels={"raychaos.io/node-pool": "cpu"}, kubelet=kubelet),
            *[NodeSpec(f"gpu-{x}", gpus=1, labels={"raychaos.io/node-pool": "gpu",
                                                   "nvidia.com/gpu.present": "true"},
                       taints=gpu_taint, kubelet=kubelet) for x in ("a", "b")]]


def default_raycluster(name: str, ns: str, gcs_ft: bool = True, image: str = IMAGE,
                       head_env: dict[str, str] | None = None) -> dict:
    """Head (0 CPUs) + a GPU worker (1 CPU, 1 logical GPU) + a CPU worker carrying the
    ``raychaos_driver`` resource; explicit memory and object store sizes on every node.
    ``head_env``: variables of the head container (the GCS's settings, as a user sets them)."""
    mem = {"memory": str(GiB), "object-store-memory": str(150 * 10**6)}
    res = {"limits": {"cpu": "1", "memory": "2Gi"}, "requests": {"cpu": "1", "memory": "2Gi"}}

    def tmpl(cname: str, pool: str, extra: dict | None = None, **spec: Any) -> dict:
        r = json.loads(json.dumps(res))
        for k in ("limits", "requests"):
            r[k].update(extra or {})
        return {"spec": {"nodeSelector": {"raychaos.io/node-pool": pool}, **spec, "containers": [
            {"name": cname, "image": image, "imagePullPolicy": "IfNotPresent", "resources": r}]}}

    gpu_tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    head = tmpl("ray-head", "head")
    if head_env:
        head["spec"]["containers"][0]["env"] = [{"name": k, "value": v}
                                                for k, v in sorted(head_env.items())]
    return {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns,
                     "annotations": {"ray.io/ft-enabled": "true"} if gcs_ft else {}},
        "spec": {"rayVersion": "2.60.0",
                 "headGroupSpec": {"rayStartParams": {"num-cpus": "0", **mem,
                                                      "dashboard-host": "0.0.0.0"},
                                   "template": head},
                 "workerGroupSpecs": [
                     {"groupName": "gpu", "replicas": 1, "minReplicas": 0, "maxReplicas": 2,
                      "rayStartParams": {"num-cpus": "1", "num-gpus": "1", **mem,
                                         "labels": json.dumps({"raychaos.io/node-group": "gpu"})},
                      "template": tmpl("ray-worker", "gpu", {"nvidia.com/gpu": "1"},
                                       tolerations=gpu_tol)},
                     {"groupName": "cpu", "replicas": 1, "minReplicas": 0, "maxReplicas": 2,
                      "rayStartParams": {"num-cpus": "1", **mem,
                                         "resources": json.dumps({"raychaos_driver": 1})},
                      "template": tmpl("ray-worker", "cpu")}]}}


class World:
    def __init__(self, name: str = "raychaos", namespace: str = "ray", cluster: str | None = "demo",
                 gcs_ft: bool = True, nodes: list[NodeSpec] | None = None,
                 state_root: Path | str = STATE_ROOT, replacement_delay_s: float = 0.0,
                 head_delay_s: float = 0.0, head_restart_policy: str | None = None,
                 image_mb: float = 16.0, allow_privileged: bool = True,
                 restart_backoff_s: float = 10.0, port: int = 0, keep_state: bool = False,
                 controllers: set[str] | None = None, chaos_mesh: bool = False,
                 workload: str | None = None, submission_mode: str = "K8sJobMode",
                 head_env: dict[str, str] | None = None):
        self.name, self.namespace, self.cluster, self.gcs_ft = name, namespace, cluster, gcs_ft
        self.head_env = head_env
        self.node_specs = nodes if nodes is not None else default_nodes()
        self.state_dir = Path(state_root) / name
        self.image_mb, self.port, self.keep_state = image_mb, port, keep_state
        self.restart_backoff_s = restart_backoff_s
        self.store = Store()
        self.api = Api(self.store, allow_privileged=allow_privileged)
        self.server = ApiServer(self.api)
        self.controllers = ControllerManager(self.api, enabled=controllers)
        self.kuberay = KubeRay(self.api, self.state_dir / "gcs", replacement_delay_s,
                               head_delay_s, head_restart_policy)
        self.sim = SimKubelet(self.api)
        self.net: Any = None
        self.kubelet: Any = None
        self.services: Any = None
        self.registry: subprocess.Popen | None = None
        self.started = False
        self.needs_host = any(n.kubelet == "real" for n in self.node_specs)
        self.chaos_mesh = chaos_mesh
        # rayjob | rayservice: ``cluster`` names that object; the RayCluster is the operator's
        self.workload, self.workload_name = workload, cluster if workload else None
        self.submission_mode = submission_mode
        self.workloads = Workloads(self.api) if workload else None

    # --- handy ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return self.server.url

    @property
    def kubeconfig(self) -> str:
        return str(self.state_dir / "kubeconfig")

    @property
    def rbac(self) -> set[tuple[str, str, str]]:
        return self.server.rbac

    def proxy_url(self, service: str | None = None, port: int | str = 8265,
                  ns: str | None = None) -> str:
        """The API server's service proxy URL for ``service:port`` (the head svc by default)."""
        svc = service or f"{self.cluster}-head-svc"
        return f"{self.url}/api/v1/namespaces/{ns or self.namespace}/services/{svc}:{port}/proxy"

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self) -> World:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        if self.needs_host and os.geteuid() != 0:
            raise RuntimeError("a world with real nodes needs root (network namespaces)")
        if self.needs_host and Path(VENV_BIN).is_relative_to("/tmp"):
            raise RuntimeError(f"a world with real nodes needs the checkout and its .venv outside "
                               f"/tmp ({VENV_BIN}): each container gets a private /tmp, so its "
                               "`ray` would not be found and no pod would become Ready")
        pid_file = self.state_dir / "daemon.pid"
        if pid_file.exists() and _alive(int(pid_file.read_text() or 0)) and \
                int(pid_file.read_text()) != os.getpid():
            raise RuntimeError(f"world {self.name} is already running (pid file {pid_file})")
        if self.needs_host and self.state_dir.exists():
            cleanup(self.name, self.state_dir.parent, keep_state=True)  # an earlier crash's
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.started = True
        self.server.start(self.port)
        self._write_kubeconfig()
        for ns in ("default", "kube-system", self.namespace):
            self.api.create(R.BUILTIN["namespaces"], "", {"metadata": {"name": ns}})
        for crd in RAYCLUSTER_CRDS:
            self.api.create(R.BUILTIN["customresourcedefinitions"], "", json.loads(json.dumps(crd)))
        if self.needs_host:
            self._start_host()
        for spec in self.node_specs:
            self.add_node(spec)
        self.controllers.add("kuberay", self.kuberay.reconcile)
        self.controllers.add("simkubelet", self.sim.sync)
        if self.kubelet is not None:
            self.controllers.add("kubelet", self.kubelet.sync)
            self.controllers.add("kube-proxy", self.services.sync)
            self.services.start_serve_prober()
            if self.chaos_mesh:
                from tests.k8s.world.chaosmesh import NETWORKCHAOS_CRD, ChaosMesh
                self.api.create(R.BUILTIN["customresourcedefinitions"], "",
                                json.loads(json.dumps(NETWORKCHAOS_CRD)))
                self.controllers.add("chaos-mesh", ChaosMesh(self.api, self.kubelet).reconcile)
        self.controllers.start()
        if self.workload and self.workloads is not None and self.workload_name:
            self.workloads.start()
            body = default_workload(self.workload, self.workload_name, self.namespace,
                                    default_raycluster("x", self.namespace, self.gcs_ft)["spec"],
                                    str(Path(__file__).resolve().parents[3] / "loads"),
                                    self.submission_mode, self.gcs_ft)
            self.api.create(self.api.resolve("ray.io", "v1", self.workload + "s"),
                            self.namespace, body)
        elif self.cluster:
            rc = default_raycluster(self.cluster, self.namespace, self.gcs_ft,
                                    head_env=self.head_env)
            self.api.create(self.api.resolve("ray.io", "v1", "rayclusters"), self.namespace, rc)

    def _start_host(self) -> None:
        from raychaos.testbed.node.kubelet import Kubelet
        from raychaos.testbed.node.net import WorldNet
        from tests.k8s.world.services import Services
        self.net = WorldNet(self.name)
        self.net.setup()
        self.api.service_ip_alloc = self.net.alloc_service_ip
        self.services = Services(self)
        self.kubelet = Kubelet(self.api, self.net, self.state_dir, self.name,
                               self.services.hosts_text, partial(record_event, self.api),
                               nice_for=_nice_for,
                               restart_backoff_s=self.restart_backoff_s)
        self.server.backend = self.kubelet
        self.server.proxy = self.services.proxy
        env = dict(os.environ, **{MARKER: f"{self.name}/registry"})
        self.registry = subprocess.Popen(
            ["ip", "netns", "exec", self.net.registry_netns, sys.executable, REGISTRY_SCRIPT,
             "serve", self.net.registry_ip, "80", str(self.image_mb)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        assert self.registry.stdout is not None
        line = self.registry.stdout.readline()
        if b"listening" not in line:
            raise RuntimeError(f"the world registry did not start: {line!r}")

    def add_node(self, spec: NodeSpec) -> dict:
        """Create a Node (and, for ``real``, its network namespace and kubelet)."""
        host_ip = "127.0.0.1"
        if spec.kubelet == "real":
            host_ip = self.net.add_node(spec.name).uplink_ip
            from tests.k8s.world.scheduler import quantity
            self.kubelet.add_node(spec.name, quantity(spec.cpu))
            self.net.write_hosts(self.services.hosts_text(), [self.net.nodes[spec.name].netns])
        elif spec.kubelet == "sim":
            self.sim.add_node(spec.name, host_ip)
        alloc = {"cpu": spec.cpu, "memory": spec.memory, "pods": "110"}
        if spec.gpus:
            alloc["nvidia.com/gpu"] = str(spec.gpus)
        labels = {"beta.kubernetes.io/os": "linux", "kubernetes.io/hostname": spec.name,
                  "kubernetes.io/os": "linux", **spec.labels}
        ts = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        node = {"metadata": {"name": spec.name, "labels": labels,
                             "annotations": {"world.raychaos.test/kubelet": spec.kubelet}},
                "spec": {**({"taints": spec.taints} if spec.taints else {})},
                "status": {"capacity": dict(alloc), "allocatable": alloc, "conditions": [
                    {"type": "Ready", "status": "True", "lastHeartbeatTime": ts,
                     "lastTransitionTime": ts, "reason": "KubeletReady",
                     "message": "kubelet is posting ready status"}],
                    "addresses": [{"type": "InternalIP", "address": host_ip},
                                  {"type": "Hostname", "address": spec.name}],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                    "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "",
                                 "kernelVersion": os.uname().release, "osImage": "raychaos world",
                                 "containerRuntimeVersion": "world://1",
                                 "kubeletVersion": "v1.36.2", "kubeProxyVersion": "",
                                 "operatingSystem": "linux", "architecture": "amd64"}}}
        return self.api.create(R.BUILTIN["nodes"], "", node)[1]

    def _write_kubeconfig(self) -> None:
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": f"world-{self.name}",
               "clusters": [{"name": self.name, "cluster": {"server": self.url}}],
               "users": [{"name": "raychaos", "user": {"token": "world-token"}}],
               "contexts": [{"name": f"world-{self.name}", "context": {
                   "cluster": self.name, "user": "raychaos", "namespace": self.namespace}}]}
        Path(self.kubeconfig).write_text(json.dumps(doc, indent=1))

    def stop(self) -> list[str]:
        """End everything this world started; returns what is left (should be [])."""
        if not self.started:
            return []
        if self.workloads is not None:
            self.workloads.stop()
        self.controllers.stop()
        if self.services is not None:
            self.services.stop()
        if self.kubelet is not None:
            self.kubelet.stop()
        if self.registry is not None and self.registry.poll() is None:
            self.registry.kill()
            self.registry.wait(timeout=10)
        self.server.stop()
        self.store.close()
        left = cleanup(self.name, self.state_dir.parent, keep_state=self.keep_state) \
            if self.needs_host else []
        if not self.needs_host and not self.keep_state:
            shutil.rmtree(self.state_dir, ignore_errors=True)
            try:
                self.state_dir.parent.rmdir()
            except OSError:
                pass
        self.started = False
        return left

    def __enter__(self) -> World:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # --- for tests -----------------------------------------------------------------------------
    def inventory(self) -> dict[str, list[str]]:
        """What this world runs right now: marked processes and network objects."""
        procs = []
        for p in marked(f"{self.name}/"):
            try:
                procs.append(f"{p.pid} {p.name()}")
            except Exception:  # noqa: BLE001 - it may have just exited
                continue
        return {"processes": procs, "network": self.net.leftovers() if self.net else []}

    def follow(self) -> str | None:
        """With a RayJob/RayService: ``cluster`` := the RayCluster behind it now."""
        if self.workload and self.workload_name:
            self.cluster = cluster_behind(self.store, self.namespace, self.workload,
                                          self.workload_name) or None
        return self.cluster

    def ray_pods(self, node_type: str | None = None) -> list[dict]:
        self.follow()
        sel = f"ray.io/cluster={self.cluster}" + (f",ray.io/node-type={node_type}"
                                                  if node_type else "")
        return [p for p in self.store.list("pods", self.namespace, sel)
                if not p["metadata"].get("deletionTimestamp")]

    def head_pod(self) -> dict | None:
        heads = self.ray_pods("head")
        return heads[0] if heads else None

    def wait_ready(self, timeout: float = 600.0, workers: int | None = None) -> float:
        """Wait until the head and ``workers`` (all desired by default) Ray pods are Ready;
        returns the seconds it took. Raises TimeoutError naming what is not Ready."""
        t0 = time.monotonic()
        while self.workload and not self.follow() and time.monotonic() - t0 < timeout:
            time.sleep(0.5)  # the operator makes the RayCluster first
        rc = self.api.store.get("rayclusters", self.namespace, self.cluster or "")
        want = workers if workers is not None else sum(
            int(g.get("replicas", 0)) for g in (rc or {}).get("spec", {}).get(
                "workerGroupSpecs", []))
        while time.monotonic() - t0 < timeout:
            head = self.head_pod()
            ready_workers = [p for p in self.ray_pods("worker") if pod_ready(p)]
            if head and pod_ready(head) and len(ready_workers) >= want:
                return time.monotonic() - t0
            time.sleep(0.5)
        raise TimeoutError(f"world {self.name}: not ready after {timeout:.0f}s: " + "; ".join(
            f"{p['metadata']['name']} {p['status'].get('phase')} ready={pod_ready(p)}"
            for p in self.ray_pods()))

    def seed(self, nodes: int = 100, pods: int = 1000, ns: str | None = None,
             prefix: str = "seed") -> None:
        """API-only objects for scale tests: ``nodes`` Nodes (no kubelet) and ``pods`` Running,
        Ready pods spread over them — no processes at all."""
        ns = ns or self.namespace
        for i in range(nodes):
            self.add_node(NodeSpec(f"{prefix}-node-{i:04d}", cpu="64", memory="256Gi",
                                   kubelet="none"))
        for i in range(pods):
            code, pod = self.api.create(R.BUILTIN["pods"], ns, {"metadata": {
                "name": f"{prefix}-pod-{i:05d}", "labels": {"app": prefix, "shard": str(i % 10)}},
                "spec": {"nodeName": f"{prefix}-node-{i % max(1, nodes):04d}",
                         "containers": [{"name": "c", "image": "registry.raychaos.test/x:1"}]}})
            ip = f"198.19.{224 + i // 250 % 16}.{i % 250 + 2}"
            st = running_status(pod, ip, "127.0.0.1")
            self.api.update(R.BUILTIN["pods"], ns, pod["metadata"]["name"], {**pod, "status": st},
                            sub="status")


def _nice_for(pod: dict) -> int:
    """Workers yield CPU to the head, and the head to nothing else on this box (on Kubernetes
    the head has a node of its own). Measured: at nice 0 on the shared 2-core box, a restarted
    head container's dashboard agent took > 20 s to start under a task storm and the raylet
    aborted waiting for its port file ("Timed out waiting for file …metrics_agent_port…"), a
    crash loop of minutes after a ``gcs``/``head``-mode kill that a head with its own CPU does
    not show."""
    kind = (pod["metadata"].get("labels") or {}).get("ray.io/node-type")
    return 5 if kind == "worker" else -5 if kind == "head" else 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except (ProcessLookupError, PermissionError, ValueError):
        return False


def cleanup(name: str, state_root: Path | str = STATE_ROOT, keep_state: bool = False) -> list[str]:
    """Remove everything world ``name`` may have left: processes (by marker), namespaces,
    links, routes, /etc/netns entries, its folder. Returns what is still there."""
    from raychaos.testbed.node.agent import cleanup_host
    left = cleanup_host(name)
    folder = Path(state_root) / name
    if not keep_state:
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():
            left.append(f"folder {folder}")
        try:
            folder.parent.rmdir()  # the state root too, when no other world lives there
        except OSError:
            pass
    left += [f"process {p.pid}" for p in marked(f"{name}/")]
    return left
