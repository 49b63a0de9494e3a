"""The test bed's own processes: started in their own session (and, as root, in the control
plane's CPU group from their first instruction), their PIDs written where ``down`` finds them,
and stopped — exactly those PIDs, newest first, SIGTERM then SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from raychaos.targets.lock import pid_alive

__all__ = ["ORDER", "control_plane_cpu", "control_plane_group", "start", "stop", "write_pids"]

#: the order the bed starts its processes in (``stop`` goes the other way)
ORDER = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
         "node-agent", "raychaos-kubelet", "sim-nodes", "kuberay-operator")


def control_plane_group(name: str) -> str:
    """The CPU group of bed ``name``'s own processes (etcd, API server, controller-manager,
    scheduler, node agent, kubelet, operator), beside its nodes' groups under the same prefix
    (so the bed's CPU is read, and its groups removed, as one)."""
    from raychaos.testbed.node.agent import world_name
    from raychaos.testbed.node.kubelet import world_cpu_prefix

    return f"{world_cpu_prefix(world_name(name))}control-plane"


def control_plane_cpu(name: str, node_cpus: float) -> tuple[Any, str] | None:
    """Make the control plane's CPU group, weighing as much as all the nodes together
    (``node_cpus``, the sum of their capacities).

    On a real cluster the control plane runs on machines of its own and a kubelet keeps
    system-reserved CPU for itself and the runtime; here they share this box with the pods,
    whose node groups weigh their capacity (14 CPUs' worth on 2 cores). Left in the root
    group, each of these processes weighed one CPU against them, and a head restarting beside
    a task storm took the box for seconds: the API server answered nothing for 10 s and the
    node agent's socket refused the kubelet's port-forwards (Serve requests closed, counted as
    Serve's errors). In a group as heavy as the nodes, the control plane gets up to half the
    box when it needs it, and costs the pods nothing when idle."""
    from raychaos.targets.local.cpu import cpu_groups, shares_for

    groups = cpu_groups()
    if groups is None:
        return None  # not root, or no CPU controller: everything runs ungrouped
    group = control_plane_group(name)
    groups.ensure(group, shares_for(node_cpus))
    return groups, group


def start(root: Path, name: str, argv: list[str], env: dict[str, str] | None = None,
          cpu: tuple[Any, str] | None = None) -> int:
    """Start one of the bed's processes in its own session, in CPU group ``cpu`` (if any)
    from its first instruction (the command's PID is the process's: the shell execs it)."""
    log = root / "logs" / f"{name}.log"
    if cpu is not None:
        groups, group = cpu
        argv = groups.join_command(group, argv)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=root, env=env,
                                start_new_session=True)
    return proc.pid


def write_pids(root: Path, pids: dict[str, int]) -> None:
    (root / "pids.json").write_text(json.dumps(pids))


def stop(pids: dict[str, int], grace_s: float = 10.0) -> list[str]:
    """SIGTERM each started PID (newest first), SIGKILL what outlives ``grace_s``."""
    stopped = []
    for name in reversed([n for n in ORDER if n in pids]):
        pid = pids[name]
        if not pid_alive(pid):
            continue
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + grace_s
        while pid_alive(pid) and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
        if pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(pid)
        stopped.append(name)
    return stopped


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
