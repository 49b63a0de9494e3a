"""Restart local nodes with extra environment variables (Ray's own fault flags), and undo it.

Ray reads ``RAY_testing_rpc_failure`` and ``RAY_testing_asio_delay_us`` once, when a process
starts, so the only way to give them to a running node is what Kubernetes does when a pod's
template changes: restart the pod. The variables go into the node's entry in ``cluster.json``
(``extra_env``) *before* the restart, so the supervisor starts the node with them — and keeps
starting it with them after any crash, as KubeRay would from a patched template — until the undo
removes them and restarts the node again. Proof is read from the live processes, not from what
was asked for: the variables in ``/proc/<pid>/environ`` of the node's raylet (and, on the head,
``gcs_server``). A worker comes back under a new node ID; the head keeps its workers (GCS fault
tolerance), which reconnect.
"""

from __future__ import annotations

import time
from typing import Any

import psutil

from raychaos.errors import FaultFailed, NothingMatched, RollbackFailed
from raychaos.results.store import checkpoint
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.nodes import MARKER, find_child

__all__ = ["node_env", "raylet_alive", "restart_with_env", "undo_node_env"]

PROCESSES = {"head": ("raylet", "gcs_server"), "worker": ("raylet",)}


def _entries(cluster: LocalCluster, names: list[str]) -> dict[str, dict[str, Any]]:
    entries = {e["plan"]["name"]: e for e in cluster.require()["nodes"]}
    unknown = [n for n in names if n not in entries]
    if unknown:
        raise NothingMatched(f"local cluster '{cluster.name}' has no node {unknown[0]!r} "
                             f"(nodes: {sorted(entries)})")
    return entries


def node_env(cluster: LocalCluster, names: list[str], variables: list[str]
             ) -> dict[str, dict[str, str]]:
    """``{node: {process: {var: value}}}`` flattened to ``{"node/process": {var: value}}`` for
    the live Ray processes of each node; a process that is not running is left out."""
    status = cluster.status().get("nodes", {})
    out: dict[str, dict[str, str]] = {}
    for name in names:
        pid = status.get(name, {}).get("pid")
        role = "head" if name == "head" else "worker"
        for proc_name in PROCESSES[role]:
            proc = find_child(pid, proc_name) if pid else None
            if proc is None:
                continue
            try:
                environ = proc.environ()
            except psutil.Error:
                continue
            out[f"{name}/{proc_name}"] = {v: environ[v] for v in variables if v in environ}
    return out


def raylet_alive(cluster: LocalCluster, node_ids: list[str]) -> dict[str, bool | None]:
    """For each GCS node ID: is a raylet process with that ``--node_id`` running here?"""
    want = {i.lower() for i in node_ids}
    seen: set[str] = set()
    for proc in psutil.process_iter(["name", "cmdline"]):
        try:
            if proc.info["name"] != "raylet":
                continue
            if not proc.environ().get(MARKER, "").startswith(f"{cluster.name}/"):
                continue
            for arg in proc.info["cmdline"] or []:
                if arg.startswith("--node_id="):
                    seen.add(arg.split("=", 1)[1].lower())
        except (psutil.Error, OSError):
            continue
    return {i: i.lower() in seen for i in node_ids if i.lower() in want}


def _alive_by_name(cluster: LocalCluster) -> dict[str, set[str]]:
    """Node name -> the IDs ALIVE under it (a restarted node's old ID may linger a while)."""
    out: dict[str, set[str]] = {}
    try:
        for n in cluster.nodes(timeout=2.0):
            if n.state == "ALIVE":
                out.setdefault(n.name, set()).add(n.node_id)
    except Exception:  # noqa: BLE001 - the GCS restarting: ask again
        return {}
    return out


