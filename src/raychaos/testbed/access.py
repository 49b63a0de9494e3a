"""How the bed is reached: its certificates (the kubelets' CA and the API server's client
certificate for them), the kubeconfigs ``up`` writes, and :class:`ApiClient` — just enough of the
API over HTTPS for the bed itself (the harness has its own client).
"""

from __future__ import annotations

import json
import ssl
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from raychaos.errors import RaychaosError

__all__ = ["ApiClient", "http_ok", "kubelet_certs", "write_kubeconfig"]


class CertError(RaychaosError):
    """openssl could not make one of the bed's certificates."""


class ApiClient:
    """Just enough of the API over HTTPS for the bed itself (the harness has its own client)."""

    def __init__(self, server: str, token: str, ca: Path) -> None:
        self.server, self.token = server, token
        self.ctx = ssl.create_default_context(cafile=str(ca))

    def call(self, method: str, path: str, body: Any = None, timeout: float = 10.0,
             content_type: str = "application/json") -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Content-Type": content_type})
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


def write_kubeconfig(path: Path, server: str, ca: Path, token: str, namespace: str,
                user: str = "admin") -> None:
    import base64

    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "raychaos-testbed",
           "clusters": [{"name": "raychaos-testbed", "cluster": {
               "server": server,
               "certificate-authority-data": base64.b64encode(ca.read_bytes()).decode()}}],
           "users": [{"name": user, "user": {"token": token}}],
           "contexts": [{"name": "raychaos-testbed", "context": {
               "cluster": "raychaos-testbed", "user": user, "namespace": namespace}}]}
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode:
        raise CertError(f"openssl {args[0]} failed: {proc.stderr.strip()[-300:]}")


def kubelet_certs(certs: Path) -> None:
    """A CA of the bed's; the API server's client certificate for kubelets, and the kubelets'
    serving certificate (127.0.0.1), both signed by it: the kubelet verifies its caller."""
    ca_key, ca = certs / "kubelet-ca.key", certs / "kubelet-ca.crt"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out",
             str(ca), "-days", "30", "-subj", "/CN=raychaos-testbed-kubelet-ca")
    for who, subj, ext in (("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver",
                            "extendedKeyUsage=clientAuth"),
                           ("kubelet", "/CN=raychaos-kubelet",
                            "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth")):
        key, csr, crt = certs / f"{who}.key", certs / f"{who}.csr", certs / f"{who}.crt"
        extfile = certs / f"{who}.ext"
        extfile.write_text(ext + "\n")
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr),
                 "-subj", subj)
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                 "-CAcreateserial", "-out", str(crt), "-days", "30", "-extfile", str(extfile))


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False
