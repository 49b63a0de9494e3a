"""How one local Ray node ("pod") is started, found and killed.

A node is one ``ray start --block`` process. With per-node namespaces it runs as PID 1 of its
own PID and mount namespace inside its own network namespace: it sees only its own processes and
its own ``/tmp/rc-<tag>`` (a bind mount of its folder), exactly as a container would, and killing
it (``unshare --kill-child``) takes every process of the node with it, agents included. A pod
also gets its own ``/dev/shm`` and spill directory (:mod:`.storage`). Every
process also carries ``RAYCHAOS_NODE=<cluster>/<node>`` in its environment, so a sweep can find
anything a crash left behind. Nothing here ever calls ``ray stop``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from raychaos.targets.local import cpu
from raychaos.targets.local.storage import shm_mount

__all__ = ["MARKER", "NodePlan", "find_child", "find_marked", "kill_tree", "pid_alive",
           "process_matches", "start_node", "wait_gone"]

MARKER = "RAYCHAOS_NODE"
WORKER_NICENESS = 5


@dataclass(frozen=True)
class NodePlan:
    """Everything needed to (re)start one node; stored in cluster.json."""

    name: str
    index: int
    role: str  # "head" | "worker"
    ip: str
    netns: str | None
    node_dir: str
    mount_point: str
    cpus: float
    gpus: float
    memory_bytes: int
    object_store_bytes: int
    labels: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    shm_bytes: int = 0  # the pod's own /dev/shm (a tmpfs); 0: the host's
    spill_dir: str = ""  # --object-spilling-directory as the pod sees it; "": Ray's default
    cpu_request: float = 1.0  # the pod's weight against the others (:mod:`.cpu`)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _ray_args(plan: NodePlan, gcs_address: str) -> list[str]:
    ray = str(Path(sys.executable).with_name("ray"))
    args = [ray, "start", "--block", "--disable-usage-stats",
            "--node-ip-address", plan.ip,
            "--num-cpus", str(int(plan.cpus)), "--num-gpus", str(int(plan.gpus)),
            "--memory", str(plan.memory_bytes),
            "--object-store-memory", str(plan.object_store_bytes),
            "--temp-dir", plan.mount_point]
    if plan.role == "head":
        args += ["--head", "--port", str(plan.ports.get("gcs", 6379)),
                 "--dashboard-host", "0.0.0.0" if plan.netns else plan.ip,
                 "--dashboard-port", str(plan.ports.get("dashboard", 8265)),
                 "--include-dashboard", "true"]
    else:
        args += ["--address", gcs_address]
    if plan.spill_dir:
        args += ["--object-spilling-directory", plan.spill_dir]
    if plan.labels:
        args += ["--labels", json.dumps(plan.labels)]
    if plan.resources:
        args += ["--resources", json.dumps(plan.resources)]
    for flag, key in (("--dashboard-agent-listen-port", "agent"),
                      ("--metrics-export-port", "metrics"),
                      ("--runtime-env-agent-port", "runtime_env"),
                      ("--dashboard-agent-grpc-port", "agent_grpc"),
                      ("--ray-client-server-port", "client"),
                      ("--min-worker-port", "min_worker"),
                      ("--max-worker-port", "max_worker")):
        if key in plan.ports:
            args += [flag, str(plan.ports[key])]
    return args


def node_env(plan: NodePlan, cluster: str) -> dict[str, str]:
    env = dict(os.environ)
    for key in list(env):
        if key.startswith("RAY_") and key not in plan.env:
            env.pop(key)  # a user's RAY_ADDRESS etc. must not leak into our nodes
    bindir = str(Path(sys.executable).parent)
    env.update({
        "PATH": bindir + os.pathsep + env.get("PATH", "/usr/bin:/bin"),
        # Ray enables token auth as soon as ~/.ray/auth_token exists; say what we want.
        "RAY_AUTH_MODE": "disabled",
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONUNBUFFERED": "1",
        MARKER: f"{cluster}/{plan.name}",
    })
    env.update(plan.env)
    return env


def start_node(plan: NodePlan, cluster: str, gcs_address: str, log_path: Path
               ) -> subprocess.Popen[bytes]:
    """Start the node; returns the Popen whose PID (and process group) owns the whole node."""
    node_dir = Path(plan.node_dir)
    node_dir.mkdir(parents=True, exist_ok=True)
    (node_dir / "ray_current_cluster").unlink(missing_ok=True)  # stale after a kill
    ray_cmd = _ray_args(plan, gcs_address)
    if plan.netns:
        Path(plan.mount_point).mkdir(parents=True, exist_ok=True)
        # --rbind: the node folder's own mounts (a spill disk) come along into the pod
        steps = ['mount --rbind "$0" "$1"']
        if plan.shm_bytes:
            steps.append(shm_mount(plan.shm_bytes))  # the pod's own /dev/shm, as on Kubernetes
        cmd = ["ip", "netns", "exec", plan.netns,
               "unshare", "--mount", "--pid", "--fork", "--mount-proc",
               "--kill-child=SIGKILL", "--propagation", "private", "--",
               "sh", "-c", " && ".join([*steps, 'shift && exec "$@"']),
               str(node_dir), plan.mount_point, *ray_cmd]
    else:
        cmd = ray_cmd
    groups = cpu.cpu_groups() if plan.netns else None
    if groups is not None:
        # the pod's CPU request, as a cgroup: the whole pod weighs what it asks for
        group = cpu.pod_group(cluster, plan.name)
        groups.ensure(group, cpu.shares_for(plan.cpu_request))
        cmd = groups.join_command(group, cmd)
    elif plan.role != "head":
        # Without CPU groups: on Kubernetes the head pod has CPU of its own (requests); on one
        # small box the workers, which carry all the load, would starve a restarting head
        # until Ray's fixed waits run out. A lower priority plays the part of the request.
        cmd = ["nice", "-n", str(WORKER_NICENESS), *cmd]
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=node_env(plan, cluster),
                                start_new_session=True, cwd=str(node_dir))
    finally:
        log.close()


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Signal a node's process group and every descendant we can see; returns PIDs hit."""
    hit: list[int] = []
    try:
        proc = psutil.Process(pid)
        descendants = proc.children(recursive=True)
    except psutil.Error:
        descendants = []
    try:
        os.killpg(pid, sig)
        hit.append(pid)
    except (ProcessLookupError, PermissionError):
        pass
    for child in descendants:
        try:
            child.send_signal(sig)
            hit.append(child.pid)
        except psutil.Error:
            pass
    return hit


