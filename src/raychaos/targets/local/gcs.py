"""Asking the GCS of a local cluster: is it up, and what is its node table.

Every question goes through :class:`GcsProbe` so that how the GCS is reached (client, deadline,
what happens when it restarts with a new cluster ID) is decided in one place. This is the one
module of the local target that talks to Ray's GCS client; Ray errors become a
:class:`GcsAnswer` with ``up=False`` and the error named, never an exception.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

__all__ = ["GcsAnswer", "GcsNode", "GcsProbe"]

STATES = {0: "ALIVE", 1: "DEAD"}
JOB_INFO_PREFIX = "_ray_internal_job_info_"  # Ray's JobInfoStorageClient.JOB_DATA_KEY_PREFIX


@dataclass(frozen=True)
class GcsNode:
    node_id: str
    address: str
    state: str
    is_head: bool
    resources: dict[str, float] = field(default_factory=dict)
    available: dict[str, float] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    draining: bool = False


@dataclass(frozen=True)
class GcsAnswer:
    up: bool
    nodes: list[GcsNode] = field(default_factory=list)
    error: str | None = None
    latency_s: float = 0.0


class GcsProbe:
    """Questions to one GCS address, each bounded by its deadline."""

    def __init__(self, address: str):
        self.address = address
        self._client: Any = None

    def _gcs_client(self) -> Any:
        import ray._raylet

        if self._client is None:
            self._client = ray._raylet.GcsClient(address=self.address)
        return self._client

    def ask(self, deadline_s: float = 0.5, draining: bool = False) -> GcsAnswer:
        t0 = time.monotonic()
        try:
            client = self._gcs_client()
            infos = client.get_all_node_info(timeout=deadline_s)
            drain_ids: set[str] = set()
            if draining:
                try:
                    found = client.get_draining_nodes(timeout=deadline_s) or {}
                    drain_ids = {k.hex() if hasattr(k, "hex") else str(k) for k in found}
                except Exception:  # noqa: BLE001 - the table without drain marks is still true
                    drain_ids = set()
        except Exception as exc:  # noqa: BLE001 - a Ray error is an answer: "down"
            # a GCS restarted without persistence has a new cluster ID, which a client made
            # for the old one never accepts: make a new client next time
            self._client = None
            return GcsAnswer(False, error=f"{type(exc).__name__}: {str(exc)[:200]}",
                             latency_s=time.monotonic() - t0)
        nodes = []
        for node_id, info in infos.items():
            hexid = node_id.hex()
            nodes.append(GcsNode(
                node_id=hexid, address=str(info.node_manager_address),
                state=STATES.get(int(info.state), str(info.state)),
                is_head=bool(info.is_head_node),
                resources={k: float(v) for k, v in dict(info.resources_total).items()},
                labels={str(k): str(v) for k, v in dict(info.labels).items()},
                draining=hexid in drain_ids))
        return GcsAnswer(True, nodes=nodes, latency_s=time.monotonic() - t0)

    def job_status(self, submission_id: str, deadline_s: float = 1.0) -> str | None:
        """A submitted job's status as the GCS holds it — the record the Jobs API itself reads
        (internal KV, namespace ``job``), so it answers while the dashboard is still coming back
        after a head restart. ``MISSING`` when the GCS has no such job; None when it does not
        answer."""
        key = f"{JOB_INFO_PREFIX}{submission_id}".encode()
        try:
            raw = self._gcs_client().internal_kv_get(key, b"job", timeout=deadline_s)
        except Exception:  # noqa: BLE001 - a Ray error is an answer: "down"
            self._client = None
            return None
        if raw is None:
            return "MISSING"
        try:
            return str(json.loads(raw)["status"])
        except (ValueError, KeyError, TypeError):
            return None

    def drain(self, node_id: str, reason: str, message: str, deadline_ms: int,
              timeout: float = 10.0) -> tuple[bool, str | None]:
        """Ray's own drain (what autoscaler v2 and ``ray drain-node`` use): (accepted, why not).

        ``reason`` is ``preemption`` or ``idle``."""
        from ray.core.generated.autoscaler_pb2 import DrainNodeReason

        enum = DrainNodeReason.Value({"preemption": "DRAIN_NODE_REASON_PREEMPTION",
                                      "idle": "DRAIN_NODE_REASON_IDLE_TERMINATION"}[reason])
        ok, why = self._gcs_client().drain_node(node_id, enum, message, deadline_ms,
                                                timeout=timeout)
        return bool(ok), (str(why) if why else None)

    def close(self) -> None:
        self._client = None
