"""A throwaway KubeRay control plane on one Linux machine, from real parts, no Docker or kind.

``up`` starts, on loopback only, each as its own process (``raychaos testbed status`` lists
their PIDs):

- etcd (the etcd server module), its data under the bed's folder;
- kube-apiserver, with a static admin token (group ``system:masters``) and RBAC, serving on a
  self-signed certificate it makes itself (the kubeconfig trusts that certificate);
- kube-controller-manager (garbage collection, ReplicaSets, Jobs, endpoints, disruption, ...)
  and kube-scheduler;
- the KubeRay operator, after KubeRay's own CRDs are created.

``down`` stops them (SIGTERM, then SIGKILL by PID, only the PIDs it started) and removes the
folder. The bed is a product, not a test fixture: bench/ and users start it the same way.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from raychaos.errors import RaychaosError
from raychaos.targets.lock import pid_alive
from raychaos.testbed import build

__all__ = ["Bed", "down", "status", "up"]

ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
         "kuberay-operator")
READY_S = 120.0


class BedError(RaychaosError):
    """The test bed could not start, or is not up."""


def state_dir(name: str) -> Path:
    base = os.environ.get("RAYCHAOS_TESTBED_STATE") or Path.home() / ".local" / "state" / \
        "raychaos" / "testbed"
    return Path(base) / name


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

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "root": str(self.root), "kubeconfig": str(self.kubeconfig),
                "namespace": self.namespace, "server": self.server, "pids": self.pids,
                "ports": self.ports}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Api:
    """Just enough of the API over HTTPS for the bed itself (the harness has its own client)."""

    def __init__(self, server: str, token: str, ca: Path) -> None:
        self.server, self.token = server, token
        self.ctx = ssl.create_default_context(cafile=str(ca))

    def call(self, method: str, path: str, body: Any = None, timeout: float = 10.0
             ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")

    def ok(self, path: str) -> bool:
        try:
            return self.call("GET", path, timeout=3)[0] == 200
        except (OSError, ssl.SSLError):
            return False


def _wait(what: str, check: Callable[[], bool], pid: int, log: Path,
          timeout: float = READY_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if not pid_alive(pid):
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-12:]) \
                if log.exists() else ""
            raise BedError(f"{what} exited while starting (log {log}):\n{tail}")
        time.sleep(0.3)
    raise BedError(f"{what} was not ready within {timeout:.0f} s (log {log})")


def _start(root: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    log = root / "logs" / f"{name}.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=root, env=env,
                                start_new_session=True)
    return proc.pid


def _write_pids(root: Path, pids: dict[str, int]) -> None:
    (root / "pids.json").write_text(json.dumps(pids))


def _kubeconfig(path: Path, server: str, ca: Path, token: str, namespace: str) -> None:
    import base64

    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "raychaos-testbed",
           "clusters": [{"name": "raychaos-testbed", "cluster": {
               "server": server,
               "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}}],
           "users": [{"name": "admin", "user": {"token": token}}],
           "contexts": [{"name": "raychaos-testbed", "context": {
               "cluster": "raychaos-testbed", "user": "admin", "namespace": namespace}}]}
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)


def up(name: str = "default", namespace: str = "ray", say: Callable[[str], None] = print) -> Bed:
    """Build what is missing, start the control plane, create KubeRay's CRDs and ``namespace``."""
    root = state_dir(name)
    if (root / "bed.json").exists():
        raise BedError(f"test bed {name!r} is already up (state {root}); "
                       f"`raychaos testbed down --name {name}` first")
    bins = build.build_all(say)
    crds = build.crd_dir()
    if root.exists():
        shutil.rmtree(root)  # a bed that never came up
    for sub in ("logs", "etcd", "certs"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(16)
    (root / "tokens.csv").write_text(f"{token},admin,admin,system:masters\n")
    sa_key, sa_pub = root / "certs" / "sa.key", root / "certs" / "sa.pub"
    subprocess.run(["openssl", "genrsa", "-out", str(sa_key), "2048"], check=True,
                   capture_output=True)
    subprocess.run(["openssl", "rsa", "-in", str(sa_key), "-pubout", "-out", str(sa_pub)],
                   check=True, capture_output=True)
    ports = {k: _free_port() for k in ("etcd", "etcd-peer", "apiserver", "controller-manager",
                                       "scheduler", "kuberay-metrics", "kuberay-probe")}
    server = f"https://127.0.0.1:{ports['apiserver']}"
    pids: dict[str, int] = {}
    try:
        etcd_url = f"http://127.0.0.1:{ports['etcd']}"
        peer = f"http://127.0.0.1:{ports['etcd-peer']}"
        pids["etcd"] = _start(root, "etcd", [
            str(bins["etcd"]), "--name", "bed", "--data-dir", str(root / "etcd"),
            "--listen-client-urls", etcd_url, "--advertise-client-urls", etcd_url,
            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
            "--initial-cluster", f"bed={peer}", "--log-level", "warn"])
        _write_pids(root, pids)
        _wait("etcd", lambda: _http_ok(f"{etcd_url}/health"), pids["etcd"],
              root / "logs" / "etcd.log")
        pids["kube-apiserver"] = _start(root, "kube-apiserver", [
            str(bins["kube-apiserver"]), "--etcd-servers", etcd_url,
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(ports["apiserver"]), "--cert-dir", str(root / "certs"),
            "--token-auth-file", str(root / "tokens.csv"), "--authorization-mode", "RBAC",
            "--service-account-issuer", "https://kubernetes.default.svc",
            "--service-account-key-file", str(sa_pub),
            "--service-account-signing-key-file", str(sa_key),
            "--service-cluster-ip-range", "10.96.0.0/16", "--allow-privileged=true",
            "--enable-priority-and-fairness=false", "--profiling=false"])
        _write_pids(root, pids)
        ca = root / "certs" / "apiserver.crt"
        _wait("kube-apiserver", lambda: ca.exists() and _Api(server, token, ca).ok("/readyz"),
              pids["kube-apiserver"], root / "logs" / "kube-apiserver.log")
        api = _Api(server, token, ca)
        kubeconfig = root / "kubeconfig"
        _kubeconfig(kubeconfig, server, ca, token, namespace)
        common = ["--kubeconfig", str(kubeconfig), "--leader-elect=false",
                  "--bind-address", "127.0.0.1"]
        pids["kube-controller-manager"] = _start(root, "kube-controller-manager", [
            str(bins["kube-controller-manager"]), *common,
            "--secure-port", str(ports["controller-manager"]),
            "--service-account-private-key-file", str(sa_key), "--root-ca-file", str(ca),
            "--use-service-account-credentials=false", "--cluster-name", name])
        pids["kube-scheduler"] = _start(root, "kube-scheduler", [
            str(bins["kube-scheduler"]), *common, "--secure-port", str(ports["scheduler"])])
        _write_pids(root, pids)
        for crd in sorted(crds.glob("*.yaml")):
            code, body = api.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                  yaml.safe_load(crd.read_text()), timeout=30)
            if code not in (201, 409):
                raise BedError(f"creating the CRD in {crd.name} answered {code}: {body}")
        for crd in sorted(crds.glob("*.yaml")):
            plural = crd.stem.split("_", 1)[1]
            _wait(f"the CRD {plural}.ray.io", partial(_established, api, plural),
                  pids["kube-apiserver"], root / "logs" / "kube-apiserver.log", 60)
        code, body = api.call("POST", "/api/v1/namespaces",
                              {"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace}})
        if code not in (201, 409):
            raise BedError(f"creating namespace {namespace} answered {code}: {body}")
        env = dict(os.environ, KUBECONFIG=str(kubeconfig))
        pids["kuberay-operator"] = _start(root, "kuberay-operator", [
            str(bins["kuberay-operator"]),
            "--metrics-addr", f"127.0.0.1:{ports['kuberay-metrics']}",
            "--health-probe-bind-address", f"127.0.0.1:{ports['kuberay-probe']}",
            "--enable-leader-election=false", "--log-stdout-encoder", "console"], env=env)
        _write_pids(root, pids)
        _wait("kuberay-operator",
              lambda: _http_ok(f"http://127.0.0.1:{ports['kuberay-probe']}/readyz"),
              pids["kuberay-operator"], root / "logs" / "kuberay-operator.log")
    except BaseException:
        _stop(pids)
        shutil.rmtree(root, ignore_errors=True)
        raise
    bed = Bed(name, root, kubeconfig, namespace, server, token, pids, ports)
    (root / "bed.json").write_text(json.dumps(bed.as_json(), indent=1))
    return bed


def _http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _established(api: _Api, plural: str) -> bool:
    code, body = api.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                                 f"{plural}.ray.io")
    return code == 200 and any(c.get("type") == "Established" and c.get("status") == "True"
                               for c in (body.get("status") or {}).get("conditions") or [])


def _stop(pids: dict[str, int], grace_s: float = 10.0) -> list[str]:
    """SIGTERM each started PID (newest first), SIGKILL what outlives ``grace_s``."""
    stopped = []
    for name in reversed([n for n in ORDER if n in pids]):
        pid = pids[name]
        if not pid_alive(pid):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + grace_s
        while pid_alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(pid)
        stopped.append(name)
    return stopped


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


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
    stopped = _stop({k: int(v) for k, v in json.loads(pids_file.read_text()).items()})
    shutil.rmtree(root, ignore_errors=True)
    return stopped


def status(name: str = "default") -> dict[str, Any]:
    """The bed's processes (alive or not) and whether the API server is ready."""
    data = _load(name)
    root = Path(data["root"])
    api = _Api(data["server"], (root / "tokens.csv").read_text().split(",")[0],
               root / "certs" / "apiserver.crt")
    data["alive"] = {k: pid_alive(int(v)) for k, v in data["pids"].items()}
    data["ready"] = api.ok("/readyz")
    return data
