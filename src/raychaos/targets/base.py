"""The Target protocol: the whole contract between the harness and a concrete Ray cluster.

Faults, probes, the monitor and the session call only these methods — never ``hasattr`` on a
target, never a branch on its kind — and get JSON-friendly evidence back. Every method that
changes the cluster takes the fault's ledger ``record`` and writes its ``undo`` there *before*
acting, so that :meth:`Target.undo` can revert it later, even from another process
(``raychaos rollback``); ``undo`` is idempotent.

What a target cannot do is said before anything starts: :meth:`Target.refusals` names, per fault
argument, what this kind of target does not honour (checked when the experiment is validated),
and :meth:`Target.preflight` checks, once connected, what needs the live cluster (a selector that
matches no node). ``tests/unit/fake_target.py`` implements the protocol for unit tests and a
test checks that every target class here does too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = ["FAULTS", "NodeInfo", "Observation", "Refusal", "RunLock", "Target"]

#: The fault mechanics a target implements, by the Chaos Toolkit action that drives them.
FAULTS = ("kill_head", "drain_gpu_nodes", "throttle_registry_pulls", "saturate_network",
          "inject_rpc_failures", "slow_gcs", "blackout", "resize_dev_shm")

Refusal = tuple[str, str]  # (argument, why this target cannot honour it)


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
    resources: dict[str, float] = field(default_factory=dict)
    available: dict[str, float] | None = None  # None: not reported by this target

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Observation:
    """One look at the cluster, as the monitor samples it: did the GCS answer within the
    deadline, and what it said.

    ``reported`` is the evidence of re-registration: the node IDs whose raylet has reported to
    the *current* GCS incarnation (after a GCS restart, a restored node table lists the old
    workers ALIVE at once; only a raylet's own report to the new GCS shows it is back). None
    when the target cannot tell. ``incarnation`` numbers the GCS incarnations the target has
    seen (None: not numbered). ``late`` means the GCS did not answer within the deadline but
    did not refuse either (a busy GCS, or one still starting) — not the same as a GCS process
    that is gone (connection refused)."""

    up: bool
    nodes: list[NodeInfo] | None = None  # None: not known (the GCS did not answer)
    error: str | None = None  # why the GCS did not answer (gRPC status, timeout)
    latency_s: float = 0.0
    reported: frozenset[str] | None = None
    incarnation: int | None = None
    late: bool = False


class RunLock(Protocol):
    """One run at a time per target (a lock file, a Kubernetes Lease)."""

    taken_over: dict[str, Any] | None

    def acquire(self, run_id: str) -> None: ...

    def release(self) -> None: ...

    def clear_stale(self, run_id: str) -> bool: ...


@runtime_checkable
class Target(Protocol):
    """What raychaos needs from a cluster under test."""

    kind: str
    run_id: str  # objects a target creates carry it (labels); set by the session

    # --- lifecycle ---------------------------------------------------------------------------
    def ensure_up(self, say: Callable[[str], None]) -> bool:
        """Make the cluster exist (the local target starts one); True when this call started
        it. A target that cannot create clusters only checks and returns False."""
        ...

    def connect(self) -> None:
        """Reach the cluster; raise TargetUnavailable (one sentence) when it cannot."""
        ...

    def close(self) -> None:
        """Release client resources. Does not tear the cluster down."""
        ...

    def down(self) -> dict[str, Any]:
        """Tear down what :meth:`ensure_up` started (a no-op for clusters raychaos did not
        create)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Facts for the summary: kind, addresses, GCS fault tolerance, node groups."""
        ...

    def run_lock(self) -> RunLock:
        """The one-run-at-a-time lock of this cluster."""
        ...

    def owner(self) -> dict[str, Any]:
        """The workload the target was named by — a KubeRay RayJob or RayService — and its
        status now (``kind``, ``name``, ``cluster``, ``serves_own_apps``: deploy and remove no
        Serve application on it, and a RayJob's ``job_id``/``job_status``/
        ``job_deployment_status``/``reason``); ``{}`` for a bare cluster."""
        ...

    def refusals(self, fault: str, args: Mapping[str, Any]) -> list[Refusal]:
        """What of ``fault(**args)`` this kind of target cannot honour; needs no connection."""
        ...

    def preflight(self, fault: str, args: Mapping[str, Any]) -> None:
        """Checks that need the live cluster (NothingMatched, ConfigError), before loads."""
        ...

    # --- observation -------------------------------------------------------------------------
    def gcs_alive(self, timeout: float = 0.5) -> bool:
        """True when the GCS answers a real request within ``timeout``; never blocks longer."""
        ...

    def nodes(self, timeout: float = 1.0) -> list[NodeInfo]:
        """Every node the GCS knows, dead ones included."""
        ...

    def observe(self, deadline_s: float = 0.1) -> Observation:
        """One sample for the monitor: the GCS asked once, its node table (and, where the
        target can tell, which raylets reported to this GCS incarnation). Never raises; returns
        within ``deadline_s`` plus a few milliseconds where the target can bound its calls (the
        monitor writes a sample on time either way)."""
        ...

    def dashboard_url(self) -> str:
        """Base URL of the Ray dashboard (Jobs API, state API)."""
        ...

    def serve_url(self, port: int = 8000) -> str:
        """Where HTTP load reaches Ray Serve (a proxy that is not on the head, where possible)."""
        ...

    def head_identity(self) -> dict[str, Any]:
        """What identifies the current head incarnation (PID / pod UID, restart count)."""
        ...

    def metrics_texts(self, timeout: float = 0.5) -> list[str]:
        """Each reachable node's Prometheus metrics text (empty when not reachable)."""
        ...

    def cluster_events(self, since: float) -> list[dict[str, Any]]:
        """What the operator did after ``since`` (wall clock): restarts, replacements, image
        pulls — ``{"ts", "event", "node", ...}``, oldest first."""
        ...

    def gcs_call_ms(self, timeout: float = 2.0) -> float | None:
        """Round trip of one real GCS request (the node table) in ms; None without an answer."""
        ...

    def node_resources(self, timeout: float = 2.0) -> list[NodeInfo]:
        """The ALIVE nodes with ``available`` filled in (what the raylets last reported);
        ``available`` stays None where this target cannot see it."""
        ...

    def raylet_alive(self, node_ids: list[str]) -> dict[str, bool | None]:
        """For GCS node IDs: is that node's raylet process still running (None: cannot tell)?
        A node the GCS marks DEAD while this says True died falsely."""
        ...

    def node_env(self, nodes: list[str], names: list[str]) -> dict[str, dict[str, str]]:
        """``{"<node>/<process>": {name: value}}``: environment variables ``names`` as the live
        Ray processes of ``nodes`` really carry them (absent ones left out)."""
        ...

    def ray_log_counts(self, nodes: list[str], needles: list[str]) -> dict[str, dict[str, int]]:
        """``{node: {needle: lines}}``: how many lines of the nodes' Ray logs contain each needle
        so far (injected RPC failures, failed health checks); unreadable nodes left out."""
        ...

    def sut_cpu_seconds(self) -> float | None:
        """Cumulative CPU seconds of the system under test's processes on this host (never
        going backwards); None when they do not run here or cannot be counted. The host-noise
        sensor subtracts it so the cluster's own work is not taken for noise."""
        ...

    def network_counters(self) -> dict[str, dict[str, int]]:
        """``{node: {"in_bytes", "out_bytes"}}`` of each node's link so far (``{}``: not seen)."""
        ...

    def job_history(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        """Every job the GCS knows (``job_id``, ``submission_id``, ``dead``), finished ones too."""
        ...

    def review_objects(self) -> list[dict[str, Any]]:
        """The cluster as Kubernetes objects for the resilience review (:mod:`raychaos.review`):
        the RayCluster (RayJob, RayService), its namespace's PDBs and its pods. A target that is
        not on Kubernetes describes itself as the RayCluster KubeRay would run."""
        ...

    def node_storage(self) -> list[dict[str, Any]]:
        """Per node: ``node``, ``object_store_mb``, ``shm_mb``, ``plasma_directory`` (where Ray
        put the object store), ``on_shm``, ``spill_directory``; ``observed`` is False where
        the target cannot look inside its nodes."""
        ...

    # --- jobs --------------------------------------------------------------------------------
    def submit_job(self, entrypoint: str, *, working_dir: str | None = None,
                   on_driver_node: bool = True, metadata: dict[str, str] | None = None) -> str:
        """Submit a Ray job; with ``on_driver_node`` its driver is placed on a worker."""
        ...

    def job_status(self, job_id: str) -> str:
        """PENDING | RUNNING | SUCCEEDED | FAILED | STOPPED | MISSING | UNKNOWN (unreachable)."""
        ...

    def stop_job(self, job_id: str) -> None:
        """Stop a job; unknown or finished jobs are fine."""
        ...

    def job_log_lines(self, job_id: str) -> list[str]:
        """Lines of the job's driver log not returned by an earlier call."""
        ...

    # --- fault mechanics (each returns evidence; undo reverts the record) --------------------
    def kill_head(self, mode: str, record: dict[str, Any]) -> dict[str, Any]:
        """Kill the head (``head``/``pod``) or only ``gcs_server`` (``gcs``); evidence proves it."""
        ...

    def wait_head_back(self, old: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Wait until a new head incarnation answers: ``{"back": bool, "new": {...}, ...}``."""
        ...

    def select_drain_victims(self, count: int, selector: dict[str, str] | None
                             ) -> list[NodeInfo]:
        """The nodes a drain would take, or NothingMatched; changes nothing."""
        ...

    def drain_nodes(self, *, count: int, selector: dict[str, str] | None, deadline_s: float,
                    reason: str, replace: bool, replace_delay_s: float,
                    record: dict[str, Any]) -> dict[str, Any]:
        """Drain nodes (Ray's drain locally; cordon + evictions on Kubernetes)."""
        ...

    def throttle_registry_pulls(self, *, rate_bps: float, latency_ms: float, error_rate: float,
                                image_mb: float, restart_workers: list[str] | None,
                                record: dict[str, Any]) -> dict[str, Any]:
        """Slow image pulls from the registry to ``rate_bps``; evidence: a measured pull."""
        ...

    def saturate_network(self, *, nodes: list[str], bandwidth_bps: float, loss_pct: float,
                         latency_ms: float, flood: bool, partition: bool, flood_s: float,
                         record: dict[str, Any], queue_ms: float = 100.0) -> dict[str, Any]:
        """Degrade the network of ``nodes``; evidence: a transfer measured before and during.
        ``queue_ms``: how long a packet may wait in the shaper (a deep queue: bufferbloat)."""
        ...

    def restart_with_env(self, *, nodes: list[str], env: dict[str, str], wait_s: float,
                         record: dict[str, Any]) -> dict[str, Any]:
        """Restart ``nodes`` with ``env`` added (Ray reads its fault flags at start), as a pod
        restarts from a patched template; evidence: ``env_seen`` in the live processes. Undo
        restarts them without it."""
        ...

    def cut_network(self, *, nodes: list[str], record: dict[str, Any]) -> dict[str, Any]:
        """Drop all traffic of ``nodes`` (a blackout's down phase); their processes keep running.
        Several calls may share one record; :meth:`restore_network` ends them all."""
        ...

    def restore_network(self, record: dict[str, Any]) -> dict[str, Any]:
        """End every cut the record names; idempotent (also the record's undo)."""
        ...

    def resize_dev_shm(self, *, nodes: list[str], size_mb: float,
                       record: dict[str, Any]) -> dict[str, Any]:
        """Restart ``nodes`` with a /dev/shm of ``size_mb``; evidence: where Ray put the object
        store before and after (and whether the node came up at all)."""
        ...

    def undo(self, record: dict[str, Any]) -> dict[str, Any]:
        """Revert one ledger record; idempotent; raise RollbackFailed if it cannot."""
        ...
