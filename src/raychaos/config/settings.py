"""Settings as frozen dataclasses, loaded from the experiment's ``extensions`` block and SLO files.

The dataclasses are the schema (see :mod:`raychaos.config.schema`): a key not declared here is
an error, and every error names file, key path and value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from raychaos.config.kubernetes_kind import check_workload
from raychaos.config.metrics import SLO_METRICS
from raychaos.config.schema import Problems, build, load_yaml
from raychaos.errors import ConfigError

POS = {"min": 0}
NONEMPTY = {"nonempty": True}


@dataclass(frozen=True)
class SpillDiskSpec:
    """Each worker's object spill directory on a filesystem of its own (a loop device).

    Needs root and per-node namespaces. ``write_mbps``/``read_mbps`` slow it with the kernel's
    block-I/O throttle (cgroup v1 ``blkio.throttle``; this kernel has no cgroup v2 ``io``
    controller nor device-mapper, see experiments/README.md); ``cold_cache`` drops spilled
    files from the page cache so restores read the disk, as in a pod whose page cache is
    reclaimed under its memory limit.
    """

    size_mb: int = field(default=0, metadata={"min": 0, "max": 65536})  # 0: Ray's default
    write_mbps: float = field(default=0.0, metadata={"min": 0, "max": 100000})  # 0: full speed
    read_mbps: float = field(default=0.0, metadata={"min": 0, "max": 100000})
    cold_cache: bool = True

    def __post_init__(self) -> None:
        if (self.write_mbps or self.read_mbps) and not self.size_mb:
            raise ValueError("write_mbps/read_mbps need a disk of its own "
                             "(set size_mb, e.g. 1024)")


@dataclass(frozen=True)
class LocalClusterSpec:
    """The embedded cluster: a head and workers as real ``ray start --block`` processes."""

    name: str = field(default="raychaos", metadata=NONEMPTY)
    workers: int = field(default=2, metadata={"min": 1, "max": 16})
    gpu_workers: int = field(default=1, metadata={"min": 0, "max": 16})
    gpus_per_gpu_worker: int = field(default=1, metadata={"min": 0, "max": 16})
    cpus_per_worker: int = field(default=1, metadata={"min": 0, "max": 64})
    head_cpus: int = field(default=0, metadata={"min": 0, "max": 64})
    memory_mb: int = field(default=1024, metadata={"min": 256})
    object_store_mb: int = field(default=150, metadata={"min": 80})
    shm_mb: int | None = field(default=None, metadata={"min": 1})  # None: memory_mb
    spill_disk: SpillDiskSpec = field(default_factory=SpillDiskSpec)
    driver_slots: int = field(default=4, metadata={"min": 1, "max": 64})
    gcs_storage: Literal["rocksdb", "redis", "none"] = "rocksdb"
    redis_address: str | None = None
    head_restart_delay_s: float = field(default=2.0, metadata={"min": 0, "max": 600})
    worker_reconnect_timeout_s: float = field(default=600.0, metadata={"min": 1})
    # idle Ray workers a worker node keeps (RAY_num_workers_soft_limit); None: Ray's default,
    # one per CPU. The embedded nodes have 1-2 CPUs where a production node has 16-64: at one
    # per CPU, two loads sharing a node made Ray end each other's idle workers every second
    # and start new ones, seconds of CPU each on a small box — a task storm then took 0.2 to
    # over 18 s to come back after a head kill on a healthy cluster, 0-0.2 s with 8
    num_workers_soft_limit: int | None = field(default=8, metadata={"min": 0, "max": 1024})
    network: Literal["auto", "netns", "host"] = "auto"
    subnet_prefix: str = field(default="198.18", metadata=NONEMPTY)
    state_dir: str | None = None
    # the GCS's health checks of every raylet (RAY_health_check_*, on the head); None: Ray's
    # default (2.60: every 3000 ms, 10000 ms timeout, dead after 5 misses — ~65 s)
    health_check_period_ms: int | None = field(default=None, metadata={"min": 100,
                                                                        "max": 600_000})
    health_check_timeout_ms: int | None = field(default=None, metadata={"min": 100,
                                                                         "max": 600_000})
    health_check_failure_threshold: int | None = field(default=None,
                                                       metadata={"min": 1, "max": 1000})

    def __post_init__(self) -> None:
        if self.gpu_workers > self.workers:
            raise ValueError(
                f"gpu_workers ({self.gpu_workers}) cannot exceed workers ({self.workers})")


@dataclass(frozen=True)
class KubernetesSpec:
    """A KubeRay RayCluster reached through the Kubernetes API — named directly, or by the
    RayJob or RayService it runs (``kind`` + ``name``: the RayCluster is read from its status
    and followed when KubeRay replaces it)."""

    cluster: str | None = None
    kind: Literal["raycluster", "rayjob", "rayservice"] = "raycluster"
    name: str | None = None  # the RayJob/RayService (for raycluster: the same as cluster)
    namespace: str = "default"
    context: str | None = None
    kubeconfig: str | None = None
    dashboard_url: str | None = None  # default: raychaos's own port-forward to the head
    allowed_namespaces: list[str] = field(default_factory=list)
    max_nodes_at_once: int = field(default=1, metadata={"min": 1})
    # the monitor's reads of the Ray pods' metrics through the API server's pod proxy, at most
    # this many a second however many pods (targets/kubernetes/scrape.py)
    metrics_scrapes_per_s: float = field(default=10.0, metadata={"min": 0.1, "max": 1000})
    dry_run: bool = False

    def __post_init__(self) -> None:
        check_workload(self.kind, self.name, self.cluster)


@dataclass(frozen=True)
class TargetSpec:
    kind: Literal["local", "kubernetes"] = "local"
    local: LocalClusterSpec = field(default_factory=LocalClusterSpec)
    kubernetes: KubernetesSpec = field(default_factory=KubernetesSpec)


@dataclass(frozen=True)
class RampSpec:
    """Offered load raised step by step (``raychaos ramp``): the load gets ``--ramp
    START,STEP,STEP_S,STEPS`` and reports the rate it is offering (``offered``) in each line.

    The knee is the last step that held; a step breaks when its p95 passes ``p95_ms`` (default:
    the SLO profile's ``p95_latency_ms`` bound, else 250), its failure ratio passes
    ``failure_ratio``, or it completes less than ``min_achieved`` of what was offered. Before
    the first step the load runs ``warmup_s`` at the start rate, reported as ``warmup`` and
    judged by no step: Ray starting the workers its tasks need (a p95 of 1349 ms at the first
    step of a cold ramp, 51 ms two steps later) is not the cluster's breaking point."""

    start: float = field(default=100.0, metadata={"min": 0.1})
    step: float = field(default=100.0, metadata={"min": 0.1})
    step_s: float = field(default=8.0, metadata={"min": 2, "max": 3600})
    steps: int = field(default=10, metadata={"min": 2, "max": 1000})
    warmup_s: float = field(default=8.0, metadata={"min": 0, "max": 3600})
    p95_ms: float | None = field(default=None, metadata={"min": 0})
    failure_ratio: float = field(default=0.01, metadata={"min": 0, "max": 1})
    min_achieved: float = field(default=0.9, metadata={"min": 0, "max": 1})


@dataclass(frozen=True)
class LoadSpec:
    """One load that runs for the whole experiment."""

    name: str = field(metadata=NONEMPTY)
    kind: Literal["ray_job", "locust"] = "ray_job"
    script: str = field(default="", metadata=NONEMPTY)
    args: list[str] = field(default_factory=list)
    on_driver_node: bool = True
    users: int = field(default=10, metadata={"min": 1, "max": 10000})
    spawn_rate: float = field(default=5.0, metadata={"min": 0.1, "max": 1000})
    workers: int = field(default=0, metadata={"min": 0, "max": 64})
    host: str | None = None  # "serve": the deployed Serve app; default: the Ray dashboard
    serve_app: str | None = None  # "module:attr" in loads/, deployed before the load starts
    ramp: RampSpec | None = None  # ray_job loads that take --ramp (task_storm)
    # locust: open loop at this many requests/s for the whole load (RAYCHAOS_RATE), so a stall
    # shows as latency, not as fewer requests; None: the locustfile's own (closed-loop) pace
    rate: float | None = field(default=None, metadata={"min": 0.1, "max": 100000})

    def __post_init__(self) -> None:
        if self.rate is not None and self.kind != "locust":
            raise ValueError(f"rate: only a locust load takes a rate, got {self.rate:g} for a "
                             f"{self.kind} load (give a Ray job its pace in args)")


@dataclass(frozen=True)
class MonitorSpec:
    """Sampling, and the two observation windows around the faults.

    ``settle_s``: the baseline held once every load reports, before the first fault.
    ``recovery_window_s``: the longest the run keeps observing after the last fault before the
    loads stop; it ends earlier once every load is back at its baseline and the cluster is whole
    again (:mod:`raychaos.run.recovery_window`).
    """

    interval_s: float = field(default=0.2, metadata={"min": 0.05, "max": 0.2})
    gpu: bool = False  # sample GPU stranding (observe/watch.py); on when an SLO needs it
    storage: bool = False  # sample where each object store lives; on when an SLO needs it
    settle_s: float = field(default=5.0, metadata={"min": 0, "max": 600})
    recovery_window_s: float = field(default=10.0, metadata={"min": 0, "max": 3600})


@dataclass(frozen=True)
class AbortSpec:
    """Stop the run (rollbacks, summary ``aborted``, exit 2) when ``metric`` stays ``above``.

    A safety net for shared clusters: an experiment that hurts more than planned must end itself
    instead of waiting for its method to finish.
    """

    metric: Literal["error_ratio", "gcs_down_s", "nodes_dead"]  # = metrics.LIVE_METRICS (tested)
    above: float = field(metadata={"min": 0})
    for_s: float = field(default=0.0, metadata={"min": 0, "max": 3600})


@dataclass(frozen=True)
class RaychaosSettings:
    """The ``extensions: [{name: raychaos, ...}]`` block of an experiment."""

    name: Literal["raychaos"] = "raychaos"
    target: TargetSpec = field(default_factory=TargetSpec)
    slo_profile: str | None = None
    loads: list[LoadSpec] = field(default_factory=list)
    monitor: MonitorSpec = field(default_factory=MonitorSpec)
    sentinel: bool = True
    results_dir: str = "results"
    abort_if: list[AbortSpec] = field(default_factory=list)


#: metrics a relative SLO (``relative_to: baseline``) may judge: per-request latencies, whose
#: window is compared with the same load's baseline window request by request
RELATIVE_METRICS = ("p95_latency_ms", "p99_latency_ms")
#: the default minimum of samples a window needs before a load figure is judged at all
MIN_SAMPLES = 100


@dataclass(frozen=True)
class SloSpec:
    """One check of a profile. ``relative_to: baseline`` makes ``threshold`` a factor of the
    same load's baseline figure (``p95 <= 2 x baseline``), judged with a bootstrap interval and
    a rank test (:mod:`raychaos.observe.relative`). ``min_samples`` (default: the profile's) is
    how many samples each window the check reads must hold; fewer is ``inconclusive``."""

    name: str = field(metadata=NONEMPTY)
    metric: str = field(default="", metadata=NONEMPTY)
    op: Literal["<=", "<", ">=", ">", "=="] = "<="
    threshold: float = 0.0
    window: Literal["baseline", "chaos", "recovery", "run", "overlap"] = "run"
    load: str | None = None
    description: str = ""
    relative_to: Literal["baseline"] | None = None
    min_samples: int | None = field(default=None, metadata={"min": 1, "max": 10_000_000})

    def __post_init__(self) -> None:
        if self.metric not in SLO_METRICS:
            raise ValueError(f"metric: unknown metric {self.metric!r} "
                             f"(known: {', '.join(sorted(SLO_METRICS))})")
        if self.relative_to is None:
            return
        if self.metric not in RELATIVE_METRICS:
            raise ValueError(f"relative_to: {self.metric} cannot be judged against the "
                             f"baseline (relative metrics: {', '.join(RELATIVE_METRICS)}; "
                             "throughput_ratio and throughput_recovery_s already are)")
        if self.window == "baseline":
            raise ValueError("window: 'baseline' cannot be judged relative to itself")
        if self.threshold <= 0 or self.op == "==":
            raise ValueError(f"threshold: a relative bound is a factor of the baseline, "
                             f"{self.op} {self.threshold!r} is not one (e.g. op '<=', "
                             "threshold 2)")


@dataclass(frozen=True)
class HostNoiseSpec:
    """How much host noise may differ between the windows a check compares (or, for an
    absolute bound, be in its window) before its miss says nothing about the system under
    test: CPU taken by unrelated work, in cores, and the harness's timer lag p95."""

    foreign_cpus: float = field(default=0.3, metadata={"min": 0, "max": 1024})
    #: the harness's own timer stalls whenever the host is short of CPU — the system under
    #: test's own restarts included (a quiet 2-core box saw p95 46 ms during a head kill) —
    #: so it gates only a stall that leaves the 200 ms monitor itself unable to keep its beat
    timer_lag_ms: float = field(default=250.0, metadata={"min": 0, "max": 60_000})
    min_samples: int = field(default=3, metadata={"min": 1, "max": 100_000})


@dataclass(frozen=True)
class SloProfile:
    name: str = field(metadata=NONEMPTY)
    description: str = ""
    min_samples: int = field(default=MIN_SAMPLES, metadata={"min": 1, "max": 10_000_000})
    host_noise: HostNoiseSpec = field(default_factory=HostNoiseSpec)
    slos: list[SloSpec] = field(default_factory=list)


def load_slo_profile(path: str | Path) -> SloProfile:
    """Load and validate an SLO profile; all problems in the file are raised together."""
    data = load_yaml(path, "SLO profile")
    problems = Problems(str(path))
    profile = build(SloProfile, data, problems)
    if profile is not None:
        seen: set[str] = set()
        for i, slo in enumerate(profile.slos):
            if slo.name in seen:
                problems.add(f"slos[{i}].name", f"duplicate SLO name {slo.name!r}")
            seen.add(slo.name)
    problems.raise_if_any()
    assert profile is not None
    return profile


def settings_from_extensions(extensions: object, source: str) -> RaychaosSettings:
    """Find and validate the raychaos block in an experiment's ``extensions`` list."""
    problems = Problems(source)
    if extensions is None:
        return RaychaosSettings()
    if not isinstance(extensions, list):
        problems.add("extensions", "expected a list of {name: ...} mappings")
        problems.raise_if_any()
        return RaychaosSettings()  # pragma: no cover - raise_if_any raised
    blocks: list[tuple[int, dict[str, Any]]] = [
        (i, e) for i, e in enumerate(extensions)
        if isinstance(e, dict) and e.get("name") == "raychaos"]
    if len(blocks) > 1:
        problems.add("extensions", "more than one extension named 'raychaos'")
        problems.raise_if_any()
    if not blocks:
        return RaychaosSettings()
    index, block = blocks[0]
    settings = build(RaychaosSettings, block, problems, f"extensions[{index}]")
    problems.raise_if_any()
    if settings is None:  # pragma: no cover - build reports why
        raise ConfigError(f"{source}: extensions[{index}]: invalid")
    return settings
