"""A throwaway KubeRay control plane on one Linux machine, from real parts, no Docker or kind.

``up`` starts, on loopback only, each as its own process (``raychaos testbed status`` lists
their PIDs):

- etcd (the etcd server module), its data under the bed's folder;
- kube-apiserver, with static tokens (group ``system:masters``: ``admin`` for the bed's own
  parts, ``raychaos-user`` in the kubeconfig ``up`` prints) and RBAC, serving on a self-signed
  certificate it makes itself (the kubeconfig trusts that certificate). It writes an audit log
  of the kubeconfig user's requests (``logs/audit.log``, one JSON event per stage, metadata
  only): what a run asked of the API server, read back by :meth:`Bed.requests`;
- kube-controller-manager (garbage collection, ReplicaSets, Jobs, endpoints, disruption, ...)
  and kube-scheduler;
- the KubeRay operator, after KubeRay's own CRDs are created;
- with ``nodes`` (root only: network namespaces): the node agent, which builds one network
  namespace per node and runs pods' containers as real processes in them, and
  ``raychaos-kubelet`` (virtual-kubelet, one Node per entry of :data:`DEFAULT_NODES`), which
  registers the nodes, keeps their leases, writes pod status and serves exec, logs and
  port-forward to the API server over TLS with a client certificate the bed makes.

``down`` stops them (SIGTERM, then SIGKILL by PID, only the PIDs it started) and removes the
folder. The bed is a product, not a test fixture: bench/ and users start it the same way.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from raychaos.errors import RaychaosError
from raychaos.targets.lock import pid_alive
from raychaos.testbed import build
from raychaos.testbed.access import ApiClient, http_ok, kubelet_certs, write_kubeconfig
from raychaos.testbed.audit import AUDIT_LOG, AUDIT_POLICY, USER, audit_requests
from raychaos.testbed.processes import control_plane_cpu, start, stop, write_pids

__all__ = ["ApiClient", "Bed", "BedError", "down", "state_dir", "state_root", "status", "up"]

_GPU_TAINT = [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
#: the bed's nodes: a head node (the biggest machine, as a production head often is: each
#: node's CPU group weighs its capacity), a CPU node, two GPU nodes (one logical GPU each,
#: tainted as GPU pools are)
DEFAULT_NODES: tuple[dict[str, Any], ...] = (
    {"name": "head-0", "cpu": "8", "labels": {"raychaos.io/node-pool": "head"}},
    {"name": "cpu-0", "cpu": "2", "labels": {"raychaos.io/node-pool": "cpu"}},
    *({"name": f"gpu-{x}", "cpu": "2", "gpus": 1, "taints": _GPU_TAINT,
       "labels": {"raychaos.io/node-pool": "gpu", "nvidia.com/gpu.present": "true"}}
      for x in ("a", "b")),
)
#: their capacity together: what the control plane's CPU group weighs (processes.py)
NODE_CPUS = sum(float(n["cpu"]) for n in DEFAULT_NODES)
READY_S = 120.0


class BedError(RaychaosError):
    """The test bed could not start, or is not up."""


def state_root() -> Path:
    """Where every bed keeps its state, one folder each (``RAYCHAOS_TESTBED_STATE``)."""
    return Path(os.environ.get("RAYCHAOS_TESTBED_STATE") or Path.home() / ".local" / "state" /
                "raychaos" / "testbed")


def state_dir(name: str) -> Path:
    return state_root() / name


@dataclass
class Bed:
    name: str
    root: Path
    kubeconfig: Path
    namespace: str
    server: str
    token: str
    pids: dict[str, int]
    ports: dict[str, int]
    cluster: str | None = None  # the RayCluster up created (with nodes)

    @property
    def ca(self) -> Path:
        """The certificate the API server serves (the kubeconfigs trust it)."""
        return self.root / "certs" / "apiserver.crt"

    def admin(self) -> ApiClient:
        """The bed's own admin client (not audited: not the kubeconfig's user)."""
        return ApiClient(self.server, self.token, self.ca)

    def requests(self, since: float = 0.0, user: str = USER) -> list[dict[str, Any]]:
        """``user``'s requests the API server logged (its audit log; the kubeconfig's user, or
        ``system:serviceaccount:<ns>:<name>``), one per request, in order: ``t`` (the
        request's arrival, epoch seconds), ``verb`` (get, list, watch, create, update, patch,
        delete, ...; the verb RBAC authorized), ``uri``, ``code`` (None for a watch still
        open), ``agent`` (the client's user agent), ``group``, ``resource`` (``pods/exec`` for
        a subresource), ``namespace``, ``name``, ``decision`` (RBAC's: ``allow`` or
        ``forbid``). Only those that arrived at or after ``since`` (epoch seconds)."""
        return [r for r in audit_requests(self.root / "logs" / AUDIT_LOG, since)
                if r["user"] == user]

    def serviceaccount_kubeconfig(self, namespace: str, name: str, path: Path,
                                  hours: int = 12) -> Path:
        """Write a kubeconfig at ``path`` that authenticates as ServiceAccount
        ``namespace/name`` (a token from the TokenRequest API, valid ``hours``): a run under it
        has exactly the rights its Roles grant (``deploy/rbac.yaml``), as in a real cluster."""
        code, body = self.admin().call(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": hours * 3600}})
        if code != 201:
            raise BedError(f"a token for ServiceAccount {namespace}/{name} answered {code}: "
                           f"{body}")
        write_kubeconfig(path, self.server, self.ca, body["status"]["token"], namespace,
                         f"system:serviceaccount:{namespace}:{name}")
        return path

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "root": str(self.root), "kubeconfig": str(self.kubeconfig),
                "namespace": self.namespace, "server": self.server, "pids": self.pids,
                "ports": self.ports, "cluster": self.cluster}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(what: str, check: Callable[[], bool], pid: int, log: Path,
          timeout: float = READY_S) -> None:
    """Until ``check()``; a check whose request failed (a refused connection, an API server
    too busy to answer in its timeout) is "not yet", not the end of ``up``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (OSError, ssl.SSLError):  # TimeoutError and URLError are OSErrors
            pass
        if not pid_alive(pid):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-12:]) \
                if log.exists() else ""
            raise BedError(f"{what} exited while starting (log {log}):\n{tail}")
        time.sleep(0.3)
    raise BedError(f"{what} was not ready within {timeout:.0f} s (log {log})")


