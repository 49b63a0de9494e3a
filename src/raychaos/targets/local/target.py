"""The embedded local target: a real multi-node Ray cluster of processes on this machine.

As root on Linux each node is a "pod" with its own network, PID and mount namespace
(:mod:`.network.pods`, :mod:`.nodes`); elsewhere it falls back to host mode on 127.0.0.1, where
the faults that need per-node namespaces are refused before anything starts. GCS fault
tolerance is on by default, on Ray's embedded ``rocksdb`` store (or a Redis given by address);
workers get a long ``RAY_gcs_rpc_server_reconnect_timeout_s`` as KubeRay sets on its workers.

:class:`LocalTarget` is the :class:`~raychaos.targets.base.Target` of such a cluster: a thin
facade over a :class:`~.cluster.LocalCluster` handle and the plain functions of the head, jobs,
drain, registry and network modules. Third-party failures (Ray, ``ip``/``tc``) are turned into
the raychaos error tree where they happen, in those modules (:mod:`.errors`).

A cluster that is already up is reused by the next run when it has the experiment's settings —
restored and proven clean first (:mod:`.warm`); one with other settings is replaced.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from raychaos.config.rayflags import HEALTH_CHECK_ENV, RAY_VERSION
from raychaos.config.settings import LocalClusterSpec
from raychaos.errors import ConfigError, NothingMatched, RollbackFailed, TargetUnavailable
from raychaos.results.redact import redact_text
from raychaos.targets.base import NodeInfo, Observation, Refusal, RunLock
from raychaos.targets.local import cpu, drain, head, lifecycle, nodeenv, shmfault, warm
from raychaos.targets.local.cluster import LocalCluster, default_state_root
from raychaos.targets.local.errors import ray_errors
from raychaos.targets.local.jobs import LocalJobs
from raychaos.targets.local.manifest import as_raycluster
from raychaos.targets.local.network import blackout as netcut
from raychaos.targets.local.network import faults as netfaults
from raychaos.targets.local.network.pods import PodNetwork, netns_supported
from raychaos.targets.local.raylogs import LogCounter
from raychaos.targets.local.registry import fault as registry
from raychaos.targets.lock import FileLock

__all__ = ["LocalTarget", "default_state_root"]

NETNS_FAULTS = ("throttle_registry_pulls", "saturate_network", "blackout", "resize_dev_shm")
NODE_FAULTS = ("saturate_network", "blackout", "inject_rpc_failures",  # take ``nodes``
               "resize_dev_shm")


class LocalTarget:
    kind = "local"

    def __init__(self, spec: LocalClusterSpec, state_root: str | Path | None = None,
                 progress: Callable[[str], None] | None = None):
        self.spec = spec
        root = Path(state_root or spec.state_dir or default_state_root())
        self.state_dir = root / spec.name
        self.net = PodNetwork(spec.name, spec.subnet_prefix)
        self.cluster = LocalCluster(spec.name, self.state_dir, self.net)
        self.jobs = LocalJobs(self.cluster)
        self.progress = progress or (lambda _msg: None)
        self.run_id = ""
        self.logs = LogCounter(self.cluster)
        self.readiness: dict[str, Any] = {}  # how ensure_up found the cluster (describe())
        self._lock: FileLock | None = None
        self._cpu_usage: cpu.CpuUsage | None = None  # made on the first sut_cpu_seconds

    # --- lifecycle ---------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        return lifecycle.choose_mode(self.cluster, self.spec)

    def is_up(self) -> bool:
        return self.cluster.is_up()

    def up(self, timeout: float = 240.0) -> dict[str, Any]:
        """Start the cluster (idempotent) and wait until every node is ALIVE."""
        if self.is_up():
            self.progress(f"local cluster '{self.spec.name}' is already up")
        else:
            lifecycle.up(self.cluster, self.spec, self.progress, timeout)
        return self.status()

    def ensure_up(self, say: Callable[[str], None]) -> bool:
        """Start the cluster, or reuse the one that is up: with the same settings it is
        restored and proven clean (under the run lock, so never under a live run); with other
        settings it is replaced. True when this call started a cluster."""
        t0 = time.monotonic()
        if self.is_up():
            lock = self.run_lock()
            lock.acquire(self.run_id or "reuse")  # TargetBusy: a live run holds it
            diffs = warm.differences(self.cluster, self.spec)
            if not diffs:
                try:
                    restored = warm.restore(self.cluster, self.jobs, self.spec)
                    if restored:
                        say(f"restored the local cluster '{self.spec.name}': "
                            + "; ".join(restored))
                    proof = warm.prove_clean(self.cluster, self.jobs, say=say)
                except BaseException:
                    lock.release()  # not clean, or interrupted: no run holds the cluster
                    raise
                say(f"reusing local cluster '{self.spec.name}': {proof['nodes_alive']} nodes "
                    f"ALIVE with their totals, no fault or job left (proven in "
                    f"{time.monotonic() - t0:.1f}s)")
                self.readiness = {"started": False, "reused": True, "kept_warm": True,
                                  "restored": restored, "proof": proof}
                return False
            say(f"local cluster '{self.spec.name}' is up with other settings "
                f"({'; '.join(diffs)}): replacing it")
            lock.release()  # its folder (with the lock file) goes with it
            self.down()
        else:
            say("no local cluster is up: starting one")
        self.progress = say
        self.up()
        self.readiness = {"started": True, "reused": False, "kept_warm": True,
                          "up_s": round(time.monotonic() - t0, 2)}
        return True

    def down(self) -> dict[str, Any]:
        return lifecycle.down(self.cluster)

    def leftovers(self) -> dict[str, list[Any]]:
        return lifecycle.leftovers(self.cluster)

    def status(self) -> dict[str, Any]:
        desired = self.cluster.desired()
        if not desired:
            return {"name": self.spec.name, "up": False}
        nodes = self.nodes(timeout=1.0) if self.gcs_alive(0.5) else []
        return {"name": self.spec.name, "up": self.cluster.supervisor_alive(),
                "mode": desired["mode"], "gcs_address": desired["gcs_address"],
                "dashboard_url": desired["dashboard_url"],
                "gcs_storage": desired["gcs_storage"],
                "processes": dict(self.cluster.status().get("nodes", {})),
                "nodes": [n.to_dict() for n in nodes]}

    def connect(self) -> None:
        if not self.is_up():
            raise TargetUnavailable(f"local cluster '{self.spec.name}' is not up "
                                    "(start it with `raychaos local up`)")
        if not self.gcs_alive(2.0):
            raise TargetUnavailable(f"local cluster '{self.spec.name}': the GCS at "
                                    f"{self.cluster.gcs_address} does not answer")
        running = (self.cluster.desired() or {}).get("spec") or {}
        for key in HEALTH_CHECK_ENV:  # knobs of the GCS: a running cluster cannot change them
            if key in running and running.get(key) != getattr(self.spec, key, None):
                raise ConfigError(f"target.local.{key}: the running local cluster "
                                  f"'{self.spec.name}' has {running.get(key)!r}, the experiment "
                                  f"asks for {getattr(self.spec, key)!r}; take it down "
                                  f"(`raychaos local down`) or ask for the same")

    def close(self) -> None:
        self.cluster.close()

    def owner(self) -> dict[str, Any]:
        """No RayJob or RayService runs the local cluster (a local Serve app plays one)."""
        return {}

    def run_lock(self) -> RunLock:
        """The cluster's lock file; the same object for the life of this target, so the lock
        :meth:`ensure_up` took to restore the cluster is the run's."""
        if self._lock is None:
            self._lock = FileLock(self.state_dir / "run.lock", f"local cluster '{self.spec.name}'")
        return self._lock

    def describe(self) -> dict[str, Any]:
        desired = self.cluster.desired() or {}
        return {"kind": "local", "name": self.spec.name, "mode": desired.get("mode"),
                "gcs_address": desired.get("gcs_address"),
                "dashboard_url": desired.get("dashboard_url"),
                "gcs_fault_tolerance": self.spec.gcs_storage != "none",
                "gcs_storage": self.spec.gcs_storage, "workers": self.spec.workers,
                "gpu_workers": self.spec.gpu_workers, "state_dir": str(self.state_dir),
                "redis_address": redact_text(self.spec.redis_address or "") or None,
                "cluster": dict(self.readiness)}

    def refusals(self, fault: str, args: Mapping[str, Any]) -> list[Refusal]:
        out: list[Refusal] = []
        if fault in NETNS_FAULTS and self.spec.network == "host":
            out.append(("", f"{fault} needs per-node network namespaces, and "
                            "target.local.network is 'host'"))
        elif fault in NETNS_FAULTS and self.spec.network == "auto" and netns_supported():
            out.append(("", f"{fault} needs per-node network namespaces, which are not "
                            f"possible here: {netns_supported()}"))
        if fault in NETNS_FAULTS and args.get("latency_ms"):
            out.append(("latency_ms", "the local target does not add latency (this kernel has "
                                      "no tc netem); set it to 0"))
        return out

    def preflight(self, fault: str, args: Mapping[str, Any]) -> None:
        if fault == "drain_gpu_nodes":
            self.select_drain_victims(int(args.get("count", 1)), args.get("selector"))
        if fault in ("inject_rpc_failures", "slow_gcs"):
            from importlib.metadata import version

            if version("ray") != RAY_VERSION:  # the nodes run the Ray installed here
                raise ConfigError(f"{fault}: local cluster '{self.spec.name}' runs Ray "
                                  f"{version('ray')}, and raychaos knows the fault flags of "
                                  f"Ray {RAY_VERSION} only (a malformed flag kills the process)")
        if fault in NODE_FAULTS:
            known = [p.name for p in self.cluster.plans()]
            nodes = list(args.get("nodes") or ["worker-1"])
            unknown = [n for n in nodes if n not in known]
            if unknown:
                raise NothingMatched(f"{fault}: no node named {unknown[0]!r} in local "
                                     f"cluster '{self.spec.name}' (nodes: {sorted(known)})")

    # --- observation -------------------------------------------------------------------------
    def gcs_alive(self, timeout: float = 0.5) -> bool:
        return self.cluster.gcs_alive(timeout)

    def nodes(self, timeout: float = 1.0) -> list[NodeInfo]:
        return self.cluster.nodes(timeout)

    def observe(self, deadline_s: float = 0.1) -> Observation:
        return self.cluster.observe(deadline_s)

    def dashboard_url(self) -> str:
        return self.jobs.dashboard_url()

    def serve_url(self, port: int = 8000) -> str:
        """A CPU worker's Serve proxy: it keeps serving while the head is down, as the pods
        behind a RayService's serve Service do."""
        workers = [p for p in self.cluster.plans() if p.role == "worker"]
        cpu = [p for p in workers if not p.gpus] or workers
        return f"http://{cpu[0].ip if cpu else '127.0.0.1'}:{port}"

    def head_identity(self) -> dict[str, Any]:
        return head.head_identity(self.cluster)

    def metrics_texts(self, timeout: float = 0.5) -> list[str]:
        return self.cluster.metrics_texts(timeout)

    def cluster_events(self, since: float) -> list[dict[str, Any]]:
        return self.cluster.events(since)

    def gcs_call_ms(self, timeout: float = 2.0) -> float | None:
        try:
            answer = self.cluster.gcs().ask(deadline_s=timeout)
        except TargetUnavailable:
            return None
        return round(answer.latency_s * 1000, 2) if answer.up else None

    def node_resources(self, timeout: float = 2.0) -> list[NodeInfo]:
        from dataclasses import replace

        with ray_errors(f"GCS of local cluster '{self.spec.name}'"):
            usage = self.cluster.admin().resources(timeout)
        return [replace(n, available=usage.get(n.node_id, {}).get("available"),
                        resources=usage.get(n.node_id, {}).get("total", n.resources))
                for n in self.nodes(timeout) if n.state == "ALIVE"]

    def raylet_alive(self, node_ids: list[str]) -> dict[str, bool | None]:
        return dict(nodeenv.raylet_alive(self.cluster, node_ids))

    def node_env(self, nodes: list[str], names: list[str]) -> dict[str, dict[str, str]]:
        return nodeenv.node_env(self.cluster, nodes, names)

    def ray_log_counts(self, nodes: list[str], needles: list[str]) -> dict[str, dict[str, int]]:
        return self.logs.counts(nodes, needles)

    def network_counters(self) -> dict[str, dict[str, int]]:
        return netcut.network_counters(self.cluster)

    def sut_cpu_seconds(self) -> float | None:
        """The CPU of this cluster's pod groups (``raychaos-<cluster>--<node>``); None with
        CPU groups off (``RAYCHAOS_CPU_GROUPS=off``, not root) or no group to read."""
        if self._cpu_usage is None:
            groups = cpu.cpu_groups()
            if groups is None:
                return None
            self._cpu_usage = cpu.CpuUsage(groups, cpu.cluster_prefix(self.spec.name))
        return self._cpu_usage.read()

    def job_history(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        with ray_errors(f"GCS of local cluster '{self.spec.name}'"):
            return self.cluster.admin().jobs(timeout)

    def review_objects(self) -> list[dict[str, Any]]:
        plans = self.cluster.plans()
        if not plans:
            return []
        return [as_raycluster(self.spec, plans, redact_text(self.spec.redis_address or ""))]

    def node_storage(self) -> list[dict[str, Any]]:
        return shmfault.storage_facts(self.cluster)

    # --- jobs --------------------------------------------------------------------------------
    def submit_job(self, entrypoint: str, *, working_dir: str | None = None,
                   on_driver_node: bool = True, metadata: dict[str, str] | None = None) -> str:
        with ray_errors(f"Jobs API of local cluster '{self.spec.name}'"):
            return self.jobs.submit_job(entrypoint, working_dir=working_dir,
                                        on_driver_node=on_driver_node, metadata=metadata)

    def job_status(self, job_id: str) -> str:
        return self.jobs.job_status(job_id)

    def stop_job(self, job_id: str) -> None:
        self.jobs.stop_job(job_id)

    def job_log_lines(self, job_id: str) -> list[str]:
        return self.jobs.job_log_lines(job_id)

    # --- faults ------------------------------------------------------------------------------
    def kill_head(self, mode: str, record: dict[str, Any]) -> dict[str, Any]:
        return head.kill_head(self.cluster, mode, record)

    def wait_head_back(self, old: dict[str, Any], timeout: float) -> dict[str, Any]:
        return head.wait_head_back(self.cluster, old, timeout)

    def select_drain_victims(self, count: int, selector: dict[str, str] | None
                             ) -> list[NodeInfo]:
        return drain.select_drain_victims(self.cluster, count, selector)

    def drain_nodes(self, *, count: int, selector: dict[str, str] | None, deadline_s: float,
                    reason: str, replace: bool, replace_delay_s: float,
                    record: dict[str, Any]) -> dict[str, Any]:
        return drain.drain_nodes(self.cluster, count=count, selector=selector,
                                 deadline_s=deadline_s, reason=reason, replace=replace,
                                 replace_delay_s=replace_delay_s, record=record)

    def throttle_registry_pulls(self, *, rate_bps: float, latency_ms: float, error_rate: float,
                                image_mb: float, restart_workers: list[str] | None,
                                record: dict[str, Any]) -> dict[str, Any]:
        return registry.throttle_registry_pulls(
            self.cluster, rate_bps=rate_bps, error_rate=error_rate, image_mb=image_mb,
            restart_workers=restart_workers, record=record)

    def saturate_network(self, *, nodes: list[str], bandwidth_bps: float, loss_pct: float,
                         latency_ms: float, flood: bool, partition: bool, flood_s: float,
                         record: dict[str, Any], queue_ms: float = 100.0) -> dict[str, Any]:
        return netfaults.saturate_network(
            self.cluster, nodes=nodes, bandwidth_bps=bandwidth_bps, loss_pct=loss_pct,
            flood=flood, partition=partition, flood_s=flood_s, record=record,
            queue_ms=queue_ms)

    def restart_with_env(self, *, nodes: list[str], env: dict[str, str], wait_s: float,
                         record: dict[str, Any]) -> dict[str, Any]:
        return nodeenv.restart_with_env(self.cluster, nodes=nodes, env=env, wait_s=wait_s,
                                        record=record)

    def cut_network(self, *, nodes: list[str], record: dict[str, Any]) -> dict[str, Any]:
        return netcut.cut_network(self.cluster, nodes=nodes, record=record)

    def restore_network(self, record: dict[str, Any]) -> dict[str, Any]:
        return netcut.restore_network(self.cluster, record)

    def resize_dev_shm(self, *, nodes: list[str], size_mb: float,
                       record: dict[str, Any]) -> dict[str, Any]:
        return shmfault.resize_dev_shm(self.cluster, nodes=nodes, size_mb=size_mb,
                                       record=record)

    def measure_transfer(self, src: str, dst: str, seconds: float = 1.5) -> dict[str, Any]:
        return netfaults.measure_transfer(self.cluster, src, dst, seconds)

    def netfault_leftovers(self) -> dict[str, Any]:
        return netfaults.netfault_leftovers(self.cluster)

    def undo(self, record: dict[str, Any]) -> dict[str, Any]:
        undo = record.get("undo") or {}
        kind = undo.get("kind")
        if not kind:  # the fault failed before it changed anything
            return {"undone": True, "note": "nothing was changed"}
        if kind == "ensure_head":
            return head.ensure_head(self.cluster, undo)
        if kind == "drain":
            return drain.undo_drain(self.cluster, undo)
        if kind == "registry_throttle":
            return registry.undo_registry_throttle(self.cluster, undo)
        if kind == "netfault":
            return netfaults.undo_netfault(self.cluster, undo)
        if kind == "blackout":
            return netcut.restore_network(self.cluster, record)
        if kind == "node_env":
            return nodeenv.undo_node_env(self.cluster, undo)
        if kind == "dev_shm":
            return shmfault.undo_resize_dev_shm(self.cluster, undo)
        raise RollbackFailed(f"local target cannot undo {kind!r} (record {record.get('id')})")