def find_marked(cluster: str, node: str | None = None) -> list[psutil.Process]:
    """Processes whose environment says they belong to this cluster (or one node of it)."""
    want = f"{cluster}/{node}" if node else f"{cluster}/"
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            value = proc.environ().get(MARKER, "")
        except (psutil.Error, OSError):
            continue
        if (node and value == want) or (not node and value.startswith(want)):
            found.append(proc)
    return found


def find_child(pid: int, name: str) -> psutil.Process | None:
    """The first descendant of ``pid`` whose process name is ``name`` (e.g. gcs_server)."""
    try:
        for child in psutil.Process(pid).children(recursive=True):
            try:
                if child.name() == name:
                    return child
            except psutil.Error:
                continue
    except psutil.Error:
        return None
    return None


def wait_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    """Wait until none of ``pids`` exists; returns those still alive at the deadline."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if pid_alive(p)]
        if alive:
            time.sleep(0.1)
    return alive


def pid_alive(pid: int | None) -> bool:
    """The process exists and is not a zombie."""
    if not pid:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def process_matches(pid: int | None, needle: bytes) -> bool:
    """``pid`` is alive and its command line contains ``needle``: still the process we
    started, not a recycled PID of someone else's."""
    if not pid_alive(pid):
        return False
    try:
        return needle in " ".join(psutil.Process(pid).cmdline()).encode()
    except psutil.Error:
        return False