def up(name: str = "default", namespace: str = "ray", say: Callable[[str], None] = print,
       nodes: bool = False, cluster: bool = True,
       sim_nodes: list[dict[str, Any]] | None = None) -> Bed:
    """Build what is missing, start the control plane, create KubeRay's CRDs and ``namespace``;
    with ``nodes``, the node agent and the kubelet, wait until every node is Ready, and (with
    ``cluster``) create :mod:`raychaos.testbed.demo`'s RayCluster and wait until the operator
    calls it ready. ``sim_nodes`` (instead of ``nodes``; no root): these nodes (the shape of
    :data:`DEFAULT_NODES`) with a kubelet that runs nothing (:mod:`raychaos.testbed.simnodes`);
    with ``cluster`` the demo is ready to the operator there too, with no Ray in it."""
    if nodes and sim_nodes:
        raise BedError("a bed has real nodes (--nodes) or simulated ones (--sim-nodes), "
                       "not both")
    if nodes and Path(sys.prefix).resolve().is_relative_to("/tmp"):
        raise BedError(f"the test bed's pods run this Python ({sys.prefix}), but each pod gets a "
                       "/tmp of its own where it is not: install raychaos outside /tmp")
    if nodes and os.geteuid() != 0:
        raise BedError("the test bed's nodes are network namespaces and need root; run as "
                       "root, or leave out --nodes for the control plane alone")
    root = state_dir(name)
    if (root / "bed.json").exists():
        raise BedError(f"test bed {name!r} is already up (state {root}); "
                       f"`raychaos testbed down --name {name}` first")
    bins = build.build_all(say, kubelet=nodes)
    crds = build.crd_dir()
    chaos_crds = build.chaos_mesh_crds()
    if root.exists():
        shutil.rmtree(root)  # a bed that never came up
    for sub in ("logs", "etcd", "certs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    token, user_token = secrets.token_hex(16), secrets.token_hex(16)
    (root / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n"
                                     f"{user_token},{USER},{USER},system:masters\n")
    (root / "audit-policy.yaml").write_text(yaml.safe_dump(AUDIT_POLICY))
    sa_key, sa_pub = root / "certs" / "sa.key", root / "certs" / "sa.pub"
    subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)],
                   check=True, capture_output=True)
    ports = {k: _free_port() for k in ("etcd", "etcd-peer", "apiserver", "controller-manager",
                                       "scheduler", "kuberay-metrics", "kuberay-probe")}
    for node in DEFAULT_NODES if nodes else ():
        ports[f"kubelet-{node['name']}"] = _free_port()
    kubelet_certs(root / "certs")
    server = f"https://127.0.0.1:{ports['apiserver']}"
    pids: dict[str, int] = {}
    try:
        # as heavy as the nodes when their pods are real processes it must keep up with; with
        # none (simulated or no nodes) the parts stay in the caller's CPU group
        cpu = control_plane_cpu(name, NODE_CPUS) if nodes else None
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        pids["etcd"] = start(root, "etcd", [
            str(bins["etcd"]), "--name", "bed", "--data-dir", str(root / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"bed={peer}", "--log-level", "warn"], cpu=cpu)
        write_pids(root, pids)
        _wait("etcd", lambda: http_ok(f"{etcd_url}/health"), pids["etcd"],
              root / "logs" / "etcd.log")
        pids["kube-apiserver"] = start(root, "kube-apiserver", [
            str(bins["kube-apiserver"]), "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(ports["apiserver"]), "--cert-dir", str(root / "certs"),
            "--token-auth-file", str(root / "tokens.csv"), "--authorization-mode", "RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(sa_pub),
            "--service-account-signing-key-file", str(sa_key),
            "--service-cluster-ip-range", "10.96.0.0/16", "--allow-privileged=true",
            "--enable-priority-and-fairness=false", "--profiling=false",
            "--kubelet-client-certificate", str(root / "certs" / "apiserver-kubelet-client.crt"),
            "--kubelet-client-key", str(root / "certs" / "apiserver-kubelet-client.key"),
            "--kubelet-preferred-address-types", "InternalIP",
            "--audit-policy-file", str(root / "audit-policy.yaml"),
            "--audit-log-path", str(root / "logs" / AUDIT_LOG), "--audit-log-format", "json",
            "--audit-log-mode", "blocking"], cpu=cpu)
        write_pids(root, pids)
        ca = root / "certs" / "apiserver.crt"
        _wait("kube-apiserver", lambda: ca.exists() and ApiClient(server, token, ca).ok("/readyz"),
              pids["kube-apiserver"], root / "logs" / "kube-apiserver.log")
        api = ApiClient(server, token, ca)
        kubeconfig, system = root / "kubeconfig", root / "kubeconfig-system"
        write_kubeconfig(kubeconfig, server, ca, user_token, namespace, USER)
        write_kubeconfig(system, server, ca, token, namespace)  # the bed's own parts
        common = ["--kubeconfig", str(system), "--leader-elect=false",
                  "--bind-address", "127.0.0.1"]
        pids["kube-controller-manager"] = start(root, "kube-controller-manager", [
            str(bins["kube-controller-manager"]), *common,
            "--secure-port", str(ports["controller-manager"]),
            "--service-account-private-key-file", str(sa_key), "--root-ca-file", str(ca),
            "--use-service-account-credentials=false", "--cluster-name", name], cpu=cpu)
        pids["kube-scheduler"] = start(root, "kube-scheduler", [
            str(bins["kube-scheduler"]), *common, "--secure-port", str(ports["scheduler"])],
            cpu=cpu)
        write_pids(root, pids)
        crd_docs = {crd.name: yaml.safe_load(crd.read_text())
                    for crd in [*sorted(crds.glob("*.yaml")), *chaos_crds]}
        for file, doc in crd_docs.items():
            code, body = api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                  doc, timeout=30)
            if code not in (201, 409):
                raise BedError(f"creating the CRD in {file} answered {code}: {body}")
        for doc in crd_docs.values():
            _wait(f"the CRD {doc['metadata']['name']}", partial(_established, api, doc),
                  pids["kube-apiserver"], root / "logs" / "kube-apiserver.log", 60)
        code, body = api.call("POST", "/api/v1/namespaces",
                              {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace}})
        if code not in (201, 409):
            raise BedError(f"creating namespace {namespace} answered {code}: {body}")
        if nodes:
            _start_nodes(root, name, bins, server, token, ca, system, ports, pids, api, cpu)
        elif sim_nodes:
            _start_sim_nodes(root, sim_nodes, server, token, ca, pids, api, cpu)
        env = dict(os.environ, KUBECONFIG=str(system))
        pids["kuberay-operator"] = start(root, "kuberay-operator", [
            str(bins["kuberay-operator"]),
            "--metrics-addr", f"127.0.0.1:{ports['kuberay-metrics']}",
            "--health-probe-bind-address", f"127.0.0.1:{ports['kuberay-probe']}",
            "--enable-leader-election=false", "--log-stdout-encoder", "console",
            # it runs on the host, not in a pod: no cluster DNS for <svc>.<ns>.svc.cluster.local.
            # KubeRay's flag for an operator outside the cluster: reach each head's dashboard
            # through the API server's services/proxy (the API server reaches pod IPs here)
            "--use-kubernetes-proxy"], env=env, cpu=cpu)
        write_pids(root, pids)
        _wait("kuberay-operator",
              lambda: http_ok(f"http://127.0.0.1:{ports['kuberay-probe']}/readyz"),
              pids["kuberay-operator"], root / "logs" / "kuberay-operator.log")
        demo = None
        if (nodes or sim_nodes) and cluster:
            from raychaos.testbed.demo import create_demo  # it waits with this module's _wait

            demo = create_demo(api, namespace, pids, root, say)
    except BaseException:
        stop(pids)
        _cleanup_nodes(name)
        shutil.rmtree(root, ignore_errors=True)
        raise
    bed = Bed(name, root, kubeconfig, namespace, server, token, pids, ports, demo)
    (root / "bed.json").write_text(json.dumps(bed.as_json(), indent=1))
    return bed


