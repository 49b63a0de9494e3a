"""Pod networking for the local target: one network namespace per Ray node on a bridge.

Each node is a "pod" with its own address, like pods on a pod network, which is what makes job
placement and network faults behave as on Kubernetes. Everything created here is named after the
cluster so ``down`` (and ``raychaos rollback``) can find and remove it, and nothing else.
Addresses come from 198.18.0.0/15 (RFC 2544's range for network testing): they never leave the
machine's bridge.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from dataclasses import dataclass

from raychaos.errors import TargetUnavailable

__all__ = ["PodNetwork", "netns_supported"]


def netns_supported() -> str | None:
    """None when per-node namespaces can be used here, else the reason why not."""
    if platform.system() != "Linux":
        return f"network namespaces need Linux, this is {platform.system()}"
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "unshare"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed"
    return None


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise TargetUnavailable(f"'{' '.join(cmd)}' failed: {proc.stderr.strip() or proc.stdout}")
    return proc


@dataclass(frozen=True)
class PodNetwork:
    """Names and addresses of one cluster's namespaces, bridge and links."""

    cluster: str
    subnet_prefix: str = "198.18"

    @property
    def tag(self) -> str:
        return hashlib.sha1(self.cluster.encode()).hexdigest()[:5]

    @property
    def third_octet(self) -> int:
        return int(self.tag, 16) % 250 + 2

    @property
    def bridge(self) -> str:
        return f"rc{self.tag}br"

    @property
    def gateway(self) -> str:
        return f"{self.subnet_prefix}.{self.third_octet}.1"

    def address(self, index: int) -> str:
        """Address of node ``index`` (0 = head)."""
        return f"{self.subnet_prefix}.{self.third_octet}.{10 + index}"

    def netns(self, node: str) -> str:
        return f"rc-{self.cluster}-{node}"

    def host_link(self, index: int) -> str:
        return f"rc{self.tag}h{index}"

    def node_link(self, index: int) -> str:
        return f"rc{self.tag}n{index}"

    # --- create / destroy ------------------------------------------------------------------
    def ensure_bridge(self) -> None:
        if _run("ip", "link", "show", self.bridge, check=False).returncode != 0:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def ensure_node(self, node: str, index: int) -> str:
        """Create (or re-create) the namespace and link for one node; returns its address."""
        self.ensure_bridge()
        ns = self.netns(node)
        self.remove_node(node, index)
        _run("ip", "netns", "add", ns)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        host, peer = self.host_link(index), self.node_link(index)
        _run("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
        _run("ip", "link", "set", peer, "netns", ns)
        _run("ip", "link", "set", host, "master", self.bridge, "up")
        addr = self.address(index)
        _run("ip", "netns", "exec", ns, "ip", "addr", "add", f"{addr}/24", "dev", peer)
        _run("ip", "netns", "exec", ns, "ip", "link", "set", peer, "up")
        _run("ip", "netns", "exec", ns, "ip", "route", "add", "default", "via", self.gateway)
        return addr

    def remove_node(self, node: str, index: int) -> None:
        _run("ip", "link", "del", self.host_link(index), check=False)
        _run("ip", "netns", "del", self.netns(node), check=False)

    def namespaces(self) -> list[str]:
        out = _run("ip", "netns", "list", check=False).stdout
        prefix = f"rc-{self.cluster}-"
        return [line.split()[0] for line in out.splitlines() if line.startswith(prefix)]

    def links(self) -> list[str]:
        out = _run("ip", "-o", "link", "show", check=False).stdout
        names = [line.split(":")[1].strip().split("@")[0] for line in out.splitlines()
                 if ":" in line]
        return [n for n in names if n.startswith(f"rc{self.tag}")]

    def destroy(self) -> None:
        for ns in self.namespaces():
            _run("ip", "netns", "del", ns, check=False)
        for link in self.links():
            if link != self.bridge:
                _run("ip", "link", "del", link, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
