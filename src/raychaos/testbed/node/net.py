"""The world's network: each Kubernetes node is its own network namespace (like a kind node
container) with a bridge for its pods, and an uplink to one world bridge on the host.

Layout for world slot ``s`` (0–15), all inside 198.19.0.0/16 (the local target uses 198.18.x):

- world bridge ``rw<tag>br`` on the host: 198.19.{16s}.1/24; the registry in its own namespace
  ``rw<tag>-registry`` at 198.19.{16s}.2;
- node ``i``: namespace ``rw<tag>-<node>``, uplink ``eth0`` 198.19.{16s}.{10+i}, pod bridge
  ``cbr0`` 198.19.{16s+1+i}.1/24, IP forwarding on (inside the namespace only);
- pod: namespace ``rw<tag>-p<n>``, ``eth0`` on its node's ``cbr0``, default route via the node;
- Services: ClusterIPs from 198.19.{16s+15}.0/24, routed (/32) to the node of one Ready endpoint,
  where the endpoint pod holds the address on ``lo`` — a small kube-proxy.

Pod-to-pod traffic between nodes goes node to node over the world bridge (host-gw routing,
as flannel does), so a ``tc`` on a node's uplink shapes it. The host only originates traffic to
pods (API server proxying, probes); it never forwards, so nothing can
leave the machine. Every name carries the world's tag, so ``destroy`` finds all of it.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["WorldNet", "free_slot", "NETNS_ETC"]

NETNS_ETC = Path("/etc/netns")


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)
    if check and proc.returncode:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def free_slot(tag: str) -> int:
    """A slot no other world's bridge uses (a world with this tag keeps its own)."""
    out = ip("-o", "-4", "addr", "show", check=False).stdout
    used = set()
    for line in out.splitlines():
        parts = line.split()
        for i, p in enumerate(parts):
            if p == "inet" and parts[i + 1].startswith("198.19."):
                third = int(parts[i + 1].split(".")[2])
                if parts[1] == f"rw{tag}br":
                    return third // 16
                used.add(third // 16)
    for s in range(16):
        if s not in used:
            return s
    raise RuntimeError("all 16 world slots in 198.19.0.0/16 are in use")


@dataclass
class NodeNet:
    name: str
    index: int
    netns: str
    uplink_ip: str
    prefix: str  # "198.19.N" of its pod subnet
    next_host: int = 10
    pods: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # key->(ns, ip, veth)

    @property
    def gateway(self) -> str:
        return f"{self.prefix}.1"


class WorldNet:
    def __init__(self, world: str):
        self.world = world
        self.tag = hashlib.sha1(world.encode()).hexdigest()[:5]
        self.slot = free_slot(self.tag)
        b = 16 * self.slot
        self.base = f"198.19.{b}"
        self.gateway = f"{self.base}.1"
        self.registry_ip = f"{self.base}.2"
        self.registry_netns = f"rw{self.tag}-registry"
        self.service_prefix = f"198.19.{b + 15}"
        self.bridge = f"rw{self.tag}br"
        self.nodes: dict[str, NodeNet] = {}
        self.vips: dict[str, tuple[str, str]] = {}  # vip -> (node, holder netns)
        self._pod_seq = 0
        self._svc_seq = 10

    # --- world -----------------------------------------------------------------------------
    def setup(self) -> None:
        if ip("link", "show", self.bridge, check=False).returncode:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        # everything of this world that has no more specific route is unreachable, not routed
        ip("route", "replace", "unreachable", f"198.19.{16 * self.slot}.0/20")
        # the registry gets a namespace of its own on the world bridge (servers live on
        # loopback or in namespaces the world made, never on a host address)
        ns, link = self.registry_netns, f"rw{self.tag}reg"
        ip("netns", "del", ns, check=False)
        ip("link", "del", link, check=False)
        ip("netns", "add", ns)
        ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", link, "master", self.bridge, "up")
        for args in (("link", "set", "lo", "up"), ("addr", "add", f"{self.registry_ip}/24",
                                                   "dev", "eth0"),
                     ("link", "set", "eth0", "up"), ("route", "add", "default", "via",
                                                     self.gateway)):
            ip("-n", ns, *args)

    def alloc_service_ip(self) -> str:
        self._svc_seq += 1
        return f"{self.service_prefix}.{self._svc_seq}"

    def add_node(self, name: str) -> NodeNet:
        i = len(self.nodes)
        if i >= 14:
            raise RuntimeError("a world has at most 14 real nodes")
        ns = f"rw{self.tag}-{name}"
        node = NodeNet(name, i, ns, f"{self.base}.{10 + i}", f"198.19.{16 * self.slot + 1 + i}")
        host_link = f"rw{self.tag}u{i}"
        ip("netns", "del", ns, check=False)
        ip("link", "del", host_link, check=False)
        ip("netns", "add", ns)
        ip("link", "add", host_link, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", host_link, "master", self.bridge, "up")
        for args in (("link", "set", "lo", "up"), ("addr", "add", f"{node.uplink_ip}/24", "dev",
                                                   "eth0"),
                     ("link", "set", "eth0", "up"), ("route", "add", "default", "via",
                                                     self.gateway),
                     ("link", "add", "cbr0", "type", "bridge"),
                     ("addr", "add", f"{node.gateway}/24", "dev", "cbr0"),
                     ("link", "set", "cbr0", "up")):
            ip("-n", ns, *args)
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"],
                       check=True, capture_output=True)
        ip("route", "replace", f"{node.prefix}.0/24", "via", node.uplink_ip)
        for other in self.nodes.values():
            ip("-n", other.netns, "route", "replace", f"{node.prefix}.0/24", "via",
               node.uplink_ip)
            ip("-n", ns, "route", "replace", f"{other.prefix}.0/24", "via", other.uplink_ip)
        self.nodes[name] = node
        return node

    # --- pods ------------------------------------------------------------------------------
    def add_pod(self, node_name: str, key: str) -> tuple[str, str]:
        """A network namespace for pod ``key`` on ``node_name``; returns (netns, ip)."""
        node = self.nodes[node_name]
        self._pod_seq += 1
        ns, veth = f"rw{self.tag}-p{self._pod_seq}", f"vp{self._pod_seq}"
        host = node.next_host
        node.next_host = host + 1 if host < 250 else 10
        addr = f"{node.prefix}.{host}"
        ip("netns", "add", ns)
        ip("-n", node.netns, "link", "add", veth, "type", "veth", "peer", "name", "eth0",
           "netns", ns)
        ip("-n", node.netns, "link", "set", veth, "master", "cbr0", "up")
        for args in (("link", "set", "lo", "up"), ("addr", "add", f"{addr}/24", "dev", "eth0"),
                     ("link", "set", "eth0", "up"),
                     ("route", "add", "default", "via", node.gateway)):
            ip("-n", ns, *args)
        node.pods[key] = (ns, addr, veth)
        return ns, addr

    def remove_pod(self, node_name: str, key: str) -> None:
        node = self.nodes.get(node_name)
        entry = node.pods.pop(key, None) if node else None
        if entry and node:
            ns, _, veth = entry
            ip("-n", node.netns, "link", "del", veth, check=False)
            ip("netns", "del", ns, check=False)
            shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)

    # --- services (kube-proxy) ---------------------------------------------------------------
    def route_vip(self, vip: str, target: tuple[str, str, str] | None,
                  ports: dict[int, int] | None = None) -> None:
        """Send ``vip`` to ``target`` = (node, pod netns or node netns, pod ip); None: nowhere.
        ``ports`` maps service port → targetPort where they differ (DNAT in the holder)."""
        old = self.vips.pop(vip, None)
        table = "rwsvc_" + vip.replace(".", "_")
        if old and (target is None or old[1] != target[1]):
            ip("-n", old[1], "addr", "del", f"{vip}/32", "dev", "lo", check=False)
            subprocess.run(["ip", "netns", "exec", old[1], "nft", "delete", "table", "ip", table],
                           capture_output=True, check=False)
        if target is None:
            ip("route", "del", f"{vip}/32", check=False)
            for n in self.nodes.values():
                ip("-n", n.netns, "route", "del", f"{vip}/32", check=False)
            return
        node_name, holder, pod_ip = target
        node = self.nodes[node_name]
        ip("-n", holder, "addr", "replace", f"{vip}/32", "dev", "lo", check=False)
        if ports:
            rules = "".join(f"    ip daddr {vip} tcp dport {p} redirect to :{t}\n"
                            for p, t in sorted(ports.items()))
            script = (f"table ip {table} {{}}\ndelete table ip {table}\ntable ip {table} {{\n"
                      f"  chain out {{ type nat hook output priority -100;\n{rules}  }}\n"
                      f"  chain pre {{ type nat hook prerouting priority -100;\n{rules}  }}\n}}\n")
            subprocess.run(["ip", "netns", "exec", holder, "nft", "-f", "-"], input=script,
                           text=True, capture_output=True, check=False)
        ip("route", "replace", f"{vip}/32", "via", node.uplink_ip)
        for n in self.nodes.values():
            if n.name != node_name:
                ip("-n", n.netns, "route", "replace", f"{vip}/32", "via", node.uplink_ip)
            elif holder != n.netns:
                ip("-n", n.netns, "route", "replace", f"{vip}/32", "via", pod_ip, "dev", "cbr0")
            else:
                ip("-n", n.netns, "route", "del", f"{vip}/32", check=False)
        self.vips[vip] = (node_name, holder)

    def write_hosts(self, text: str, netns_list: list[str] | None = None) -> None:
        """/etc/netns/<ns>/hosts, which ``ip netns exec`` bind-mounts over /etc/hosts; written
        in place so running containers (bind mounts of the same inode) see the update."""
        for ns in netns_list if netns_list is not None else self.all_netns():
            d = NETNS_ETC / ns
            d.mkdir(parents=True, exist_ok=True)
            with open(d / "hosts", "a+", encoding="utf-8") as fh:
                fh.seek(0)
                if fh.read() != text:
                    fh.seek(0)
                    fh.truncate()
                    fh.write(text)

    def all_netns(self) -> list[str]:
        return [n.netns for n in self.nodes.values()] + [
            p[0] for n in self.nodes.values() for p in n.pods.values()]

    # --- teardown / proof ------------------------------------------------------------------
    def leftovers(self) -> list[str]:
        out = []
        prefix = f"rw{self.tag}"
        for line in ip("netns", "list", check=False).stdout.splitlines():
            if line.startswith(prefix + "-"):
                out.append("netns " + line.split()[0])
        for line in ip("-o", "link", "show", check=False).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith(prefix):
                out.append("link " + name)
        for line in ip("route", "show", check=False).stdout.splitlines():
            if f"198.19.{16 * self.slot}." in line or any(
                    f"198.19.{16 * self.slot + k}." in line for k in range(1, 16)):
                out.append("route " + line.strip())
        out += [f"file {p}" for p in NETNS_ETC.glob(prefix + "-*")] if NETNS_ETC.exists() else []
        return out

    def destroy(self) -> None:
        prefix = f"rw{self.tag}"
        for line in ip("netns", "list", check=False).stdout.splitlines():
            if line.startswith(prefix + "-"):
                ip("netns", "del", line.split()[0], check=False)
        for line in ip("-o", "link", "show", check=False).stdout.splitlines():
            name = line.split(":")[1].strip().split("@")[0]
            if name.startswith(prefix) and name != self.bridge:
                ip("link", "del", name, check=False)
        ip("link", "del", self.bridge, check=False)
        for line in ip("route", "show", check=False).stdout.splitlines():
            tokens = line.split()
            if tokens and any(f"198.19.{16 * self.slot + k}." in tokens[int(
                    tokens[0] == "unreachable")] for k in range(16)):
                ip("route", "del", *tokens[:2] if tokens[0] == "unreachable" else tokens[:1],
                   check=False)
        if NETNS_ETC.exists():
            for p in NETNS_ETC.glob(prefix + "-*"):
                shutil.rmtree(p, ignore_errors=True)
        self.nodes.clear()
