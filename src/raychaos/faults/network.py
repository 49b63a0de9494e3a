"""Saturate, degrade or cut a node's network: shaped bandwidth, random loss, a flood, a partition.

Object transfers, GCS heartbeats and job submission all ride the pod network; a noisy
neighbour or a bad link shows up as slow ``ray.get`` and, at the extreme, a node marked dead.
The evidence is a pod-to-pod TCP transfer measured before and during the fault.
"""

from __future__ import annotations

from typing import Any

from raychaos.faults._validate import Problem, node_list, raise_problems, range_problems, validates
from raychaos.runtime import current

__all__ = ["saturate_network"]


def saturate_network(nodes: list[str] | None = None, bandwidth_mbit: float = 50.0,
                     loss_pct: float = 0.0, latency_ms: float = 0.0, flood: bool = True,
                     partition: bool = False, flood_s: float = 120.0) -> dict[str, Any]:
    """Degrade the network of ``nodes`` until rolled back.

    :param nodes: node names, e.g. ``["worker-1"]`` (the default); one node must stay out.
    :param bandwidth_mbit: link limit in Mbit/s in both directions (tc tbf); 0 = no limit.
    :param loss_pct: percent (0..100) of packets dropped at random (nftables).
    :param latency_ms: extra latency; needs tc netem (refused where missing).
    :param flood: run a paced bulk TCP flood into each node for ``flood_s`` seconds.
    :param partition: drop all traffic to and from the nodes (nftables).
    :param flood_s: how long the flood runs at most (it stops by itself).
    :returns: evidence: transfer rate before/during, the qdiscs and nft tables applied.
    """
    nodes = ["worker-1"] if nodes is None else nodes
    raise_problems("saturate_network", _check(nodes, bandwidth_mbit, loss_pct, latency_ms, flood,
                                              partition, flood_s))
    run = current()
    args = {"nodes": nodes, "bandwidth_mbit": bandwidth_mbit, "loss_pct": loss_pct,
            "latency_ms": latency_ms, "flood": flood, "partition": partition, "flood_s": flood_s}
    with run.fault("saturate_network", args) as record:
        evidence = run.target.saturate_network(
            nodes, bandwidth_bps=bandwidth_mbit * 1e6, loss_pct=loss_pct, latency_ms=latency_ms,
            flood=flood, partition=partition, flood_s=flood_s, record=record)
        run.ledger.update(record, evidence=evidence)
    return evidence


@validates(saturate_network)
def _check(nodes: list[str] | None = None, bandwidth_mbit: float = 50.0, loss_pct: float = 0.0,
           latency_ms: float = 0.0, flood: bool = True, partition: bool = False,
           flood_s: float = 120.0) -> list[Problem]:
    problems = range_problems(bandwidth_mbit=(bandwidth_mbit, 0, 100_000),
                              loss_pct=(loss_pct, 0, 100), latency_ms=(latency_ms, 0, 60_000),
                              flood_s=(flood_s, 1, 3600))
    problems += node_list("nodes", nodes)
    if nodes == []:
        problems.append(("nodes", "is empty: name at least one node, e.g. ['worker-1']"))
    if not problems and not (bandwidth_mbit or loss_pct or partition or flood):
        problems.append(("bandwidth_mbit", f"is {bandwidth_mbit!r} (no limit) and loss_pct, "
                                           "partition and flood are off: the fault would do "
                                           "nothing"))
    return problems
