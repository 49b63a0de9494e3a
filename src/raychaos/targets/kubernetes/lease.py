"""One run at a time on a RayCluster: a ``coordination.k8s.io/v1`` Lease next to it.

Why a Lease and not a file: two CI jobs on two machines can target the same cluster, and only
the API server is shared. The Lease names its holder (run id, PID, host) in annotations so a
refused run can say who holds it; it is renewed while the run lives, and one whose renewTime is
older than its duration (a crashed harness stops renewing) is taken over.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

from raychaos.errors import KubeApiError, TargetBusy
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.lock import dead_here, holder_text

__all__ = ["LeaseLock"]

DURATION_S = 60
A_RUN, A_PID, A_HOST, A_SINCE = ("raychaos.io/run-id", "raychaos.io/pid", "raychaos.io/host",
                                 "raychaos.io/since")


def _micro(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(text: str | None) -> float:
    if not text:
        return 0.0
    text = text.replace("Z", "+00:00")
    return datetime.fromisoformat(text).timestamp()


class LeaseLock:
    """``acquire`` or raise TargetBusy; renewed in the background until ``release``."""

    def __init__(self, api: ApiSession, namespace: str, cluster: str,
                 duration_s: int = DURATION_S):
        self.api = api
        self.ns = namespace
        self.name = f"raychaos-{cluster}"[:63]
        self.what = f"RayCluster {namespace}/{cluster}"
        self.duration_s = duration_s
        self.coord = api.coordination
        self.held = False
        self.taken_over: dict[str, Any] | None = None
        self._stop = threading.Event()
        self._path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

    def _body(self, run_id: str, now: float) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.ns, "annotations": {
                    A_RUN: run_id, A_PID: str(os.getpid()), A_HOST: socket.gethostname(),
                    A_SINCE: str(now)}},
                "spec": {"holderIdentity": f"{socket.gethostname()}/{os.getpid()}/{run_id}",
                         "leaseDurationSeconds": self.duration_s, "acquireTime": _micro(now),
                         "renewTime": _micro(now)}}

    @staticmethod
    def holder(lease: dict[str, Any]) -> dict[str, Any]:
        notes = lease.get("metadata", {}).get("annotations") or {}
        return {"run_id": notes.get(A_RUN), "pid": int(notes.get(A_PID) or 0) or None,
                "host": notes.get(A_HOST), "since": float(notes.get(A_SINCE) or 0),
                "renew_time": lease.get("spec", {}).get("renewTime")}

    def _expired(self, lease: dict[str, Any]) -> bool:
        spec = lease.get("spec") or {}
        return _parse(spec.get("renewTime")) + float(spec.get("leaseDurationSeconds") or 0) \
            < time.time()

    def acquire(self, run_id: str) -> None:
        now = time.time()
        body = self._body(run_id, now)
        try:
            self.api.write("POST", self._path, self.coord.create_namespaced_lease, self.ns,
                           body=body)
        except KubeApiError as exc:
            if exc.status != 409:
                raise
            lease = self.api.read(self.coord.read_namespaced_lease, self.name, self.ns)
            if not self._expired(lease):
                raise TargetBusy(f"{self.what} is in use by {holder_text(self.holder(lease))}; "
                                 f"Lease {self.ns}/{self.name} renewed at "
                                 f"{lease['spec'].get('renewTime')}") from exc
            self.taken_over = self.holder(lease)
            body["metadata"]["resourceVersion"] = lease["metadata"].get("resourceVersion")
            self.api.write("PATCH", f"{self._path}/{self.name}",
                           self.coord.patch_namespaced_lease, self.name, self.ns, body=body)
        self.held = True
        threading.Thread(target=self._renew, daemon=True, name="raychaos-lease").start()

    def _renew(self) -> None:
        while not self._stop.wait(self.duration_s / 3):
            try:
                self.api.write("PATCH", f"{self._path}/{self.name}",
                               self.coord.patch_namespaced_lease, self.name, self.ns,
                               body={"spec": {"renewTime": _micro(time.time())}})
            except Exception:  # the next renewal may get through; expiry is the safety net
                continue

    def clear_stale(self, run_id: str) -> bool:
        """Delete the Lease a crashed run ``run_id`` left: expired, or held by a process of this
        host that is gone (``raychaos rollback`` right after a SIGKILL: the next run would
        otherwise be refused for up to a minute). True when deleted."""
        lease = self.api.read_or_none(self.coord.read_namespaced_lease, self.name, self.ns)
        if lease and self.holder(lease)["run_id"] == run_id and (
                self._expired(lease) or dead_here(self.holder(lease))):
            return self.api.delete_quietly(f"{self._path}/{self.name}",
                                           self.coord.delete_namespaced_lease, self.name, self.ns)
        return False

    def release(self) -> None:
        self._stop.set()
        if self.held:
            self.api.delete_quietly(f"{self._path}/{self.name}",
                                    self.coord.delete_namespaced_lease, self.name, self.ns)
            self.held = False
