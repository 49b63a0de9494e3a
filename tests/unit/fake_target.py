"""A Target for unit tests: a simulated Ray cluster in this process, no Ray, no API server.

It implements the whole :class:`raychaos.targets.base.Target` protocol, so the session, the
faults, the probes and the monitor run unchanged against it: a head whose GCS goes down for
``outage_s`` when killed and comes back as a new incarnation (or never, with
``head_comes_back=False``), workers that stay ALIVE (or are lost with ``lose_workers``, or come
back as new nodes with ``new_workers``: a GCS without fault tolerance) and
report to the new GCS ``reregister_s`` after it is back (or never, with ``reregister=False``:
listed ALIVE from the restored table, never heard from — what re-registration must catch), jobs
whose driver logs carry one stats line per second (``job_rate`` completions, ``job_failures``
failures), the sentinel actor's jobs (the watcher answering once a second while the GCS is up,
silent once its driver is lost with the workers; the one-off check), drains and network faults
that record what they changed and undo it; Ray fault flags (a restart with env: ``node_env``
shows it, ``gcs_call_ms`` grows with ``RAY_testing_asio_delay_us``, injected failures show in
``ray_log_counts``) and blackouts (with ``blackout_kills`` a cut worker is marked DEAD while
its raylet lives: a false death; it comes back under a new ID when the network does).
``leak_gpu`` leaves worker-1's GPU unavailable. ``calls`` lists every method call, for
assertions.

Run an experiment against it from a subprocess with
``RAYCHAOS_TARGET_FACTORY=tests.unit.fake_target:from_spec``.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from raychaos.errors import FaultFailed, NothingMatched, TargetUnavailable
from raychaos.targets.base import NodeInfo, Observation, Refusal

STATS = "RAYCHAOS_STATS "
SENTINEL = "RAYCHAOS_SENTINEL "


class _Lock:
    taken_over: dict[str, Any] | None = None

    def acquire(self, run_id: str) -> None:
        self.held = run_id

    def release(self) -> None:
        self.held = None

    def clear_stale(self, run_id: str) -> bool:
        return False


class FakeTarget:
    kind = "fake"

    def __init__(self, outage_s: float = 1.0, head_comes_back: bool = True,
                 lose_workers: bool = False, job_rate: int = 50, job_failures: int = 0,
                 workers: int = 2, reregister: bool = True, reregister_s: float = 0.1,
                 observe_delay_s: float = 0.0, zombie_jobs: bool = False,
                 undo_wait_s: float = 10.0, reports_known: bool = True,
                 workload: dict[str, Any] | None = None, blackout_kills: bool = False,
                 leak_gpu: bool = False, lose_job_history: bool = False,
                 new_workers: bool = False) -> None:
        self.run_id = ""
        self.sut_seconds: float | None = None  # what sut_cpu_seconds answers
        self.reports_known = reports_known  # False: like Kubernetes, which raylets reported?
        self.outage_s = outage_s
        self.head_comes_back = head_comes_back
        self.lose_workers = lose_workers
        # a GCS without fault tolerance: it comes back with an empty table, the old raylets
        # exit, and the workers come back as new nodes (new IDs); the old IDs are never listed
        self.new_workers = new_workers
        self.reregister, self.reregister_s = reregister, reregister_s
        self.observe_delay_s = observe_delay_s  # an observe that blocks this long
        self.zombie_jobs = zombie_jobs  # after a kill: drivers dead, jobs still read RUNNING
        self.undo_wait_s = undo_wait_s  # how long the undo of a head kill waits for the head
        self.back_at: float | None = None  # monotonic: when the GCS last came back
        self.job_rate, self.job_failures = job_rate, job_failures
        self.calls: list[tuple[str, Any]] = []
        self._lock = threading.Lock()
        self.head_pid = 1000
        self.down_until: float | None = None  # monotonic; None: up
        self.worker_ids = [f"{i:02d}" * 14 for i in range(1, workers + 1)]
        self.lost: set[str] = set()
        self.jobs: dict[str, dict[str, Any]] = {}
        self.applied: dict[str, dict[str, Any]] = {}
        self.workload: dict[str, Any] = dict(workload or {})  # a planted RayJob/RayService
        self.sentinel = {"pid": 4242, "node_id": self.worker_ids[0], "count": 3}
        self.blackout_kills, self.leak_gpu = blackout_kills, leak_gpu
        self.lose_job_history = lose_job_history
        self.env: dict[str, dict[str, str]] = {}  # node -> fault flags it runs with
        self.cut: set[str] = set()
        self.dead_alive_raylet: set[str] = set()  # node IDs DEAD in the GCS, raylet running

    # --- lifecycle ---------------------------------------------------------------------------
    def ensure_up(self, say: Callable[[str], None]) -> bool:
        self.calls.append(("ensure_up", None))
        return False

    def connect(self) -> None:
        self.calls.append(("connect", None))

    def close(self) -> None:
        self.calls.append(("close", None))

    def down(self) -> dict[str, Any]:
        return {}

    def describe(self) -> dict[str, Any]:
        return {"kind": "fake", "workers": len(self.worker_ids)}

    def run_lock(self) -> _Lock:
        return _Lock()

    def owner(self) -> dict[str, Any]:
        """``self.workload`` (set by a test: a planted RayJob/RayService status), else {}."""
        return dict(self.workload)

    def refusals(self, fault: str, args: Mapping[str, Any]) -> list[Refusal]:
        return [("partition", "the fake cannot partition")] if args.get("partition") else []

    def preflight(self, fault: str, args: Mapping[str, Any]) -> None:
        self.calls.append(("preflight", fault))

    # --- observation -------------------------------------------------------------------------
    def _up(self) -> bool:
        with self._lock:
            if self.down_until is None:
                return True
            if self.head_comes_back and time.monotonic() >= self.down_until:
                self.down_until = None
                self.back_at = time.monotonic()
                self.head_pid += 1
                if self.lose_workers:
                    self.lost = set(self.worker_ids)
                if self.new_workers:
                    self.worker_ids = [f"e{self.head_pid % 10}{i:02d}" + "ee" * 12
                                       for i in range(1, len(self.worker_ids) + 1)]
                return True
            return False

    def gcs_alive(self, timeout: float = 0.5) -> bool:
        return self._up()

    def nodes(self, timeout: float = 1.0) -> list[NodeInfo]:
        if not self._up():
            raise TargetUnavailable("fake: the GCS is down")
        out = [NodeInfo(node_id="ff" * 14, name="head", address="fake-head", state="ALIVE",
                        is_head=True)]
        for i, wid in enumerate(self.worker_ids):
            state = "DEAD" if wid in self.lost else "ALIVE"
            out.append(NodeInfo(node_id=wid, name=f"worker-{i + 1}", address=f"fake-{i + 1}",
                                state=state, gpus=1.0 if i == 0 else 0.0, cpus=1.0,
                                resources={"CPU": 1.0, **({"GPU": 1.0} if i == 0 else {})}))
        out += [NodeInfo(node_id=d, name="gone", address="fake-gone", state="DEAD")
                for d in sorted(self.dead_alive_raylet)]
        return out

    def observe(self, deadline_s: float = 0.1) -> Observation:
        if self.observe_delay_s:
            time.sleep(self.observe_delay_s)
        try:
            nodes = self.nodes()
        except TargetUnavailable as exc:
            return Observation(False, error=str(exc))
        back = self.back_at
        fresh = back is None or (self.reregister and time.monotonic() - back >= self.reregister_s)
        reported = frozenset(n.node_id for n in nodes if n.state == "ALIVE"
                             and (n.is_head or fresh))
        latency_s = (self.gcs_call_ms() or 0.0) / 1000  # grows with a slow GCS's flag
        if not self.reports_known:  # only the (restored) node table: no re-registration signal
            return Observation(True, nodes=nodes, latency_s=latency_s)
        return Observation(True, nodes=nodes, reported=reported, incarnation=self.head_pid,
                           latency_s=latency_s)

    def dashboard_url(self) -> str:
        return "http://fake-dashboard"

    def serve_url(self, port: int = 8000) -> str:
        return f"http://fake-serve:{port}"

    def head_identity(self) -> dict[str, Any]:
        return {"pid": self.head_pid, "state": "running" if self._up() else "exited"}

    def metrics_texts(self, timeout: float = 0.5) -> list[str]:
        return []

    def cluster_events(self, since: float) -> list[dict[str, Any]]:
        return []

    def gcs_call_ms(self, timeout: float = 2.0) -> float | None:
        delay = self.env.get("head", {}).get("RAY_testing_asio_delay_us")
        return (int(delay.split("=")[1].split(":")[0]) / 1000 + 1.0) if delay else 1.0

    def node_resources(self, timeout: float = 2.0) -> list[NodeInfo]:
        from dataclasses import replace

        return [replace(n, available={k: 0.0 if (k == "GPU" and self.leak_gpu) else v
                                      for k, v in n.resources.items()})
                for n in self.nodes() if n.state == "ALIVE"]

    def raylet_alive(self, node_ids: list[str]) -> dict[str, bool | None]:
        return {i: i in self.dead_alive_raylet for i in node_ids}

    def node_env(self, nodes: list[str], names: list[str]) -> dict[str, dict[str, str]]:
        return {f"{n}/raylet": {k: v for k, v in self.env.get(n, {}).items() if k in names}
                for n in nodes}

    def ray_log_counts(self, nodes: list[str], needles: list[str]) -> dict[str, dict[str, int]]:
        return {n: {k: 3 if "RAY_testing_rpc_failure" in self.env.get(n, {}) else 0
                    for k in needles} for n in nodes}

    def network_counters(self) -> dict[str, dict[str, int]]:
        return {}

    def sut_cpu_seconds(self) -> float | None:
        """A simulated cluster uses no CPU of its own: a counter a test may set, else None."""
        return self.sut_seconds


    def job_history(self, timeout: float = 5.0) -> list[dict[str, Any]]:
        lost = self.lose_job_history and self.head_pid > 1000
        return [] if lost else [{"job_id": j, "submission_id": j, "dead": False}
                                for j in self.jobs]

    def review_objects(self) -> list[dict[str, Any]]:
        return [{"apiVersion": "ray.io/v1", "kind": "RayCluster",
                 "metadata": {"name": "fake", "namespace": "fake"},
                 "spec": {"headGroupSpec": {"rayStartParams": {"num-cpus": "0"}},
                          "workerGroupSpecs": []}}]

    def node_storage(self) -> list[dict[str, Any]]:
        shm = (self.applied.get("dev_shm") or {}).get("size_mb")
        return [{"node": f"worker-{i + 1}", "observed": True, "object_store_mb": 150.0,
                 "shm_mb": shm if shm and i == 0 else 1024.0,
                 "on_shm": not (shm and shm < 150 and i == 0),
                 "plasma_directory": "/tmp/fake" if shm and shm < 150 and i == 0
                 else "/dev/shm"} for i in range(len(self.worker_ids))]

    # --- jobs --------------------------------------------------------------------------------
    def submit_job(self, entrypoint: str, *, working_dir: str | None = None,
                   on_driver_node: bool = True, metadata: dict[str, str] | None = None) -> str:
        job_id = f"fakejob_{len(self.jobs) + 1}"
        name = entrypoint.split("--name", 1)[1].split()[0] if "--name" in entrypoint else job_id
        lines: list[str] = []
        if "object_store_ballast.py" in entrypoint:  # holds until stopped, says so once
            mb = float(entrypoint.split("--mb", 1)[1].split()[0])
            self.jobs[job_id] = {"entry": entrypoint, "name": "ballast", "last": time.time(),
                                 "oneshot": False, "ballast": True, "lines": [
                                     "RAYCHAOS_BALLAST " + json.dumps(
                                         {"held_mb": mb, "blocks": 1, "node_id": "01" * 14})]}
            self.calls.append(("submit_job", entrypoint))
            return job_id
        if "sentinel.py watch" in entrypoint:  # the long-lived watcher: answers every second
            self.jobs[job_id] = {"entry": entrypoint, "name": name, "watch": True, "check": 0,
                                 "lines": [SENTINEL + json.dumps({
                                     "found": True, "reachable": True, **self.sentinel,
                                     "ts": time.time(), "check": 0})],
                                 "last": time.time(), "oneshot": False}
            self.calls.append(("submit_job", entrypoint))
            return job_id
        if "sentinel.py" in entrypoint:
            state = dict(self.sentinel)
            lost = self.lose_workers and self.head_pid > 1000
            lines = [SENTINEL + json.dumps({"found": not lost, "reachable": not lost,
                                            **({} if lost else state)})]
        self.jobs[job_id] = {"entry": entrypoint, "name": name, "lines": lines,
                             "last": time.time(), "oneshot": bool(lines)}
        self.calls.append(("submit_job", entrypoint))
        return job_id

    def job_status(self, job_id: str) -> str:
        job = self.jobs.get(job_id)
        if job is None:
            return "MISSING"
        if job.get("status"):  # planted by a test
            return str(job["status"])
        if job["oneshot"]:
            return "SUCCEEDED"
        if job.get("watch") and self._watcher_lost():
            return "FAILED"  # its driver died with the workers
        return "RUNNING" if not job.get("stopped") else "STOPPED"

    def _watcher_lost(self) -> bool:
        return self.lose_workers and self.head_pid > 1000

    def stop_job(self, job_id: str) -> None:
        if job_id in self.jobs:
            self.jobs[job_id]["stopped"] = True

    def job_log_lines(self, job_id: str) -> list[str]:
        job = self.jobs.get(job_id)
        if job is None:
            return []
        if job["oneshot"] or job.get("ballast"):
            out, job["lines"] = job["lines"], []
            return list(out)
        now = time.time()
        if job.get("watch"):
            out, job["lines"] = job["lines"], []
            while job["last"] + 1 <= now and not job.get("stopped"):
                job["last"] += 1
                if not self._up() or self._watcher_lost():
                    continue  # a lookup blocks while the GCS is down; a dead driver is silent
                job["check"] += 1
                out.append(SENTINEL + json.dumps({"found": True, "reachable": True,
                                                  **self.sentinel, "ts": job["last"],
                                                  "check": job["check"]}))
            return out
        out = []
        if self.zombie_jobs and self.head_pid > 1000:  # the driver died with the head
            return []
        while job["last"] + 1 <= now and not job.get("stopped"):
            job["last"] += 1
            up = self._up() and job_id not in self.lost
            out.append(STATS + json.dumps({
                "load": job["name"], "ts": job["last"], "count": self.job_rate if up else 0,
                "failures": self.job_failures, "p50_ms": 2.0, "p95_ms": 5.0, "p99_ms": 9.0}))
        return out

    # --- faults ------------------------------------------------------------------------------
    def kill_head(self, mode: str, record: dict[str, Any]) -> dict[str, Any]:
        record["undo"] = {"kind": "ensure_head", "old_pid": self.head_pid}
        old = self.head_identity()
        with self._lock:
            self.down_until = time.monotonic() + self.outage_s
        return {"mode": mode, "signal": "SIGKILL", "old": old, "killed_at": time.time(),
                "landed": True}

    def wait_head_back(self, old: dict[str, Any], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._up() and self.head_pid != old.get("pid"):
                return {"back": True, "new": self.head_identity()}
            time.sleep(0.05)
        return {"back": False, "new": self.head_identity()}

    def select_drain_victims(self, count: int, selector: dict[str, str] | None
                             ) -> list[NodeInfo]:
        gpu = [n for n in self.nodes() if n.gpus > 0 and n.state == "ALIVE"]
        if count > len(gpu):
            raise NothingMatched(f"fake: count={count} but only {len(gpu)} GPU nodes")
        return gpu[:count]

    def _apply(self, fault: str, record: dict[str, Any], **args: Any) -> dict[str, Any]:
        record["undo"] = {"kind": fault}
        self.applied[fault] = args
        self.calls.append((fault, args))
        return {"landed": True, **args}

    def drain_nodes(self, *, count: int, selector: dict[str, str] | None, deadline_s: float,
                    reason: str, replace: bool, replace_delay_s: float,
                    record: dict[str, Any]) -> dict[str, Any]:
        return self._apply("drain", record, count=count)

    def throttle_registry_pulls(self, *, rate_bps: float, latency_ms: float, error_rate: float,
                                image_mb: float, restart_workers: list[str] | None,
                                record: dict[str, Any]) -> dict[str, Any]:
        return self._apply("throttle", record, rate_bps=rate_bps)

    def saturate_network(self, *, nodes: list[str], bandwidth_bps: float, loss_pct: float,
                         latency_ms: float, flood: bool, partition: bool, flood_s: float,
                         record: dict[str, Any], queue_ms: float = 100.0) -> dict[str, Any]:
        if "worker-9" in nodes:
            raise FaultFailed("fake: no effect measured on worker-9")
        return self._apply("network", record, nodes=list(nodes), bandwidth_bps=bandwidth_bps)

    def restart_with_env(self, *, nodes: list[str], env: dict[str, str], wait_s: float,
                         record: dict[str, Any]) -> dict[str, Any]:
        record["undo"] = {"kind": "node_env", "nodes": list(nodes), "vars": sorted(env)}
        for node in nodes:
            self.env.setdefault(node, {}).update(env)
        self.calls.append(("restart_with_env", {"nodes": list(nodes), "env": dict(env)}))
        return {"landed": True, "env_seen": self.node_env(nodes, list(env))}

    def cut_network(self, *, nodes: list[str], record: dict[str, Any]) -> dict[str, Any]:
        record["undo"] = {"kind": "blackout", "nodes": list(nodes)}
        self.cut |= set(nodes)
        if self.blackout_kills:  # the GCS gives up on them; their raylets keep running
            for i, wid in enumerate(list(self.worker_ids)):
                if f"worker-{i + 1}" in nodes:
                    self.dead_alive_raylet.add(wid)
                    self.worker_ids[i] = f"{i + 1:02d}" * 10 + f"{len(self.dead_alive_raylet):08d}"
        self.calls.append(("cut_network", list(nodes)))
        return {"landed": True, "cut_at": time.time()}

    def restore_network(self, record: dict[str, Any]) -> dict[str, Any]:
        self.cut.clear()
        self.calls.append(("restore_network", None))
        return {"undone": True}

    def resize_dev_shm(self, *, nodes: list[str], size_mb: float,
                       record: dict[str, Any]) -> dict[str, Any]:
        return self._apply("dev_shm", record, nodes=list(nodes), size_mb=size_mb)

    def undo(self, record: dict[str, Any]) -> dict[str, Any]:
        kind = (record.get("undo") or {}).get("kind")
        self.calls.append(("undo", kind))
        if kind == "node_env":
            for node in record["undo"]["nodes"]:
                for var in record["undo"]["vars"]:
                    self.env.get(node, {}).pop(var, None)
        if kind == "blackout":
            self.restore_network(record)
        if kind == "ensure_head":
            back = self.wait_head_back({"pid": record["undo"]["old_pid"]}, self.undo_wait_s)
            if not back["back"]:
                from raychaos.errors import NotRecovered

                raise NotRecovered("fake: the head did not come back")
        self.applied.pop(str(kind), None)
        return {"undone": True}


def from_spec(spec: Any, state_root: Any = None) -> FakeTarget:
    """The ``RAYCHAOS_TARGET_FACTORY`` hook: a FakeTarget shaped by environment variables
    (``RAYCHAOS_FAKE`` = JSON keyword arguments of :class:`FakeTarget`)."""
    import os

    return FakeTarget(**json.loads(os.environ.get("RAYCHAOS_FAKE", "{}")))
