"""Kernel traffic shaping and filtering for the local target's pods: tc and nftables, nothing else.

Every fault that slows or drops traffic goes through here, so "real kernel shaping, not a sleep"
holds in one place: tbf/htb qdiscs on the veths and the bridge, nftables tables inside a node's
network namespace. Commands run in a namespace with ``ip netns exec``. Each helper is idempotent
for undo: removing something already gone is fine, anything else that fails is raised.
"""

from __future__ import annotations

import subprocess
from functools import lru_cache

from raychaos.errors import FaultFailed

__all__ = ["sh", "netem_available", "root_qdisc", "add_tbf", "del_root_qdisc", "add_port_htb",
           "nft_table_add", "nft_table_del", "nft_tables", "NFT_TABLE"]

NFT_TABLE = "raychaos"  # table name inside a node's own namespace (family inet)
GONE = ("Cannot find device", "No such file or directory",
        "Cannot delete qdisc with handle of zero", "Invalid handle", "does not exist")


def sh(*cmd: str, netns: str | None = None, check: bool = True,
       stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    full = (["ip", "netns", "exec", netns] if netns else []) + list(cmd)
    proc = subprocess.run(full, capture_output=True, text=True, check=False, input=stdin,
                          timeout=30)
    if check and proc.returncode != 0:
        raise FaultFailed(f"'{' '.join(full)}' failed: "
                          f"{(proc.stderr or proc.stdout).strip().splitlines()[:1]}")
    return proc


@lru_cache(maxsize=1)
def netem_available() -> bool:
    """Try a netem qdisc on a scratch veth pair (then remove it): the only honest check."""
    a, b = "rcnetemp0", "rcnetemp1"
    sh("ip", "link", "del", a, check=False)
    if sh("ip", "link", "add", a, "type", "veth", "peer", "name", b, check=False).returncode:
        return False
    try:
        return sh("tc", "qdisc", "add", "dev", a, "root", "netem", "delay", "1ms",
                  check=False).returncode == 0
    finally:
        sh("ip", "link", "del", a, check=False)


def root_qdisc(dev: str, netns: str | None = None) -> str | None:
    """Kind of the root qdisc of ``dev`` (``noqueue``, ``tbf``…), None if the device is gone."""
    proc = sh("tc", "qdisc", "show", "dev", dev, "root", netns=netns, check=False)
    if proc.returncode != 0:
        return None
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) > 1 and parts[0] == "qdisc":
            return parts[1]
    return "noqueue"


def _claim_root(dev: str, netns: str | None) -> None:
    kind = root_qdisc(dev, netns)
    if kind is None:
        raise FaultFailed(f"device {dev} (netns {netns or 'host'}) does not exist")
    if kind not in ("noqueue", "pfifo_fast", "fq_codel", "mq", "noop"):
        raise FaultFailed(f"device {dev} (netns {netns or 'host'}) already has a {kind} root "
                          "qdisc: another fault owns it; undo that one first")


def add_tbf(dev: str, rate_bps: float, netns: str | None = None, queue_ms: float = 100.0
            ) -> str:
    """Token bucket on ``dev``'s egress at ``rate_bps`` bits/s, packets queued at most
    ``queue_ms`` (tbf's latency: a deep queue is bufferbloat); returns ``tc qdisc show``."""
    _claim_root(dev, netns)
    burst = max(16 * 1024, int(rate_bps / 8 / 100))  # ~10 ms of traffic, at least 16 KiB
    sh("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "tbf", "rate",
       f"{int(rate_bps)}bit", "burst", str(burst), "latency", f"{max(1, int(queue_ms))}ms",
       netns=netns)
    return sh("tc", "qdisc", "show", "dev", dev, "root", netns=netns).stdout.strip()


def add_port_htb(dev: str, sport: int, rate_bps: float, netns: str | None = None) -> str:
    """HTB on ``dev`` egress: packets from TCP source port ``sport`` get ``rate_bps``, the
    rest an unshaped default class. Returns ``tc class show`` for the evidence."""
    _claim_root(dev, netns)
    rate = f"{int(rate_bps)}bit"
    burst = str(max(16 * 1024, int(rate_bps / 8 / 100)))
    sh("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10",
       netns=netns)
    sh("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate",
       "10gbit", netns=netns)
    sh("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:20", "htb", "rate", rate,
       "ceil", rate, "burst", burst, "cburst", burst, netns=netns)
    sh("tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
       "match", "ip", "protocol", "6", "0xff", "match", "ip", "sport", str(sport), "0xffff",
       "flowid", "1:20", netns=netns)
    return sh("tc", "class", "show", "dev", dev, netns=netns).stdout.strip()


def del_root_qdisc(dev: str, netns: str | None = None, kinds: tuple[str, ...] = ("tbf", "htb")
                   ) -> bool:
    """Remove our root qdisc from ``dev``; True when none of ``kinds`` is left there."""
    kind = root_qdisc(dev, netns) if _netns_exists(netns) else None
    if kind is None or kind not in kinds:
        return True
    proc = sh("tc", "qdisc", "del", "dev", dev, "root", netns=netns, check=False)
    if proc.returncode and not any(g in proc.stderr for g in GONE):
        raise FaultFailed(f"tc qdisc del dev {dev} root failed: {proc.stderr.strip()}")
    return root_qdisc(dev, netns) not in kinds


def nft_table_add(netns: str, rules: list[str], table: str = NFT_TABLE) -> str:
    """Create table inet ``table`` in ``netns`` with input/output chains holding ``rules``
    (each rule applied to both chains); returns the listed table."""
    if table in nft_tables(netns):
        raise FaultFailed(f"netns {netns} already has an nft table '{table}': another fault "
                          "owns it; undo that one first")
    body = [f"table inet {table} {{"]
    for chain, hook in (("input", "input"), ("output", "output")):
        body.append(f"  chain {chain} {{ type filter hook {hook} priority -10; policy accept;")
        body += [f"    {rule}" for rule in rules]
        body.append("  }")
    body.append("}")
    sh("nft", "-f", "-", netns=netns, stdin="\n".join(body) + "\n")
    return sh("nft", "list", "table", "inet", table, netns=netns).stdout.strip()


def nft_tables(netns: str) -> list[str]:
    proc = sh("nft", "list", "tables", netns=netns, check=False)
    return [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("table")]


def nft_table_del(netns: str, table: str = NFT_TABLE) -> bool:
    """Remove our table from ``netns``; True when it is gone (or the namespace is)."""
    if not _netns_exists(netns) or table not in nft_tables(netns):
        return True
    sh("nft", "delete", "table", "inet", table, netns=netns, check=False)
    return table not in nft_tables(netns)


def _netns_exists(netns: str | None) -> bool:
    if netns is None:
        return True
    out = sh("ip", "netns", "list", check=False).stdout
    return any(line.split()[0] == netns for line in out.splitlines() if line.strip())
