"""Throttle image pulls: the slow-registry half of "the node came back, but not for minutes".

Sets up a registry behind a real kernel shaper (locally) or a ``tc`` DaemonSet (Kubernetes) and
makes every node (re)start pull its image through it; with ``restart_workers`` some workers
restart right away so the delay is observed. Pair it with a head kill
(``experiments/head-kill-slow-registry.yaml``) to see recovery time grow with image size / rate.
"""

from __future__ import annotations

from typing import Annotated, Any

from raychaos.config.arguments import Range, fault_action
from raychaos.context import current
from raychaos.faults.network import node_names

__all__ = ["throttle_registry_pulls"]


@fault_action(rules=[node_names("restart_workers")])
def throttle_registry_pulls(rate_mbit: Annotated[float, Range(0.001, 100_000)] = 20.0,
                            latency_ms: Annotated[float, Range(0, 60_000)] = 0.0,
                            error_rate: Annotated[float, Range(0, 0.99)] = 0.0,
                            image_mb: Annotated[float, Range(0.001, 10_000)] = 32.0,
                            restart_workers: list[str] | None = None) -> dict[str, Any]:
    """Serve node images from a registry shaped to ``rate_mbit`` Mbit/s.

    :param rate_mbit: registry egress limit in Mbit/s (a tc HTB class), > 0.
    :param latency_ms: extra latency per packet; needs tc netem (refused where missing).
    :param error_rate: fraction (0..0.99) of blob requests answered 503; pulls retry.
    :param image_mb: size of the synthetic image every node pulls before it starts.
    :param restart_workers: workers to restart now so they pull under the throttle,
        e.g. ``["worker-2"]``; default none.
    :returns: evidence: pull rate before/during (measured from a pod), the shaped tc class,
        and the pulls of restarted workers.
    """
    run = current()
    args = {"rate_mbit": rate_mbit, "latency_ms": latency_ms, "error_rate": error_rate,
            "image_mb": image_mb, "restart_workers": restart_workers}
    with run.fault("throttle_registry_pulls", args) as record:
        evidence = run.target.throttle_registry_pulls(
            rate_bps=rate_mbit * 1e6, latency_ms=latency_ms, error_rate=error_rate,
            image_mb=image_mb, restart_workers=restart_workers, record=record)
        run.ledger.update(record, evidence=evidence)
    return evidence
