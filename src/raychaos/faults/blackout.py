"""Network blackouts: all of a node's traffic dropped for ``down_s`` every ``every_s``.

The pattern of Ray's own release chaos test (ray PR#58241): the raylet keeps running, but
nothing reaches it — no GCS health check, no object transfer. Whether the GCS then marks the
node DEAD depends on its health-check settings (``target.local.health_check_*``), and a node
marked DEAD while its raylet was alive is a *false death* (what users hit in shuffles: ray#25231,
ray#16945, ray#54035), counted by :func:`raychaos.probes.nodes.false_node_deaths`.

The cycles run here, so each down and up is a timeline event at the moment it happened
(``blackout_down`` / ``blackout_up``); the target only cuts and restores (nftables in the pod's
namespace locally; a NetworkChaos partition or a DaemonSet on Kubernetes). Run it as a Chaos
Toolkit ``background: true`` activity to overlap it with another fault; a stop request ends the
cycle at once and the network is always given back (also by the rollback, from the ledger).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Annotated, Any

from raychaos.config.arguments import Problem, Range, fault_action
from raychaos.context import current
from raychaos.faults.network import node_names
from raychaos.results.store import Ev

__all__ = ["blackout"]


def _period(args: Mapping[str, Any]) -> list[Problem]:
    if args["down_s"] >= args["every_s"]:
        return [("down_s", f"is {args['down_s']:g} s, not shorter than its period every_s "
                           f"({args['every_s']:g} s): the node would never come back between "
                           "cycles")]
    return []


@fault_action(rules=[node_names("nodes", required=True), _period])
def blackout(nodes: list[str] | None = None,
             down_s: Annotated[float, Range(0.1, 3600)] = 10.0,
             every_s: Annotated[float, Range(0.2, 86_400)] = 30.0,
             count: Annotated[int, Range(1, 1000)] = 1) -> dict[str, Any]:
    """Drop every packet of ``nodes`` for ``down_s`` seconds, ``count`` times, every ``every_s``.

    :param nodes: node names, e.g. ``["worker-1"]`` (the default).
    :param down_s: how long each blackout lasts, in seconds; shorter than ``every_s``.
    :param every_s: seconds from the start of one blackout to the start of the next.
    :param count: how many blackouts (>= 1); the fault returns after the last one ends.
    :returns: evidence: each cycle's cut and restore times (measured), what the target applied,
        and how many cycles ran (fewer when the run was stopped).
    """
    nodes = ["worker-1"] if nodes is None else nodes
    run = current()
    args = {"nodes": nodes, "down_s": down_s, "every_s": every_s, "count": count}
    cycles: list[dict[str, Any]] = []
    evidence: dict[str, Any] = {"nodes": nodes, "cycles": cycles}
    with run.fault("blackout", args, lasting=False) as record:
        for i in range(count):
            if run.stopping.is_set():
                break
            start = time.monotonic()
            cut = run.target.cut_network(nodes=nodes, record=record)
            cut_at = float(cut.get("cut_at") or time.time())  # when the drop began
            t_down = run.clock.t_of_wall(cut_at)
            run.timeline.write("event", t=t_down, event=Ev.BLACKOUT_DOWN, name=",".join(nodes),
                               detail={"id": record["id"], "cycle": i + 1})
            dry = bool(cut.get("dry_run"))
            try:
                if not dry:
                    run.wait(down_s - (time.time() - cut_at))
            finally:
                restored = run.target.restore_network(record)
                t_up = run.clock.t()
                run.timeline.event(Ev.BLACKOUT_UP, ",".join(nodes), id=record["id"],
                                   cycle=i + 1)
            cycles.append({"cycle": i + 1, "down_at_t": round(t_down, 3),
                           "up_at_t": round(t_up, 3), "down_s": round(t_up - t_down, 3),
                           "cut": cut, "restored": restored})
            evidence.update(landed=True, dry_run=dry)
            run.ledger.update(record, evidence=evidence)
            if dry:  # a recorded plan: one cycle shows every call; nothing to wait for
                evidence.update(planned_cycles=count, note=f"{count} cycle(s): cut, {down_s:g} s "
                                f"down, restore, every {every_s:g} s; the calls of one shown")
                break
            if i + 1 < count and run.wait(every_s - (time.monotonic() - start)):
                break
        evidence["cycles_run"] = len(cycles)
        evidence["stopped_early"] = len(cycles) < count and not evidence.get("dry_run")
        run.ledger.update(record, evidence=evidence)
    return evidence