def _start_nodes(root: Path, name: str, bins: dict[str, Path], server: str, token: str, ca: Path,
                 kubeconfig: Path, ports: dict[str, int], pids: dict[str, int],
                 api: ApiClient, cpu: tuple[Any, str] | None = None) -> None:
    """The node agent (root: it makes the namespaces), then the kubelet; wait for the nodes."""
    sock = root / "agent.sock"
    specs = [dict(n, port=ports[f"kubelet-{n['name']}"]) for n in DEFAULT_NODES]
    agent_cfg = root / "agent.json"
    agent_cfg.write_text(json.dumps({"bed": name, "state": str(root / "node"),
                                     "socket": str(sock), "server": server, "token": token,
                                     "ca": str(ca), "nodes": specs}, indent=1))
    pids["node-agent"] = start(root, "node-agent", [
        sys.executable, "-m", "raychaos.testbed.node.agent", str(agent_cfg)], cpu=cpu)
    write_pids(root, pids)
    _wait("the node agent", sock.exists, pids["node-agent"], root / "logs" / "node-agent.log")
    certs = root / "certs"
    kubelet_cfg = root / "kubelet.json"
    kubelet_cfg.write_text(json.dumps({
        "kubeconfig": str(kubeconfig), "agent": str(sock), "cert": str(certs / "kubelet.crt"),
        "key": str(certs / "kubelet.key"), "clientCA": str(certs / "kubelet-ca.crt"),
        "version": f"{build.KUBERNETES}-raychaos",
        "nodes": [{"name": n["name"], "port": n["port"], "address": "127.0.0.1",
                   "capacity": {"cpu": n["cpu"], "memory": "8Gi", "pods": "110",
                                **({"nvidia.com/gpu": str(n["gpus"])} if n.get("gpus") else {})},
                   "labels": n["labels"], "taints": n.get("taints") or []} for n in specs]},
        indent=1))
    pids["raychaos-kubelet"] = start(root, "raychaos-kubelet", [
        str(bins["raychaos-kubelet"]), "--config", str(kubelet_cfg)], cpu=cpu)
    write_pids(root, pids)
    _wait("the kubelet's nodes", partial(_nodes_ready, api, [n["name"] for n in specs]),
          pids["raychaos-kubelet"], root / "logs" / "raychaos-kubelet.log")


