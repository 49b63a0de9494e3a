"""Drain local nodes the way a cloud preemption or an autoscaler scale-down does.

Ray's own drain (``GcsClient.drain_node``, the API autoscaler v2 and ``ray drain-node`` use) marks
the node DRAINING so new work goes elsewhere; nothing is killed by Ray — on Ray 2.60 an *idle*
drained raylet exits by itself at once, a busy one keeps running. At the deadline the "cloud"
takes the machine: the node is set ``desired: false`` in cluster.json and the supervisor stops
it; with ``replace`` it is set desired again after ``replace_delay_s`` and the supervisor starts
a replacement, as an autoscaler would. Evidence is the state sequence each victim went through
(ALIVE → DRAINING → DEAD → replaced) and the GPU capacity sampled along the way.

The fault has landed once every victim is DEAD. Whether the capacity came back is the cluster's
answer, not the fault's: a replacement not ALIVE within :data:`REPLACE_TIMEOUT_S` is evidence
(``replaced: false``, what the supervisor did meanwhile), judged by
:func:`raychaos.probes.nodes.capacity_restored` — as on Kubernetes, where the operator's
replacement pods are watched the same way. Seen: a retries-off storm on every node starved the
box so that the replacement's ``ray start`` gave up after 50 s and the next one came at 93 s.
"""

from __future__ import annotations

import time
from typing import Any

from raychaos.errors import FaultFailed, NothingMatched, RollbackFailed
from raychaos.targets.base import NodeInfo
from raychaos.targets.local.cluster import LocalCluster

__all__ = ["drain_nodes", "select_drain_victims", "undo_drain"]

REPLACE_TIMEOUT_S = 120.0


def _capacity(cluster: LocalCluster) -> dict[str, Any]:
    nodes = cluster.nodes(timeout=2.0, draining=True)
    alive = [n for n in nodes if n.state in ("ALIVE", "DRAINING")]
    return {"alive": len(alive), "gpus": sum(n.gpus for n in alive if n.state == "ALIVE"),
            "states": {n.node_id[:8]: f"{n.name}:{n.state}" for n in nodes}}


def select_drain_victims(cluster: LocalCluster, count: int, selector: dict[str, str] | None,
                         gpu_only: bool = True) -> list[NodeInfo]:
    """ALIVE workers matching ``selector`` (and having GPUs when ``gpu_only``)."""
    alive = [n for n in cluster.nodes(timeout=2.0) if n.state == "ALIVE" and not n.is_head]
    match = [n for n in alive
             if all(n.labels.get(k) == str(v) for k, v in (selector or {}).items())
             and (n.gpus > 0 or not gpu_only)]
    what = f"{'GPU ' if gpu_only else ''}nodes matching {selector or {}}"
    if not match:
        raise NothingMatched(f"drain_nodes: no ALIVE {what} in local cluster '{cluster.name}'")
    if count > len(match):
        raise NothingMatched(f"drain_nodes: count={count} but only {len(match)} ALIVE "
                             f"{what} exist ({[n.name for n in match]})")
    return sorted(match, key=lambda n: n.name)[:count]


