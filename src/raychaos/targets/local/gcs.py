"""The local target's administrative calls to the GCS: Ray's drain, which nodes are draining,
the consistency probes' reads (each node's total and available resources, the job table), and
a submitted job's status as the GCS records it.

Sampling (is the GCS up, what is its node table, which raylets reported to it) goes through
:class:`~raychaos.targets.gcs_probe.GcsProbe`, which never blocks past its deadline. The
drain API is only in Ray's own ``GcsClient`` (what autoscaler v2 and ``ray drain-node`` use): it
is called here, from faults and probes, never from the monitor's sampling loop. Ray errors
become raychaos errors (:mod:`.errors`).
"""

from __future__ import annotations

import json
from typing import Any

from raychaos.targets.local.errors import ray_errors

__all__ = ["GcsAdmin"]

JOB_INFO_PREFIX = "_ray_internal_job_info_"  # Ray's JobInfoStorageClient.JOB_DATA_KEY_PREFIX
REASONS = {"preemption": "DRAIN_NODE_REASON_PREEMPTION",
           "idle": "DRAIN_NODE_REASON_IDLE_TERMINATION"}


class GcsAdmin:
    """Ray's ``GcsClient`` on one address, made on first use and dropped after an error."""

    def __init__(self, address: str):
        self.address = address
        self._client: Any = None

    def _gcs_client(self) -> Any:
        import ray._raylet

        if self._client is None:
            self._client = ray._raylet.GcsClient(address=self.address)
        return self._client

    def draining(self, timeout: float = 0.5) -> set[str]:
        """Hex IDs of the nodes Ray is draining; empty when it cannot tell within ``timeout``."""
        try:
            found = self._gcs_client().get_draining_nodes(timeout=timeout) or {}
        except Exception:  # noqa: BLE001 - the node table without drain marks is still true
            self._client = None
            return set()
        return {k.hex() if isinstance(k, bytes) else str(k) for k in found}

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
        """Ray's own drain: (accepted, why not). ``reason`` is ``preemption`` or ``idle``."""
        from ray.core.generated.autoscaler_pb2 import DrainNodeReason

        with ray_errors(f"draining node {node_id[:12]} through the GCS at {self.address}"):
            ok, why = self._gcs_client().drain_node(node_id, DrainNodeReason.Value(
                REASONS[reason]), message, deadline_ms, timeout=timeout)
        return bool(ok), (str(why) if why else None)

    def resources(self, timeout: float = 2.0) -> dict[str, dict[str, dict[str, float]]]:
        """``{node_id: {"total": {...}, "available": {...}}}`` from the GCS's resource view
        (what the raylets last reported); raises on no answer."""
        reply = self._gcs_client().get_all_resource_usage(timeout=timeout)
        batch = getattr(getattr(reply, "resource_usage_data", reply), "batch", [])
        out: dict[str, dict[str, dict[str, float]]] = {}
        for data in batch:
            node_id = data.node_id.hex() if isinstance(data.node_id, bytes) else str(data.node_id)
            out[node_id] = {"total": {k: float(v) for k, v in dict(data.resources_total).items()},
                            "available": {k: float(v) for k, v in
                                          dict(data.resources_available).items()}}
        return out

    def jobs(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Every job the GCS's job table lists: ID, submission ID, entrypoint, dead or not."""
        infos = self._gcs_client().get_all_job_info(  # no fan-out to the drivers: the table only
            skip_submission_job_info_field=True, skip_is_running_tasks_field=True,
            timeout=timeout)
        out = []
        for job_id, info in infos.items():
            api = getattr(info, "job_info", None)
            metadata = dict(getattr(getattr(info, "config", None), "metadata", {}) or {})
            out.append({"job_id": job_id.hex() if hasattr(job_id, "hex") else str(job_id),
                        "submission_id": (getattr(api, "submission_id", "") if api else "")
                        or metadata.get("job_submission_id") or None,
                        "entrypoint": str(getattr(info, "entrypoint", "") or "")[:200],
                        "dead": bool(getattr(info, "is_dead", False))})
        return sorted(out, key=lambda j: j["job_id"])

    def close(self) -> None:
        self._client = None
