"""Drain GPU nodes: the preemption (or scale-down) of the scarcest capacity in a Ray cluster.

A drained GPU node takes its GPUs with it; what matters is whether work moves, how long the
cluster runs without that capacity, and whether a replacement comes back. The target drains
through Ray's own API (locally) or cordons and evicts (Kubernetes), stops the node at the
deadline and (with ``replace``) lets the operator start a replacement; the evidence carries the
state sequence and GPU capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from raychaos.config.arguments import Problem, Range, fault_action
from raychaos.context import current

__all__ = ["drain_gpu_nodes"]


def _selector(args: Mapping[str, Any]) -> list[Problem]:
    selector = args.get("selector")
    if selector is not None and not selector:
        return [("selector", "is empty: name at least one label, or leave it out to match "
                             "any GPU node")]
    if selector and not all(k and v for k, v in selector.items()):
        return [("selector", f"labels must be non-empty strings, got {selector!r}")]
    return []


@fault_action(rules=[_selector])
def drain_gpu_nodes(count: Annotated[int, Range(1, 64)] = 1,
                    selector: dict[str, str] | None = None,
                    deadline_s: Annotated[float, Range(0, 3600)] = 10.0,
                    reason: Literal["preemption", "idle"] = "preemption", replace: bool = True,
                    replace_delay_s: Annotated[float, Range(0, 3600)] = 5.0) -> dict[str, Any]:
    """Drain ``count`` GPU nodes, stop them at the deadline, optionally replace them.

    :param count: how many GPU nodes to drain; more than exist is an error before any drain.
    :param selector: node labels the victims must carry, e.g.
        ``{"raychaos.io/node-group": "gpu"}``; default: any node with GPUs.
    :param deadline_s: seconds between the drain request and the node being stopped.
    :param reason: ``preemption`` (always accepted) or ``idle`` (Ray rejects it on busy nodes).
    :param replace: start a replacement node after the stop, as an autoscaler would.
    :param replace_delay_s: seconds between the stop and the replacement's start.
    :returns: evidence: states each node went through (ALIVE → DRAINING → DEAD → REPLACED),
        GPU capacity over time, drain-to-replacement seconds.
    """
    run = current()
    args = {"count": count, "selector": selector, "deadline_s": deadline_s, "reason": reason,
            "replace": replace, "replace_delay_s": replace_delay_s}
    with run.fault("drain_gpu_nodes", args) as record:
        run.target.select_drain_victims(count, selector)  # NothingMatched before any change
        evidence = run.target.drain_nodes(count=count, selector=selector, deadline_s=deadline_s,
                                          reason=reason, replace=replace,
                                          replace_delay_s=replace_delay_s, record=record)
        run.ledger.update(record, evidence=evidence)
    return evidence
