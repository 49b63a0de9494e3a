"""Killing the local head, and knowing when a new one is back.

``head`` kills the whole head "pod" (its namespace init, which takes every process with it);
``gcs`` kills only ``gcs_server``, after which ``ray start --block`` notices its dead child and
exits within a second, and the supervisor restarts the head like a container restart. The
ledger's undo is written before the kill, so a crash right after it still leaves ``raychaos
rollback`` something to wait for.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from raychaos.errors import FaultFailed, NotRecovered
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.nodes import find_child, kill_tree, pid_alive, wait_gone

__all__ = ["ensure_head", "head_identity", "kill_head", "wait_head_back"]


def head_identity(cluster: LocalCluster) -> dict[str, Any]:
    entry = cluster.status().get("nodes", {}).get("head", {})
    gcs = find_child(entry["pid"], "gcs_server") if entry.get("pid") else None
    return {"pid": entry.get("pid"), "incarnation": entry.get("incarnation"),
            "gcs_pid": gcs.pid if gcs else None, "state": entry.get("state")}


def kill_head(cluster: LocalCluster, mode: str, record: dict[str, Any]) -> dict[str, Any]:
    old = head_identity(cluster)
    if not old["pid"]:
        raise FaultFailed(f"local cluster '{cluster.name}': no running head to kill")
    # write-ahead: the ledger names the undo before the kill
    record["undo"] = {"kind": "ensure_head", "old_pid": old["pid"]}
    if mode == "gcs":
        if not old["gcs_pid"]:
            raise FaultFailed(f"local cluster '{cluster.name}': no gcs_server process "
                              f"under the head (PID {old['pid']})")
        os.kill(old["gcs_pid"], signal.SIGKILL)
        victims = [old["gcs_pid"]]
    else:
        victims = kill_tree(old["pid"])
    killed_at = time.time()
    still = wait_gone(victims[:1], timeout=5)
    if still:
        raise FaultFailed(f"SIGKILL of PID {still[0]} did not take effect within 5 s")
    return {"mode": mode, "signal": "SIGKILL", "killed_pids": victims, "old": old,
            "killed_at": killed_at, "landed": True}


def wait_head_back(cluster: LocalCluster, old: dict[str, Any], timeout: float
                   ) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    t0 = time.time()
    while time.monotonic() < deadline:
        new = head_identity(cluster)
        if new["pid"] and new["pid"] != old.get("pid") and new["state"] == "running" \
                and cluster.gcs_alive(0.5):
            return {"back": True, "new": new, "waited_s": round(time.time() - t0, 3),
                    "head_pid_changed": True}
        time.sleep(0.2)
    return {"back": False, "new": head_identity(cluster), "waited_s": round(timeout, 3)}


def ensure_head(cluster: LocalCluster, undo: dict[str, Any]) -> dict[str, Any]:
    """The undo of a head kill: wait until a head answers again (the supervisor restarts it).

    Nothing can be undone about a kill: a head that does not come back is NotRecovered (the
    system failed), not a rollback that failed."""
    if not cluster.is_up():
        return {"undone": True, "note": "cluster is down; nothing to restore"}
    now = head_identity(cluster)
    if now["pid"] == undo.get("old_pid") and pid_alive(now["pid"]) \
            and now["state"] == "running" and cluster.gcs_alive(1.0):
        # interrupted (or crashed) before the kill: the old head is still serving
        return {"undone": True, "note": "the head was never killed", "pid": now["pid"]}
    result = wait_head_back(cluster, {"pid": undo.get("old_pid")}, timeout=120)
    if not result["back"]:
        raise NotRecovered(f"local cluster '{cluster.name}': the head did not come back "
                           "within 120 s; it is still down")
    return {"undone": True, **result}
