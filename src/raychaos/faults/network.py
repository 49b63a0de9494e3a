"""Saturate, degrade or cut a node's network: shaped bandwidth, random loss, a flood, a partition.

Object transfers, GCS heartbeats and job submission all ride the pod network; a noisy
neighbour or a bad link shows up as slow ``ray.get`` and, at the extreme, a node marked dead.
The evidence is a pod-to-pod TCP transfer measured before and during the fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from raychaos.config.arguments import Problem, Range, Rule, fault_action
from raychaos.context import current

__all__ = ["node_names", "saturate_network"]


def node_names(argument: str, required: bool = False) -> Rule:
    """A rule: ``argument`` is a list of distinct node names (non-empty when ``required``)."""

    def rule(args: Mapping[str, Any]) -> list[Problem]:
        value = args.get(argument)
        if value is None:
            return []
        if not all(isinstance(n, str) and n for n in value):
            return [(argument, f"expected a list of node names, got {value!r}")]
        if len(set(value)) != len(value):
            return [(argument, f"names a node twice: {value!r}")]
        if required and not value:
            return [(argument, "is empty: name at least one node, e.g. ['worker-1']")]
        return []

    return rule


def _something_to_do(args: Mapping[str, Any]) -> list[Problem]:
    if not (args["bandwidth_mbit"] or args["loss_pct"] or args["partition"] or args["flood"]):
        return [("bandwidth_mbit", f"is {args['bandwidth_mbit']!r} (no limit) and loss_pct, "
                                   "partition and flood are off: the fault would do nothing")]
    return []


@fault_action(rules=[node_names("nodes", required=True), _something_to_do])
def saturate_network(nodes: list[str] | None = None,
                     bandwidth_mbit: Annotated[float, Range(0, 100_000)] = 50.0,
                     loss_pct: Annotated[float, Range(0, 100)] = 0.0,
                     latency_ms: Annotated[float, Range(0, 60_000)] = 0.0, flood: bool = True,
                     partition: bool = False,
                     flood_s: Annotated[float, Range(1, 3600)] = 120.0,
                     queue_ms: Annotated[float, Range(1, 60_000)] = 100.0) -> dict[str, Any]:
    """Degrade the network of ``nodes`` until rolled back.

    :param nodes: node names, e.g. ``["worker-1"]`` (the default); one node must stay out.
    :param bandwidth_mbit: link limit in Mbit/s in both directions (tc tbf); 0 = no limit.
    :param loss_pct: percent (0..100) of packets dropped at random (nftables).
    :param latency_ms: extra latency; needs tc netem (refused where missing).
    :param flood: run a paced bulk TCP flood into each node for ``flood_s`` seconds.
    :param partition: drop all traffic to and from the nodes (nftables).
    :param flood_s: how long the flood runs at most (it stops by itself).
    :param queue_ms: how long a packet may wait in the shaper's queue before it is dropped (tc
        tbf ``latency``): 100 ms is a shallow queue; seconds are the bufferbloat of a saturated
        NIC, where a GCS health check waits behind the flood and times out.
    :returns: evidence: transfer rate before/during, the qdiscs and nft tables applied.
    """
    nodes = ["worker-1"] if nodes is None else nodes
    run = current()
    args = {"nodes": nodes, "bandwidth_mbit": bandwidth_mbit, "loss_pct": loss_pct,
            "latency_ms": latency_ms, "flood": flood, "partition": partition, "flood_s": flood_s,
            "queue_ms": queue_ms}
    with run.fault("saturate_network", args) as record:
        evidence = run.target.saturate_network(
            nodes=nodes, bandwidth_bps=bandwidth_mbit * 1e6, loss_pct=loss_pct,
            latency_ms=latency_ms, flood=flood, partition=partition, flood_s=flood_s,
            record=record, queue_ms=queue_ms)
        run.ledger.update(record, evidence=evidence)
    return evidence
