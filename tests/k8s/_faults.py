"""The Kubernetes fault mechanics with their Kubernetes-only knobs, for the k8s tests."""

from __future__ import annotations

from raychaos.targets.kubernetes.target import KubernetesTarget

# --- the Kubernetes fault mechanics with their Kubernetes-only knobs --------------------------
# The Target protocol's fault methods take exactly what the fault functions pass; these tests
# also exercise what only the Kubernetes helpers know (label-selector strings, evict=False, the
# throttle's nodes and registry hosts), so they call the helpers the target delegates to.

def drain(target: KubernetesTarget, record: dict | None = None, count: int | None = 1,
          selector: str | None = None, deadline_s: float = 10.0, evict: bool = True) -> dict:
    from raychaos.targets.kubernetes import drain as k8s_drain

    return k8s_drain.drain_nodes(target._api(), target.ns, target.cluster, target.run_id,
                                 {} if record is None else record, selector=selector,
                                 count=None if selector else count, evict=evict,
                                 deadline_s=deadline_s,
                                 max_nodes=target.spec.max_nodes_at_once)


def throttle(target: KubernetesTarget, rate_bps: float, nodes: list[str],
             registry_hosts: list[str], record: dict | None = None) -> dict:
    from raychaos.targets.kubernetes import network
    from raychaos.targets.kubernetes.target import _tc_rate

    return network.throttle_registry_pulls(target._api(), target.ns, target.run_id,
                                           {} if record is None else record,
                                           rate=_tc_rate(rate_bps), nodes=nodes,
                                           registry_hosts=registry_hosts)


def saturate(target: KubernetesTarget, record: dict | None = None,
             nodes: list[str] | None = None, bandwidth_bps: float = 0.0,
             flood_s: float = 120.0) -> dict:
    return target.saturate_network(nodes=nodes or [], bandwidth_bps=bandwidth_bps,
                                   loss_pct=0.0, latency_ms=0.0, flood=True, partition=False,
                                   flood_s=flood_s, record={} if record is None else record)
