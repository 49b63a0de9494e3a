"""The Target protocol: the one seam between faults/probes and a concrete Ray cluster.

Faults never branch on the target type; they call these methods, get evidence dicts back, and
record what they changed in the ledger so that ``undo`` can revert it later, even from another
process (``raychaos rollback``). Every method that changes the cluster returns a JSON-friendly
dict; ``undo(record)`` must be idempotent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class NodeInfo:
    """One Ray node as the GCS (or the Kubernetes API) sees it."""

    node_id: str
    name: str  # target-level name: "head", "worker-2", or a pod name
    address: str
    state: str  # "ALIVE" | "DEAD" | "DRAINING"
    is_head: bool = False
    gpus: float = 0.0
    cpus: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class Target(Protocol):
    """What raychaos needs from a cluster under test."""

    kind: str

    # --- lifecycle -------------------------------------------------------------------------
    def connect(self) -> None:
        """Reach (or, for the local target, start) the cluster; raise TargetUnavailable."""

    def close(self) -> None:
        """Release client resources. Does not tear the cluster down."""

    def describe(self) -> dict[str, Any]:
        """Facts for the summary: kind, addresses, GCS fault tolerance, node groups."""

    # --- observation -----------------------------------------------------------------------
    def gcs_alive(self, timeout: float = 0.5) -> bool:
        """True when the GCS answers a real request within ``timeout``."""

    def nodes(self, timeout: float = 1.0) -> list[NodeInfo]:
        """Every node the GCS knows, dead ones included."""

    def dashboard_url(self) -> str:
        """Base URL of the Ray dashboard (Jobs API, state API)."""

    def serve_url(self, port: int = 8000) -> str:
        """Where HTTP load reaches Ray Serve (a proxy that is not on the head, where possible)."""

    def head_identity(self) -> dict[str, Any]:
        """What identifies the current head incarnation (PID / pod UID, restart count)."""

    # --- jobs ------------------------------------------------------------------------------
    def submit_job(self, entrypoint: str, *, working_dir: str | None = None,
                   on_driver_node: bool = True, metadata: dict[str, str] | None = None) -> str:
        """Submit a Ray job; with ``on_driver_node`` its driver is placed on a worker."""

    def job_status(self, job_id: str) -> str:
        """PENDING | RUNNING | SUCCEEDED | FAILED | STOPPED | UNKNOWN (unreachable)."""

    def stop_job(self, job_id: str) -> None:
        """Stop a job; unknown or finished jobs are fine."""

    def job_log_lines(self, job_id: str) -> list[str]:
        """Lines of the job's driver log not returned by an earlier call."""

    # --- fault mechanics (each returns evidence; undo reverts the record) ------------------
    def kill_head(self, mode: str, record: dict[str, Any]) -> dict[str, Any]:
        """Kill the head (``head``/``pod``) or only ``gcs_server`` (``gcs``)."""

    def wait_head_back(self, old: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Wait until a new head incarnation answers; evidence with times and identities."""

    def undo(self, record: dict[str, Any]) -> dict[str, Any]:
        """Revert one ledger record; idempotent; raise RollbackFailed if it cannot."""
