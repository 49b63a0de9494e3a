"""Cut a local pod off the network and give it back: the blackout's two halves, and link counters.

A blackout is what Ray's own release chaos test does with iptables (ray PR#58241): every packet
into and out of the node dropped for a while, the raylet process left running. Here that is one
nftables table (``raychaos_blackout``, its own name so a saturation fault's table can coexist)
in the node's own network namespace, dropping everything on the pod's end of its veth — the
harness and other pods see a silent node, exactly as a partitioned pod. The namespace is noted
in the record's undo before the table exists; restoring deletes the table and is idempotent.
Proof is a TCP connect from the host to the node's metrics port: answered before, silent during.

Link counters (bytes in and out of each pod, from its host-side veth) feed the timeline's
``signals`` records, so a saturated or cut link shows as a rate next to health-check failures.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

from raychaos.errors import FaultFailed, NothingMatched, RollbackFailed
from raychaos.results.store import checkpoint
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.network.shaping import nft_table_add, nft_table_del, nft_tables, sh

__all__ = ["BLACKOUT_TABLE", "cut_network", "network_counters", "restore_network"]

BLACKOUT_TABLE = "raychaos_blackout"


def _reachable(ip: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=timeout):
            return True
    except OSError:
        return False


def cut_network(cluster: LocalCluster, *, nodes: list[str], record: dict[str, Any]
                ) -> dict[str, Any]:
    """Drop every packet into and out of ``nodes``; evidence: the nft tables and a connect probe
    (reachable before, not during)."""
    pods = cluster.pods()
    unknown = [n for n in nodes if n not in pods]
    if unknown:
        raise NothingMatched(f"blackout: no node named {unknown[0]!r} in local cluster "
                             f"'{cluster.name}' (nodes: {sorted(pods)})")
    undo = record.get("undo") or {}
    undo.setdefault("kind", "blackout")
    undo.setdefault("nft", [])
    record["undo"] = undo
    applied: dict[str, Any] = {}
    cut_at: float | None = None
    for name in nodes:
        plan = pods[name]
        port = int(plan.get("ports", {}).get("metrics", 8080))
        before = _reachable(plan["ip"], port)
        if {"netns": plan["netns"]} not in undo["nft"]:
            undo["nft"].append({"netns": plan["netns"]})
        checkpoint(record)  # on disk before the table exists
        dev = cluster.net.node_link(plan["index"])
        table = nft_table_add(plan["netns"], [f'iifname "{dev}" counter drop',
                                              f'oifname "{dev}" counter drop'],
                              table=BLACKOUT_TABLE)
        cut_at = cut_at or time.time()
        during = _reachable(plan["ip"], port)
        if during:
            raise FaultFailed(f"blackout: {name} ({plan['ip']}:{port}) still answers with the "
                              f"nft table in place")
        applied[name] = {"netns": plan["netns"], "dev": dev, "reachable_before": before,
                         "reachable_during": during, "nft": table}
    return {"nodes": list(nodes), "applied": applied, "cut_at": cut_at, "landed": True}


def restore_network(cluster: LocalCluster, record: dict[str, Any]) -> dict[str, Any]:
    """Delete every blackout table the record names; idempotent. Returns the drop counters."""
    undo = record.get("undo") or {}
    dropped: dict[str, str] = {}
    left = []
    for item in undo.get("nft", []):
        netns = item["netns"]
        if BLACKOUT_TABLE in nft_tables(netns):
            listing = sh("nft", "list", "table", "inet", BLACKOUT_TABLE, netns=netns,
                         check=False).stdout
            dropped[netns] = " / ".join(line.strip() for line in listing.splitlines()
                                        if "counter" in line)
        if not nft_table_del(netns, table=BLACKOUT_TABLE):
            left.append(f"nft table {BLACKOUT_TABLE} in {netns}")
    if left:
        raise RollbackFailed("blackout not undone, still applied: " + ", ".join(left))
    return {"undone": True, "restored_at": time.time(), "dropped": dropped}


def network_counters(cluster: LocalCluster) -> dict[str, dict[str, int]]:
    """Bytes into and out of each pod so far (its host-side veth), ``{}`` in host mode."""
    desired = cluster.desired() or {}
    if desired.get("mode") != "netns":
        return {}
    out: dict[str, dict[str, int]] = {}
    for entry in desired.get("nodes", []):
        plan = entry["plan"]
        stats = Path("/sys/class/net") / cluster.net.host_link(plan["index"]) / "statistics"
        try:  # the host side sends what goes into the pod
            out[plan["name"]] = {"in_bytes": int((stats / "tx_bytes").read_text()),
                                 "out_bytes": int((stats / "rx_bytes").read_text())}
        except (OSError, ValueError):
            continue
    return out
