"""A tiny real Ray cluster on 127.0.0.1 for the GCS probe bench and its integration test.

Head + N workers, each a ``ray start --block`` process in its own session (so its process
group is the node), its own ``--temp-dir`` and ports of its own from ``base_port`` up (never
Ray's defaults, so it cannot collide with another cluster on the box). GCS fault tolerance on
Ray's embedded rocksdb store unless ``persist=False``. Every PID it starts is recorded, and
``down`` kills exactly those process trees; nothing here calls ``ray stop``. Callers wrap the
whole run in ``flock /tmp/raychaos-cluster.lock``.
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
from typing import Any

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
MB = 1024 * 1024


class MiniCluster:
    def __init__(self, root: str | Path, base_port: int = 7400, workers: int = 1,
                 persist: bool = True, worker_nice: int = 5, ip: str = "127.0.0.2"):
        self.root = Path(root)
        self.base = base_port
        self.workers = workers
        self.persist = persist
        self.worker_nice = worker_nice
        # 127.0.0.2, not 127.0.0.1: Ray swaps "127.0.0.1"/"localhost" for the box's outward IP
        # (services.resolve_ip_for_localhost), and we want every address on loopback
        self.ip = ip
        self.gcs_port = base_port
        self.address = f"{self.ip}:{self.gcs_port}"
        self.procs: dict[str, subprocess.Popen] = {}
        self.started_pids: set[int] = set()
        self.head_starts = 0

    # --- layout ------------------------------------------------------------------------------
    def _ports(self, index: int) -> dict[str, int]:
        b = self.base + 10 + index * 10
        return {"node_manager": b, "object_manager": b + 1, "agent": b + 2, "metrics": b + 3,
                "runtime_env": b + 4, "agent_grpc": b + 5, "client": b + 6,
                "dashboard": b + 7,
                "min_worker": self.base + 200 + index * 100,
                "max_worker": self.base + 200 + index * 100 + 99}

    def temp_dir(self, index: int) -> Path:
        return self.root / f"n{index}"

    def _env(self, index: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        env.update({"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
                    "PYTHONUNBUFFERED": "1",
                    "PATH": str(Path(sys.executable).parent) + os.pathsep
                    + env.get("PATH", "/usr/bin:/bin")})
        if index == 0 and self.persist:
            env["RAY_gcs_storage"] = "rocksdb"
            env["RAY_gcs_storage_path"] = str(self.root / "gcs-store")
        if index > 0:
            env["RAY_gcs_rpc_server_reconnect_timeout_s"] = "600"
        return env

    def _args(self, index: int) -> list[str]:
        p = self._ports(index)
        args = [RAY, "start", "--block", "--disable-usage-stats",
                "--node-ip-address", self.ip, "--num-cpus", "1" if index else "0",
                "--num-gpus", "0", "--memory", str(512 * MB),
                "--object-store-memory", str(80 * MB),
                "--temp-dir", str(self.temp_dir(index)),
                "--node-manager-port", str(p["node_manager"]),
                "--object-manager-port", str(p["object_manager"]),
                "--dashboard-agent-listen-port", str(p["agent"]),
                "--metrics-export-port", str(p["metrics"]),
                "--runtime-env-agent-port", str(p["runtime_env"]),
                "--dashboard-agent-grpc-port", str(p["agent_grpc"]),
                "--min-worker-port", str(p["min_worker"]),
                "--max-worker-port", str(p["max_worker"])]
        if index == 0:
            args += ["--head", "--port", str(self.gcs_port), "--include-dashboard", "false",
                     "--dashboard-port", str(p["dashboard"]),
                     "--ray-client-server-port", str(p["client"])]
        else:
            args += ["--address", self.address,
                     "--labels", json.dumps({"raychaos.io/node-group": "cpu"})]
        return args

    # --- lifecycle ---------------------------------------------------------------------------
    def _start(self, index: int) -> subprocess.Popen:
        name = "head" if index == 0 else f"worker-{index}"
        tmp = self.temp_dir(index)
        tmp.mkdir(parents=True, exist_ok=True)
        cmd = self._args(index)
        if index:
            cmd = ["nice", "-n", str(self.worker_nice), *cmd]
        log = open(self.root / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=self._env(index),
                                    start_new_session=True, cwd=str(tmp))
        finally:
            log.close()
        self.procs[name] = proc
        self.started_pids.add(proc.pid)
        return proc

    def up(self, timeout: float = 120.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.start_head()
            self.wait_gcs(timeout)
            for i in range(1, self.workers + 1):
                self._start(i)
            self.wait_alive(self.workers + 1, timeout)
        except BaseException:
            self.down()
            raise

    def start_head(self) -> subprocess.Popen:
        self.head_starts += 1
        return self._start(0)

    def wait_gcs(self, timeout: float) -> float:
        from raychaos.targets.gcs_probe import GcsProbe

        deadline = time.monotonic() + timeout
        with GcsProbe(self.address) as probe:
            while time.monotonic() < deadline:
                self._check_head()
                if probe.ask(0.5).up:
                    return time.time()
                time.sleep(0.1)
        raise TimeoutError(f"GCS at {self.address} did not answer within {timeout:.0f}s")

    def wait_alive(self, want: int, timeout: float, fresh_head: bool = False) -> None:
        from raychaos.targets.gcs_probe import GcsProbe

        deadline = time.monotonic() + timeout
        with GcsProbe(self.address) as probe:
            while time.monotonic() < deadline:
                self._check_head()
                a = probe.ask(0.5)
                if a.up and len(a.alive) >= want:
                    return
                time.sleep(0.2)
        raise TimeoutError(f"{want} nodes not ALIVE within {timeout:.0f}s; logs in {self.root}")

    def _check_head(self) -> None:
        head = self.procs.get("head")
        if head is not None and head.poll() is not None:
            raise RuntimeError(f"head exited with {head.returncode}; see {self.root}/head.log")

    def gcs_pid(self) -> int | None:
        """The gcs_server under the current head process (found as its descendant)."""
        return self.pid_of("head", "gcs_server")

    def node_id_of(self, index: int) -> str | None:
        """Node ``index``'s node ID (hex), matched by its node-manager port."""
        from raychaos.targets.gcs_probe import GcsProbe

        port = self._ports(index)["node_manager"]
        with GcsProbe(self.address) as probe:
            answer = probe.ask(1.0)
        for node in answer.alive:
            if node.port == port:
                return node.node_id
        return None

    def kill_gcs(self) -> float:
        """SIGKILL gcs_server by PID; returns the wall time of the kill."""
        pid = self.gcs_pid()
        if pid is None:
            raise RuntimeError("no gcs_server under the head")
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        _wait_gone([pid], 5)
        return killed_at

    def kill_head(self) -> None:
        """The rest of the head (a container restart takes the whole pod): its tree."""
        head = self.procs.get("head")
        if head is not None:
            from raychaos.targets.local.nodes import kill_tree

            kill_tree(head.pid)
            try:
                head.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def restart_head(self, delay_s: float = 0.0) -> subprocess.Popen:
        self.kill_head()
        (self.temp_dir(0) / "ray_current_cluster").unlink(missing_ok=True)
        if delay_s:
            time.sleep(delay_s)
        return self.start_head()

    def pid_of(self, name: str, exe: str) -> int | None:
        """The ``exe`` process (raylet, gcs_server) under node ``name`` (head, worker-1)."""
        proc = self.procs.get(name)
        if proc is None:
            return None
        try:
            for child in psutil.Process(proc.pid).children(recursive=True):
                try:
                    if child.name() == exe:
                        return child.pid
                except psutil.Error:
                    continue
        except psutil.Error:
            return None
        return None

    def raylet_logs(self, index: int) -> list[Path]:
        """raylet.out of every session of node ``index`` (the newest session last)."""
        return sorted(self.temp_dir(index).glob("session_*/logs/raylet*.out"),
                      key=lambda p: p.stat().st_mtime)

    def down(self) -> dict[str, Any]:
        from raychaos.targets.local.nodes import kill_tree  # the target's own: group + tree

        hit: list[int] = []
        for proc in self.procs.values():
            hit += kill_tree(proc.pid)
        left = _wait_gone(hit, 15)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=1)
            except subprocess.TimeoutExpired:
                pass
        return {"killed": sorted(set(hit)), "left": left}

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _running(p)]
        if alive:
            time.sleep(0.05)
    return alive


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