def drain_nodes(cluster: LocalCluster, *, count: int, selector: dict[str, str] | None,
                deadline_s: float, reason: str, replace: bool, replace_delay_s: float,
                record: dict[str, Any], gpu_only: bool = True) -> dict[str, Any]:
    """Drain the victims through Ray, stop them at the deadline, replace them (see above)."""
    victims = select_drain_victims(cluster, count, selector, gpu_only)
    names = [v.name for v in victims]
    t0 = time.monotonic()
    timeline: list[dict[str, Any]] = []

    def sample(phase: str) -> dict[str, Any]:
        cap = _capacity(cluster)
        seen = {v.name: cap["states"].get(v.node_id[:8], "?:GONE").split(":")[1]
                for v in victims}
        timeline.append({"t": round(time.monotonic() - t0, 2), "phase": phase,
                         "alive": cap["alive"], "gpus": cap["gpus"], "victims": seen})
        return cap

    before = sample("before")
    delays = {e["plan"]["name"]: e.get("replace_delay_s", 2.0)
              for e in cluster.require()["nodes"]}
    record["undo"] = {"kind": "drain", "nodes": names, "replace_delay_s": delays,
                      "original": {"alive": before["alive"], "gpus": before["gpus"]}}
    deadline_ms = int((time.time() + deadline_s) * 1000)
    accepted = {}
    for victim in victims:
        ok, why = cluster.admin().drain(victim.node_id, reason, f"raychaos drain ({reason})",
                                      deadline_ms, timeout=10)
        accepted[victim.name] = {"accepted": ok, "rejection": why}
        if not ok:
            raise FaultFailed(f"drain_nodes: Ray rejected draining {victim.name} "
                              f"({reason}): {why}")
    states: dict[str, list[str]] = {n: ["ALIVE"] for n in names}

    def track() -> None:
        for name, state in timeline[-1]["victims"].items():
            if states[name][-1] != state:
                states[name].append(state)

    end = time.monotonic() + deadline_s
    while True:
        sample("draining")
        track()
        if time.monotonic() >= end:
            break
        time.sleep(0.3)
    if not all(s[-1] in ("DRAINING", "DEAD") or "DRAINING" in s for s in states.values()):
        raise FaultFailed(f"drain_nodes: accepted, but {names} never showed DRAINING: "
                          f"{states}")
    cluster.set_desired(names, False)  # the deadline: the "cloud" takes the machines
    stopped_at = time.monotonic()
    cluster.wait_stopped(names, 30.0)  # the pod is gone, not only its raylet
    while time.monotonic() - stopped_at < 60:
        sample("stopping")
        track()
        if all(s[-1] == "DEAD" for s in states.values()):
            break
        time.sleep(0.3)
    dead_s = round(time.monotonic() - stopped_at, 2)
    evidence: dict[str, Any] = {
        "nodes": names, "node_ids": [v.node_id for v in victims], "reason": reason,
        "accepted": accepted, "deadline_s": deadline_s, "states": states,
        "gpus_before": before["gpus"], "dead_after_stop_s": dead_s, "landed": True}
    if not all(s[-1] == "DEAD" for s in states.values()):
        raise FaultFailed(f"drain_nodes: {names} not DEAD 60 s after stopping: {states}")
    evidence["gpus_after_drain"] = timeline[-1]["gpus"]
    if replace:
        wall = time.time()
        cluster.set_desired(names, True, replace_delay_s)
        back = _wait_capacity(cluster, before["alive"], before["gpus"], REPLACE_TIMEOUT_S,
                              sample)
        evidence["replaced"] = back["ok"]
        evidence["replacement_wait_s"] = REPLACE_TIMEOUT_S
        evidence["supervisor"] = [
            {"t": round(e["ts"] - wall, 2), **{k: v for k, v in e.items() if k != "ts"}}
            for e in cluster.events(wall) if e.get("node") in names]
        if back["ok"]:
            evidence["drain_to_replacement_s"] = round(time.monotonic() - t0, 2)
            evidence["stop_to_replacement_s"] = round(time.monotonic() - stopped_at, 2)
            evidence["replacement_node_ids"] = [n.node_id for n in cluster.nodes(timeout=2.0)
                                                if n.name in names and n.state == "ALIVE"]
            for name in names:
                states[name].append("REPLACED")
        else:
            evidence["replacement_note"] = (
                f"{names}: capacity not back within {REPLACE_TIMEOUT_S:g} s ({back.get('alive')}"
                f" nodes / {back.get('gpus')} GPUs alive, {before['alive']} / {before['gpus']} "
                f"before); the supervisor: " + (", ".join(
                    f"{e['event']} {e['node']} at +{e['t']:g} s"
                    + (f" (exit {e['exit_code']})" if "exit_code" in e else "")
                    for e in evidence["supervisor"]) or "nothing"))
    evidence["gpu_capacity"] = [{k: e[k] for k in ("t", "phase", "alive", "gpus")}
                                for e in _thin(timeline)]
    evidence["victim_timeline"] = _thin(timeline)
    return evidence


def _wait_capacity(cluster: LocalCluster, alive: int, gpus: float, timeout: float,
                   sample: Any = None) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    cap: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            cap = sample("replacing") if sample else _capacity(cluster)
        except Exception:  # noqa: BLE001 - the GCS busy for a moment; keep waiting
            cap = {}
        if cap and cap["alive"] >= alive and cap["gpus"] >= gpus:
            return {"ok": True, **cap}
        time.sleep(0.5)
    return {"ok": False, **cap}


def undo_drain(cluster: LocalCluster, undo: dict[str, Any]) -> dict[str, Any]:
    if not cluster.is_up():
        return {"undone": True, "note": "cluster is down; nothing to restore"}
    alive = {n.name for n in cluster.nodes(timeout=2.0) if n.state == "ALIVE"}
    # A drained idle raylet exits on its own while its pod keeps running: restart those.
    stale = [n for n in undo["nodes"] if n not in alive]
    if stale:
        cluster.set_desired(stale, False)
        cluster.wait_stopped(stale, 30.0)
    cluster.set_desired(undo["nodes"], True)
    desired = cluster.require()
    for entry in desired["nodes"]:
        old = (undo.get("replace_delay_s") or {}).get(entry["plan"]["name"])
        if old is not None:
            entry["replace_delay_s"] = old
    cluster.write(desired)
    want = undo["original"]
    back = _wait_capacity(cluster, want["alive"], want["gpus"], undo.get("timeout_s", 150.0))
    if not back["ok"]:
        raise RollbackFailed(f"drain not undone: {back.get('alive')} nodes / "
                             f"{back.get('gpus')} GPUs alive, want {want['alive']} / "
                             f"{want['gpus']} ({undo['nodes']} still missing)")
    return {"undone": True, "alive": back["alive"], "gpus": back["gpus"]}


def _thin(timeline: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Keep the samples where something changed (and the first and last)."""
    out: list[dict[str, Any]] = []
    for entry in timeline:
        key = (entry["alive"], entry["gpus"], tuple(sorted(entry["victims"].items())))
        if not out or key != out[-1]["_key"]:
            out.append({**entry, "_key": key})
    if timeline and out[-1]["t"] != timeline[-1]["t"]:
        out.append({**timeline[-1], "_key": None})
    return [{k: v for k, v in e.items() if k != "_key"} for e in out]