def _start_sim_nodes(root: Path, specs: list[dict[str, Any]], server: str, token: str, ca: Path,
                     pids: dict[str, int], api: ApiClient,
                     cpu: tuple[Any, str] | None = None) -> None:
    """The simulated nodes' kubelet (:mod:`raychaos.testbed.simnodes`); wait for the nodes."""
    cfg = root / "sim-nodes.json"
    cfg.write_text(json.dumps({"server": server, "token": token, "ca": str(ca),
                               "nodes": specs}, indent=1))
    pids["sim-nodes"] = start(root, "sim-nodes", [
        sys.executable, "-m", "raychaos.testbed.simnodes", str(cfg)], cpu=cpu)
    write_pids(root, pids)
    _wait("the simulated nodes", partial(_nodes_ready, api, [n["name"] for n in specs]),
          pids["sim-nodes"], root / "logs" / "sim-nodes.log")


def _nodes_ready(api: ApiClient, names: list[str]) -> bool:
    code, body = api.call("GET", "/api/v1/nodes")
    if code != 200:
        return False
    ready = {n["metadata"]["name"] for n in body.get("items") or []
             if any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in (n.get("status") or {}).get("conditions") or [])}
    return set(names) <= ready


def _cleanup_nodes(name: str) -> list[str]:
    """What the bed's pods left on the machine, removed (root only; nothing to do otherwise)."""
    if os.geteuid() != 0:
        return []
    from raychaos.testbed.node.agent import cleanup_host, world_name
    return cleanup_host(world_name(name))


