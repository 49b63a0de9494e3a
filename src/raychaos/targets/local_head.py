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

from raychaos.errors import FaultFailed
from raychaos.targets.local_nodes import find_child, kill_tree, wait_gone

__all__ = ["HeadMixin"]


class HeadMixin:
    """Head mechanics of LocalTarget (needs ``status_file``, ``gcs_alive`` and ``spec``)."""

    spec: Any

    def status_file(self) -> dict[str, Any]:  # pragma: no cover - provided by LocalTarget
        raise NotImplementedError

    def gcs_alive(self, timeout: float = 0.5) -> bool:  # pragma: no cover - LocalTarget
        raise NotImplementedError

    def head_identity(self) -> dict[str, Any]:
        entry = self.status_file().get("nodes", {}).get("head", {})
        gcs = find_child(entry["pid"], "gcs_server") if entry.get("pid") else None
        return {"pid": entry.get("pid"), "incarnation": entry.get("incarnation"),
                "gcs_pid": gcs.pid if gcs else None, "state": entry.get("state")}

    def kill_head(self, mode: str, record: dict[str, Any]) -> dict[str, Any]:
        old = self.head_identity()
        if not old["pid"]:
            raise FaultFailed(f"local cluster '{self.spec.name}': no running head to kill")
        # write-ahead: the ledger names the undo before the kill, so a crash right after it
        # still leaves `raychaos rollback` something to wait for
        record["undo"] = {"kind": "ensure_head", "old_pid": old["pid"]}
        if mode == "gcs":
            if not old["gcs_pid"]:
                raise FaultFailed(f"local cluster '{self.spec.name}': no gcs_server process "
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

    def wait_head_back(self, old: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        t0 = time.time()
        while time.monotonic() < deadline:
            new = self.head_identity()
            if new["pid"] and new["pid"] != old.get("pid") and new["state"] == "running" \
                    and self.gcs_alive(0.5):
                return {"back": True, "new": new, "waited_s": round(time.time() - t0, 3),
                        "head_pid_changed": True}
            time.sleep(0.2)
        return {"back": False, "new": self.head_identity(), "waited_s": round(timeout, 3)}
