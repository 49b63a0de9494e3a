"""Network saturation of local pods: shaped links, random loss, partitions and a flood.

The knobs are the kernel's own: a tbf qdisc on both ends of a node's veth (host side = traffic
into the node, node side inside its namespace = traffic out of it), an nftables table in the
node's namespace for random drops (``numgen random``) or a full partition, and a paced flood
between pods (``netprobe.py``: UDP out of a shaped node, else bulk TCP into it). Each piece
is written into the record's ``undo`` *before* it is applied, so an interrupted fault is still
fully undone. Proof that it landed is measured, not assumed: a short TCP transfer between two
pods before and during the fault.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from raychaos.errors import ConfigError, FaultFailed, NothingMatched, RollbackFailed
from raychaos.results.store import checkpoint
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.network.blackout import BLACKOUT_TABLE
from raychaos.targets.local.network.shaping import (
    NFT_TABLE,
    add_tbf,
    del_root_qdisc,
    nft_table_add,
    nft_table_del,
    nft_tables,
    root_qdisc,
)
from raychaos.targets.local.nodes import process_matches

__all__ = ["NETPROBE", "measure_transfer", "netfault_leftovers", "saturate_network",
           "undo_netfault"]

NETPROBE = str(Path(__file__).with_name("netprobe.py"))
PROBE_PORT, FLOOD_PORT = 5201, 5202


def measure_transfer(cluster: LocalCluster, src: str, dst: str, seconds: float = 1.5,
                     port: int = PROBE_PORT) -> dict[str, Any]:
    """Bulk TCP from pod ``src`` to pod ``dst`` for ``seconds``; bytes, seconds, rate."""
    pods = cluster.pods()
    recv = _spawn(pods[dst]["netns"], "recv", pods[dst]["ip"], port, seconds)
    try:
        ready = recv.stdout.readline() if recv.stdout else ""
        if "READY" not in ready:
            raise FaultFailed(f"transfer probe in {dst} did not start: {ready!r}")
        send = _spawn(pods[src]["netns"], "send", pods[dst]["ip"], port, seconds)
        out, _ = recv.communicate(timeout=seconds + 15)
        send.wait(timeout=seconds + 15)
    finally:
        for proc in (recv,):
            if proc.poll() is None:
                proc.kill()
    result = json.loads(out.strip().splitlines()[-1])
    return {"src": src, "dst": dst, **result, "mbit_s": round(result["rate_bps"] / 1e6, 2)}

# --- the fault -------------------------------------------------------------------------
def saturate_network(cluster: LocalCluster, *, nodes: list[str], bandwidth_bps: float,
                     loss_pct: float, flood: bool, partition: bool, flood_s: float,
                     record: dict[str, Any], queue_ms: float = 100.0) -> dict[str, Any]:
    pods = cluster.pods()
    if not nodes:
        raise NothingMatched("saturate_network: nodes is empty; name at least one node")
    unknown = [n for n in nodes if n not in pods]
    if unknown:
        raise NothingMatched(f"saturate_network: no node named {unknown[0]!r} in local "
                             f"cluster '{cluster.name}' (nodes: {sorted(pods)})")
    if not (bandwidth_bps or loss_pct or partition or flood):
        raise ConfigError("saturate_network: nothing to do (no bandwidth_mbit, loss_pct, "
                          "partition or flood)")
    peers = [n for n in pods if n not in nodes]
    if not peers:
        raise ConfigError("saturate_network: every node is targeted; leave one out to "
                          "measure against")
    peer, probe_dst = peers[0], nodes[0]
    before = measure_transfer(cluster, peer, probe_dst)
    undo: dict[str, Any] = {"kind": "netfault", "qdiscs": [], "nft": [], "pids": []}
    record["undo"] = undo
    applied: dict[str, Any] = {"qdiscs": {}, "nft": {}}
    for name in nodes:
        plan = pods[name]
        links = [(cluster.net.host_link(plan["index"]), None),
                 (cluster.net.node_link(plan["index"]), plan["netns"])]
        if bandwidth_bps:
            for dev, ns in links:
                undo["qdiscs"].append({"dev": dev, "netns": ns})
                checkpoint(record)  # on disk before the qdisc exists
                applied["qdiscs"][f"{ns or 'host'}/{dev}"] = add_tbf(dev, bandwidth_bps, ns,
                                                                     queue_ms)
        rules = []
        if partition:
            rules = [f'iifname "{links[1][0]}" drop', f'oifname "{links[1][0]}" drop']
        elif loss_pct:
            rules = [f"numgen random mod 10000 < {int(round(loss_pct * 100))} drop"]
        if rules:
            undo["nft"].append({"netns": plan["netns"]})
            checkpoint(record)
            applied["nft"][name] = nft_table_add(plan["netns"], rules)
    if flood and not partition:
        rate = bandwidth_bps * 2 if bandwidth_bps else 200e6  # paced: load, not a CPU burn
        for i, name in enumerate(nodes):
            # shaped, the flood leaves the node as UDP: it fills the node's own egress queue,
            # where everything else it sends (the raylet's health-check replies, shuffle
            # blocks) waits behind it, as behind a saturated NIC — a TCP flow coming in is
            # held by its congestion window and leaves the queue shallow (measured: the link
            # full at 2 Mbit/s, not one health check late). Alone, a TCP flood comes in. The
            # Kubernetes target floods the same way.
            sink_node, source = (peer, name) if bandwidth_bps else (name, peer)
            proto = "udp-" if bandwidth_bps else ""
            sink = _spawn(pods[sink_node]["netns"], f"{proto}recv", pods[sink_node]["ip"],
                          FLOOD_PORT + i, flood_s, pipe=False)
            undo["pids"].append(sink.pid)
            checkpoint(record)
            time.sleep(0.3)
            src = _spawn(pods[source]["netns"], f"{proto}send", pods[sink_node]["ip"],
                         FLOOD_PORT + i, flood_s, rate, pipe=False)
            undo["pids"].append(src.pid)
            checkpoint(record)
        time.sleep(0.5)
    during = measure_transfer(cluster, peer, probe_dst, seconds=2.0 if partition else 1.5)
    limit = bandwidth_bps or None
    landed = (during["rate_bps"] == 0 if partition
              else during["rate_bps"] < before["rate_bps"] * 0.8 if (bandwidth_bps or flood)
              else bool(applied["nft"]))
    if not landed:
        raise FaultFailed(f"saturate_network: no measurable effect on {probe_dst}: "
                          f"{before['mbit_s']} Mbit/s before, {during['mbit_s']} during")
    return {"nodes": list(nodes), "peer": peer, "limit_bps": limit, "loss_pct": loss_pct,
            "queue_ms": queue_ms,
            "partition": partition, "flood": bool(flood and not partition),
            "before": before, "during": during, "applied": applied,
            "flood_pids": list(undo["pids"]), "landed": True}

def undo_netfault(cluster: LocalCluster, undo: dict[str, Any]) -> dict[str, Any]:
    left: list[str] = []
    for pid in undo.get("pids", []):
        _kill_probe(pid)
    for item in undo.get("qdiscs", []):
        if not del_root_qdisc(item["dev"], item.get("netns")):
            left.append(f"qdisc on {item['dev']}")
    for item in undo.get("nft", []):
        if not nft_table_del(item["netns"]):
            left.append(f"nft table {NFT_TABLE} in {item['netns']}")
    still = [p for p in undo.get("pids", []) if _is_probe(p)]
    left += [f"flood PID {p}" for p in still]
    if left:
        raise RollbackFailed("network fault not fully undone, still applied: "
                             + ", ".join(left))
    return {"undone": True, "qdiscs": len(undo.get("qdiscs", [])),
            "nft": len(undo.get("nft", [])), "pids": undo.get("pids", [])}

def netfault_leftovers(cluster: LocalCluster) -> dict[str, Any]:
    """Every tbf/htb and nft table of ours (saturation, blackout) on this cluster's links (empty
    when clean)."""
    out: dict[str, Any] = {"qdiscs": [], "nft": []}
    for name, plan in cluster.pods().items():
        for dev, ns in ((cluster.net.host_link(plan["index"]), None),
                        (cluster.net.node_link(plan["index"]), plan["netns"])):
            if root_qdisc(dev, ns) in ("tbf", "htb", "netem"):
                out["qdiscs"].append(f"{ns or 'host'}/{dev}")
        tables = nft_tables(plan["netns"])
        out["nft"] += [name if t == NFT_TABLE else f"{name}/{t}"
                       for t in (NFT_TABLE, BLACKOUT_TABLE) if t in tables]
    if root_qdisc(cluster.net.bridge) in ("tbf", "htb"):
        out["qdiscs"].append(cluster.net.bridge)
    return out


def _spawn(netns: str, mode: str, host: str, port: int, seconds: float, rate: float = 0.0,
           pipe: bool = True) -> subprocess.Popen[str]:
    cmd = ["ip", "netns", "exec", netns, sys.executable, NETPROBE, mode, host, str(port),
           str(seconds)] + ([str(rate)] if rate else [])
    return subprocess.Popen(cmd, stdout=subprocess.PIPE if pipe else subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True,
                            start_new_session=True)


def _is_probe(pid: int) -> bool:
    return process_matches(pid, b"netprobe")


def _kill_probe(pid: int) -> None:
    """SIGKILL a flood process group we started; never a PID that is no longer ours."""
    if not _is_probe(pid):
        return
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
    deadline = time.monotonic() + 5
    while _is_probe(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