def _restart(cluster: LocalCluster, names: list[str], timeout: float) -> dict[str, Any]:
    """Stop and restart ``names`` (the head first) through the supervisor; wait until each is
    ALIVE again — a worker under a new node ID, the head with every worker of before back."""
    before = _alive_by_name(cluster)
    entries = _entries(cluster, names)
    delays = {n: entries[n].get("replace_delay_s", 2.0) for n in names}
    ordered = sorted(names, key=lambda n: n != "head")
    t0 = time.monotonic()
    cluster.set_desired(ordered, False)
    if not cluster.wait_stopped(ordered, 30.0):
        raise FaultFailed(f"local cluster '{cluster.name}': {ordered} did not stop within 30 s")
    cluster.set_desired(ordered, True, 0.2)
    deadline = time.monotonic() + timeout
    now: dict[str, set[str]] = {}
    while time.monotonic() < deadline:
        now = _alive_by_name(cluster)
        workers_back = all(ids <= now.get(n, set()) for n, ids in before.items()
                           if n not in names and n != "head")
        restarted = all(now.get(n, set()) - before.get(n, set()) for n in names)
        if restarted and workers_back and cluster.gcs_alive(1.0) and (
                "head" not in names or _dashboard_up(cluster)):
            break
        time.sleep(0.3)
    else:
        raise FaultFailed(f"local cluster '{cluster.name}': {ordered} not ALIVE again "
                          f"{timeout:g} s after the restart (alive now: {sorted(now)})")
    desired = cluster.require()
    for entry in desired["nodes"]:
        if entry["plan"]["name"] in delays:
            entry["replace_delay_s"] = delays[entry["plan"]["name"]]
    cluster.write(desired)
    return {"restarted": ordered, "restart_s": round(time.monotonic() - t0, 2),
            "node_ids_before": {n: sorted(before.get(n, set())) for n in names},
            "node_ids_after": {n: sorted(now.get(n, set()) - before.get(n, set()))
                               for n in names}}


def _dashboard_up(cluster: LocalCluster) -> bool:
    """The restarted head serves its Jobs API again (it comes up after the GCS)."""
    import urllib.request

    url = str(cluster.require().get("dashboard_url", ""))
    try:
        with urllib.request.urlopen(f"{url}/api/version", timeout=1.0) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def _set_extra_env(cluster: LocalCluster, names: list[str], env: dict[str, str] | None,
                   remove: list[str] | None = None) -> None:
    desired = cluster.require()
    for entry in desired["nodes"]:
        if entry["plan"]["name"] not in names:
            continue
        extra = dict(entry.get("extra_env") or {})
        extra.update(env or {})
        for var in remove or []:
            extra.pop(var, None)
        entry["extra_env"] = extra
    cluster.write(desired)


def restart_with_env(cluster: LocalCluster, *, nodes: list[str], env: dict[str, str],
                     wait_s: float, record: dict[str, Any]) -> dict[str, Any]:
    """Restart ``nodes`` with ``env`` added; evidence: the variables seen in the live raylets
    (and ``gcs_server``), node IDs before and after, how long the restart took."""
    _entries(cluster, nodes)
    variables = sorted(env)
    record["undo"] = {"kind": "node_env", "nodes": list(nodes), "vars": variables}
    checkpoint(record)  # on disk before any node has the variable
    _set_extra_env(cluster, nodes, env)
    restart = _restart(cluster, nodes, wait_s)
    seen = node_env(cluster, nodes, variables)
    missing = [f"{where}: {v}" for where, got in seen.items() for v in variables
               if got.get(v) != env[v]]
    if not seen or missing:
        raise FaultFailed(f"restart_with_env: the live processes do not carry the variables "
                          f"({', '.join(missing) or 'no Ray process found'})")
    return {"nodes": list(nodes), "variables": {v: env[v] for v in variables},
            "env_seen": seen, **restart, "landed": True}


def undo_node_env(cluster: LocalCluster, undo: dict[str, Any]) -> dict[str, Any]:
    """Remove the variables and restart every node that still has them (in ``cluster.json`` or
    in a live process); idempotent. Proof: no live process of those nodes carries them."""
    if not cluster.is_up():
        return {"undone": True, "note": "cluster is down; nothing to restore"}
    names, variables = list(undo.get("nodes") or []), list(undo.get("vars") or [])
    known = {e["plan"]["name"]: e for e in cluster.require()["nodes"]}
    names = [n for n in names if n in known]
    planned = [n for n in names if set(variables) & set(known[n].get("extra_env") or {})]
    live = [n for n in names if any(got for key, got in
                                    node_env(cluster, [n], variables).items())]
    stale = sorted(set(planned) | set(live))
    _set_extra_env(cluster, names, None, remove=variables)
    restart: dict[str, Any] = {}
    if stale:
        try:
            restart = _restart(cluster, stale, 180.0)
        except FaultFailed as exc:
            raise RollbackFailed(f"restarting {stale} without {variables} failed: {exc}") from exc
    left = {k: v for k, v in node_env(cluster, names, variables).items() if v}
    if left:
        raise RollbackFailed(f"{sorted(left)} still run with {variables} after the undo")
    return {"undone": True, "restarted": stale, **restart}