def _established(api: ApiClient, crd: dict[str, Any]) -> bool:
    """The CRD is Established and its resources can be listed: Established alone comes before
    the API server's storage for them is ready (a list then answers 429 "storage is
    (re)initializing", seen by a test's first request on a loaded machine)."""
    name, spec = crd["metadata"]["name"], crd["spec"]
    code, body = api.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                 f"{name}")
    if code != 200 or not any(c.get("type") == "Established" and c.get("status") == "True"
                              for c in (body.get("status") or {}).get("conditions") or []):
        return False
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    code, _ = api.call("GET", f"/apis/{spec['group']}/{version}/{spec['names']['plural']}"
                              f"?limit=1")
    return code == 200


def _load(name: str) -> dict[str, Any]:
    path = state_dir(name) / "bed.json"
    if not path.exists():
        raise BedError(f"test bed {name!r} is not up (no {path})")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def down(name: str = "default") -> list[str]:
    """Stop the bed's processes and remove its folder; what was stopped."""
    root = state_dir(name)
    pids_file = root / "pids.json"
    if not pids_file.exists():
        raise BedError(f"test bed {name!r} is not up (no {pids_file})")
    stopped = stop({k: int(v) for k, v in json.loads(pids_file.read_text()).items()})
    left = _cleanup_nodes(name)
    shutil.rmtree(root, ignore_errors=True)
    if left:
        raise BedError(f"test bed {name!r} stopped, but left: {', '.join(left)}")
    return stopped


def status(name: str = "default") -> dict[str, Any]:
    """The bed's processes (alive or not) and whether the API server is ready."""
    data = _load(name)
    root = Path(data["root"])
    api = ApiClient(data["server"], (root / "tokens.csv").read_text().split(",")[0],
               root / "certs" / "apiserver.crt")
    data["alive"] = {k: pid_alive(int(v)) for k, v in data["pids"].items()}
    data["ready"] = api.ok("/readyz")
    return data
