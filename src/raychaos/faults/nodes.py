"""Drain GPU nodes: the preemption (or scale-down) of the scarcest capacity in a Ray cluster.

A drained GPU node takes its GPUs with it; what matters is whether work moves, how long the
cluster runs without that capacity, and whether a replacement comes back. The target drains
through Ray's own API, stops the node at the deadline and (with ``replace``) lets the
operator start a replacement; the evidence carries the state sequence and GPU capacity.
"""

from __future__ import annotations

from typing import Any, Literal

from raychaos.faults._validate import Problem, raise_problems, range_problems, validates
from raychaos.runtime import current

__all__ = ["drain_gpu_nodes"]


def drain_gpu_nodes(count: int = 1, selector: dict[str, str] | None = None,
                    deadline_s: float = 10.0,
                    reason: Literal["preemption", "idle"] = "preemption", replace: bool = True,
                    replace_delay_s: float = 5.0) -> dict[str, Any]:
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
    raise_problems("drain_gpu_nodes", _check(count, selector, deadline_s, reason, replace,
                                             replace_delay_s))
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


@validates(drain_gpu_nodes)
def _check(count: int = 1, selector: dict[str, str] | None = None, deadline_s: float = 10.0,
           reason: str = "preemption", replace: bool = True,
           replace_delay_s: float = 5.0) -> list[Problem]:
    problems = range_problems(count=(count, 1, 64), deadline_s=(deadline_s, 0, 3600),
                              replace_delay_s=(replace_delay_s, 0, 3600))
    if reason not in ("preemption", "idle"):
        problems.append(("reason", f"must be 'preemption' or 'idle', got {reason!r}"))
    if selector is not None:
        if not isinstance(selector, dict):
            problems.append(("selector", f"expected a mapping of labels, got {selector!r}"))
        elif not selector:
            problems.append(("selector", "is empty: name at least one label, or leave it out "
                                         "to match any GPU node"))
        elif not all(isinstance(k, str) and k and isinstance(v, str) and v
                     for k, v in selector.items()):
            problems.append(("selector", f"labels must be non-empty strings, got {selector!r}"))
    return problems


def _preflight(target: Any, count: int = 1, selector: dict[str, str] | None = None,
               **_ignored: Any) -> None:
    """A selector that matches no GPU node fails now, before loads start (NothingMatched)."""
    select = getattr(target, "select_drain_victims", None)
    if select is not None:
        select(count, selector)


drain_gpu_nodes.preflight = _preflight  # type: ignore[attr-defined]
