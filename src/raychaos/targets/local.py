"""The embedded local target: a real multi-node Ray cluster of processes on this machine.

``up`` plans a head and N workers (some with logical GPUs and a ``raychaos.io/node-group: gpu``
label), starts the supervisor (:mod:`local_supervisor`) that runs them, and waits until every
node is ALIVE in the GCS. As root on Linux each node is a "pod" with its own network, PID and
mount namespace (:mod:`local_net`, :mod:`local_nodes`); elsewhere it falls back to host mode on
127.0.0.1, where probes that depend on the difference say "not applicable in host mode".

GCS fault tolerance is on by default, on Ray's embedded ``rocksdb`` store (or a Redis given by
address). Workers get a long ``RAY_gcs_rpc_server_reconnect_timeout_s`` as KubeRay sets on its
workers. ``down`` ends every process the target started — by recorded PID and by an environment
marker sweep — and removes its namespaces, links and folders. It never calls ``ray stop``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from raychaos.config import LocalClusterSpec
from raychaos.errors import RollbackFailed, TargetUnavailable
from raychaos.redact import redact_text
from raychaos.results import write_json_atomic
from raychaos.targets.base import NodeInfo
from raychaos.targets.local_faults import LocalFaultsMixin
from raychaos.targets.local_head import HeadMixin
from raychaos.targets.local_jobs import JobsMixin
from raychaos.targets.local_net import PodNetwork, netns_supported
from raychaos.targets.local_plan import DRIVER_RESOURCE, GPU_LABEL, plan_nodes
from raychaos.targets.local_nodes import NodePlan, find_marked, kill_tree, wait_gone

__all__ = ["LocalTarget", "default_state_root"]

STATES = {0: "ALIVE", 1: "DEAD"}


def default_state_root() -> Path:
    return Path(os.environ.get("RAYCHAOS_STATE_ROOT", "/tmp/raychaos"))


class LocalTarget(JobsMixin, HeadMixin, LocalFaultsMixin):
    kind = "local"

    def __init__(self, spec: LocalClusterSpec, state_root: str | Path | None = None,
                 progress: Callable[[str], None] | None = None):
        self.spec = spec
        root = Path(state_root or spec.state_dir or default_state_root())
        self.state_dir = root / spec.name
        self.net = PodNetwork(spec.name, spec.subnet_prefix)
        self.progress = progress or (lambda _msg: None)
        self._gcs_client: Any = None
        self._gcs_client_at = 0.0
        JobsMixin.__init__(self)

    # --- planning --------------------------------------------------------------------------
    @property
    def mode(self) -> str:
        cluster = self._cluster()
        if cluster:
            return cluster["mode"]
        if self.spec.network == "host":
            return "host"
        reason = netns_supported()
        if reason and self.spec.network == "netns":
            raise TargetUnavailable(f"local target: network 'netns' is not possible here: {reason}")
        return "host" if reason else "netns"

    def _plan(self, mode: str) -> list[NodePlan]:
        return plan_nodes(self.spec, self.state_dir, self.net, mode)

    # --- state files -----------------------------------------------------------------------
    def _cluster(self) -> dict[str, Any] | None:
        try:
            return json.loads((self.state_dir / "cluster.json").read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _write_cluster(self, cluster: dict[str, Any]) -> None:
        write_json_atomic(self.state_dir / "cluster.json", cluster)

    def status_file(self) -> dict[str, Any]:
        try:
            return json.loads((self.state_dir / "status.json").read_text())
        except (FileNotFoundError, ValueError):
            return {"supervisor_pid": None, "nodes": {}, "events": []}

    def supervisor_alive(self) -> bool:
        pid = (self._cluster() or {}).get("supervisor_pid")
        if not pid:
            return False
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        cmdline = Path(f"/proc/{pid}/cmdline")
        return not cmdline.exists() or b"local_supervisor" in cmdline.read_bytes()

    @property
    def gcs_address(self) -> str:
        cluster = self._cluster()
        if not cluster:
            raise TargetUnavailable(f"local cluster '{self.spec.name}' is not up "
                                    "(start it with `raychaos local up`)")
        return cluster["gcs_address"]

    def dashboard_url(self) -> str:
        cluster = self._cluster()
        if not cluster:
            raise TargetUnavailable(f"local cluster '{self.spec.name}' is not up")
        return cluster["dashboard_url"]

    # --- lifecycle -------------------------------------------------------------------------
    def is_up(self) -> bool:
        return self._cluster() is not None and self.supervisor_alive()

    def up(self, timeout: float = 240.0) -> dict[str, Any]:
        """Start the cluster (idempotent) and wait until every node is ALIVE."""
        if self.is_up():
            self.progress(f"local cluster '{self.spec.name}' is already up")
            return self.status()
        if self._cluster() is not None:
            self.down()  # a stale cluster from a crash: clear it first
        mode = self.mode
        plans = self._plan(mode)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "nodes").mkdir(exist_ok=True)
        head = plans[0]
        cluster = {
            "name": self.spec.name, "mode": mode, "spec": _spec_dict(self.spec),
            "gcs_address": f"{head.ip}:{head.ports['gcs']}",
            "dashboard_url": f"http://{head.ip}:{head.ports['dashboard']}",
            "head_restart_delay_s": self.spec.head_restart_delay_s,
            "gcs_storage": self.spec.gcs_storage, "created_at": time.time(),
            "nodes": [{"plan": p.to_dict(), "desired": True, "replace_delay_s": 2.0}
                      for p in plans],
        }
        try:
            if mode == "netns":
                for plan in plans:
                    self.net.ensure_node(plan.name, plan.index)
            self._write_cluster(cluster)
            self.progress(f"starting local cluster '{self.spec.name}' ({mode} mode): "
                          f"head + {self.spec.workers} workers, "
                          f"{self.spec.gpu_workers} with GPUs")
            log = open(self.state_dir / "supervisor.log", "ab")  # noqa: SIM115
            sup = subprocess.Popen([sys.executable, "-m", "raychaos.targets.local_supervisor",
                              str(self.state_dir)], stdout=log, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, start_new_session=True,
                             env={**os.environ, "PYTHONPATH": _src_path()})
            log.close()
            cluster["supervisor_pid"] = sup.pid
            self._write_cluster(cluster)
            self._wait_all_alive(timeout)
        except BaseException:
            self.down()
            raise
        return self.status()

    def _wait_all_alive(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        want = self.spec.workers + 1
        shown = -1
        while time.monotonic() < deadline:
            if not self.supervisor_alive():
                raise TargetUnavailable(f"local cluster '{self.spec.name}': the supervisor "
                                        f"exited; see {self.state_dir / 'supervisor.log'}")
            try:  # a GCS still starting up (or a loaded box) may miss a deadline: ask again
                alive = [n for n in self.nodes(timeout=2.0) if n.state == "ALIVE"] \
                    if self.gcs_alive(1.0) else []
            except Exception:
                alive = []
            if len(alive) != shown:
                shown = len(alive)
                self.progress(f"  {shown}/{want} nodes alive")
            if len(alive) >= want:
                return
            time.sleep(0.5)
        raise TargetUnavailable(f"local cluster '{self.spec.name}' did not come up within "
                                f"{timeout:.0f}s; node logs are in {self.state_dir / 'nodes'}")

    def down(self) -> dict[str, Any]:
        """End every process this cluster started and remove its namespaces and folders."""
        status = self.status_file()
        killed: list[int] = []
        sup = (self._cluster() or {}).get("supervisor_pid")
        if sup and self.supervisor_alive():
            os.kill(sup, signal.SIGTERM)
            if wait_gone([sup], timeout=30):
                killed += kill_tree(sup)
        for entry in status.get("nodes", {}).values():
            if entry.get("pid"):
                killed += kill_tree(entry["pid"])
        for proc in find_marked(self.spec.name):
            killed += kill_tree(proc.pid)
        left = wait_gone(killed, timeout=10)
        self.net.destroy()
        for plan in self._plan_from_file():
            shutil.rmtree(plan.mount_point, ignore_errors=True)
        shutil.rmtree(self.state_dir, ignore_errors=True)
        self._gcs_client = None
        return {"killed": sorted(set(killed)), "left": left}

    def _plan_from_file(self) -> list[NodePlan]:
        cluster = self._cluster()
        return [NodePlan(**n["plan"]) for n in cluster["nodes"]] if cluster else []

    def leftovers(self) -> dict[str, list[Any]]:
        """What of this cluster still exists on the machine (empty lists after ``down``)."""
        return {"processes": [p.pid for p in find_marked(self.spec.name)],
                "namespaces": self.net.namespaces(), "links": self.net.links(),
                "state_dir": [str(self.state_dir)] if self.state_dir.exists() else []}

    def status(self) -> dict[str, Any]:
        cluster = self._cluster()
        if not cluster:
            return {"name": self.spec.name, "up": False}
        nodes = self.nodes(timeout=1.0) if self.gcs_alive(0.5) else []
        return {"name": self.spec.name, "up": self.supervisor_alive(), "mode": cluster["mode"],
                "gcs_address": cluster["gcs_address"], "dashboard_url": cluster["dashboard_url"],
                "gcs_storage": cluster["gcs_storage"],
                "processes": {n: e for n, e in self.status_file().get("nodes", {}).items()},
                "nodes": [n.to_dict() for n in nodes]}

    # --- Target protocol -------------------------------------------------------------------
    def connect(self) -> None:
        if not self.is_up():
            raise TargetUnavailable(f"local cluster '{self.spec.name}' is not up "
                                    "(start it with `raychaos local up`)")
        if not self.gcs_alive(2.0):
            raise TargetUnavailable(f"local cluster '{self.spec.name}': the GCS at "
                                    f"{self.gcs_address} does not answer")

    def close(self) -> None:
        self._gcs_client = None

    def run_lock(self) -> Any:
        """The one-run-at-a-time lock of this cluster: a file in its state folder."""
        from raychaos.locking import RunLock

        return RunLock(self.state_dir / "run.lock", f"local cluster '{self.spec.name}'")

    def describe(self) -> dict[str, Any]:
        cluster = self._cluster() or {}
        return {"kind": "local", "name": self.spec.name, "mode": cluster.get("mode"),
                "gcs_address": cluster.get("gcs_address"),
                "dashboard_url": cluster.get("dashboard_url"),
                "gcs_fault_tolerance": self.spec.gcs_storage != "none",
                "gcs_storage": self.spec.gcs_storage, "workers": self.spec.workers,
                "gpu_workers": self.spec.gpu_workers, "state_dir": str(self.state_dir),
                "redis_address": redact_text(self.spec.redis_address or "") or None}

    def _client(self) -> Any:
        from ray._raylet import GcsClient

        if self._gcs_client is None:
            self._gcs_client = GcsClient(address=self.gcs_address)
        return self._gcs_client

    def gcs_alive(self, timeout: float = 0.5) -> bool:
        try:
            self._client().get_all_node_info(timeout=timeout)
            return True
        except Exception:
            # a GCS restarted without persistence has a new cluster ID, which a client made
            # for the old one never accepts: make a new client next time
            self._gcs_client = None
            return False

    def nodes(self, timeout: float = 1.0) -> list[NodeInfo]:
        infos = self._client().get_all_node_info(timeout=timeout)
        names = {p.ip: p.name for p in self._plan_from_file()}
        draining: dict[Any, Any] = {}
        try:
            draining = self._client().get_draining_nodes(timeout=timeout) or {}
        except Exception:
            pass
        # get_draining_nodes keys are not the NodeID objects get_all_node_info uses: compare hex
        draining_ids = {k.hex() if isinstance(k, bytes) or hasattr(k, "binary") else str(k)
                        for k in draining}
        out = []
        for node_id, info in infos.items():
            state = STATES.get(int(info.state), str(info.state))
            if state == "ALIVE" and node_id.hex() in draining_ids:
                state = "DRAINING"
            resources = dict(info.resources_total)
            out.append(NodeInfo(
                node_id=node_id.hex(), address=info.node_manager_address,
                name=names.get(info.node_manager_address, info.node_manager_address)
                if self.mode == "netns" else info.node_manager_address,
                state=state, is_head=bool(info.is_head_node),
                gpus=float(resources.get("GPU", 0.0)), cpus=float(resources.get("CPU", 0.0)),
                labels={k: v for k, v in dict(info.labels).items()}))
        return out

    def metrics_texts(self, timeout: float = 0.5) -> list[str]:
        """Each alive node's Prometheus metrics (object store, spill, resources)."""
        import urllib.request

        port = 8080 if self.mode == "netns" else None
        texts = []
        for plan in self._plan_from_file():
            p = plan.ports.get("metrics", port)
            if not p:
                continue
            try:
                with urllib.request.urlopen(f"http://{plan.ip}:{p}/metrics", timeout=timeout) as r:
                    texts.append(r.read().decode(errors="replace"))
            except OSError:
                continue
        return texts

    def cluster_events(self, since: float) -> list[dict[str, Any]]:
        """What the supervisor did after ``since`` (node exits, restarts, pulls), oldest first."""
        return [e for e in self.status_file().get("events", []) if e.get("ts", 0) > since]

    def serve_url(self, port: int = 8000) -> str:
        """A worker's Serve proxy: it keeps serving while the head is down, as the pods behind
        a RayService's serve Service do."""
        plans = [p for p in self._plan_from_file() if p.role == "worker"]
        cpu = [p for p in plans if not p.gpus] or plans
        if not cpu or self.mode != "netns":
            return f"http://{(cpu[0].ip if cpu else '127.0.0.1')}:{port}"
        return f"http://{cpu[0].ip}:{port}"

    def undo(self, record: dict[str, Any]) -> dict[str, Any]:
        undo = record.get("undo") or {}
        kind = undo.get("kind")
        if kind == "ensure_head":
            if not self.is_up():
                return {"undone": True, "note": "cluster is down; nothing to restore"}
            now = self.head_identity()
            if now["pid"] == undo.get("old_pid") and _alive(now["pid"]) \
                    and now["state"] == "running" and self.gcs_alive(1.0):
                # interrupted (or crashed) before the kill: the old head is still serving
                return {"undone": True, "note": "the head was never killed", "pid": now["pid"]}
            result = self.wait_head_back({"pid": undo.get("old_pid")}, timeout=120)
            if not result["back"]:
                raise RollbackFailed(f"local cluster '{self.spec.name}': the head did not come "
                                     "back within 120 s; it is still down")
            return {"undone": True, **result}
        if not kind:
            return {"undone": True, "note": "nothing was changed"}
        return self.undo_local_fault(record)


def _alive(pid: int | None) -> bool:
    try:
        return bool(pid) and Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] \
            != "Z"
    except (OSError, IndexError):
        return False


def _spec_dict(spec: LocalClusterSpec) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(spec)


def _src_path() -> str:
    here = Path(__file__).resolve().parents[2]
    existing = os.environ.get("PYTHONPATH")
    return f"{here}{os.pathsep}{existing}" if existing else str(here)
