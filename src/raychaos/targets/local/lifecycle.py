"""Bringing a local cluster up and taking it down, leaving nothing behind.

``up`` plans a head and N workers (some with logical GPUs and a ``raychaos.io/node-group: gpu``
label), creates their network namespaces, starts the supervisor (:mod:`.supervisor`) that runs
them, and waits until every node is ALIVE in the GCS. ``down`` ends every process the cluster
started — by recorded PID and by an environment-marker sweep (SIGKILLed raylets leave agents
orphaned) — and removes its namespaces, links, spill disks (mounts, loop devices, throttles)
and folders. Nothing here calls ``ray stop``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from raychaos.config.settings import LocalClusterSpec
from raychaos.errors import TargetUnavailable
from raychaos.targets.local import cpu, storage
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.network.pods import netns_supported
from raychaos.targets.local.nodes import NodePlan, find_marked, kill_tree, wait_gone
from raychaos.targets.local.plan import plan_nodes

__all__ = ["choose_mode", "down", "leftovers", "up"]


def choose_mode(cluster: LocalCluster, spec: LocalClusterSpec) -> str:
    """``netns`` (one network namespace per node, as root on Linux) or ``host``."""
    if cluster.mode:
        return cluster.mode
    if spec.network == "host":
        return "host"
    reason = netns_supported()
    if reason and spec.network == "netns":
        raise TargetUnavailable(f"local target: network 'netns' is not possible here: {reason}")
    return "host" if reason else "netns"


def up(cluster: LocalCluster, spec: LocalClusterSpec, say: Callable[[str], None],
       timeout: float = 240.0) -> None:
    """Start the cluster and wait until every node is ALIVE (the caller checked it is not up)."""
    if cluster.desired() is not None:
        down(cluster)  # a stale cluster from a crash: clear it first
    mode = choose_mode(cluster, spec)
    plans = plan_nodes(spec, cluster.state_dir, cluster.net, mode)
    (cluster.state_dir / "nodes").mkdir(parents=True, exist_ok=True)
    head = plans[0]
    desired: dict[str, Any] = {
        "name": spec.name, "mode": mode, "spec": asdict(spec),
        "gcs_address": f"{head.ip}:{head.ports['gcs']}",
        "dashboard_url": f"http://{head.ip}:{head.ports['dashboard']}",
        "head_restart_delay_s": spec.head_restart_delay_s,
        "gcs_storage": spec.gcs_storage, "created_at": time.time(),
        "nodes": [{"plan": p.to_dict(), "desired": True, "replace_delay_s": 2.0}
                  for p in plans],
    }
    try:
        if mode == "netns":
            for plan in plans:
                cluster.net.ensure_node(plan.name, plan.index)
        cluster.write(desired)
        _attach_disks(cluster, spec, plans, desired)
        say(f"starting local cluster '{spec.name}' ({mode} mode): head + {spec.workers} "
            f"workers, {spec.gpu_workers} with GPUs")
        with open(cluster.state_dir / "supervisor.log", "ab") as log:
            sup = subprocess.Popen([sys.executable, "-m", "raychaos.targets.local.supervisor",
                                    str(cluster.state_dir)], stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   start_new_session=True,
                                   env={**os.environ, "PYTHONPATH": _src_path()})
        desired["supervisor_pid"] = sup.pid
        cluster.write(desired)
        _wait_all_alive(cluster, spec.workers + 1, timeout, say)
    except BaseException:
        down(cluster)
        raise


def _attach_disks(cluster: LocalCluster, spec: LocalClusterSpec, plans: list[NodePlan],
                  desired: dict[str, Any]) -> None:
    """Each worker's spill disk, recorded in cluster.json before each step (down undoes it)."""
    disk = spec.spill_disk
    if not disk.size_mb:
        return
    if not any(p.spill_dir for p in plans):
        raise TargetUnavailable("target.local.spill_disk needs per-node namespaces (netns "
                                "mode, as root); this cluster runs in host mode")
    desired["disks"] = []
    for plan in plans:
        if not plan.spill_dir:
            continue
        record: dict[str, Any] = {"node": plan.name, "cold_cache": disk.cold_cache}
        desired["disks"].append(record)
        storage.attach_spill_disk(cluster.state_dir / "disks" / f"{plan.name}.img",
                                  Path(plan.node_dir) / "spill", disk.size_mb,
                                  disk.write_mbps, disk.read_mbps, record,
                                  lambda: cluster.write(desired))


def _wait_all_alive(cluster: LocalCluster, want: int, timeout: float,
                    say: Callable[[str], None]) -> None:
    deadline = time.monotonic() + timeout
    shown = -1
    while time.monotonic() < deadline:
        if not cluster.supervisor_alive():
            raise TargetUnavailable(f"local cluster '{cluster.name}': the supervisor exited; "
                                    f"see {cluster.state_dir / 'supervisor.log'}")
        try:  # a GCS still starting up (or a loaded box) may miss a deadline: ask again
            alive = [n for n in cluster.nodes(timeout=2.0) if n.state == "ALIVE"]
        except TargetUnavailable:
            alive = []
        if len(alive) != shown:
            shown = len(alive)
            say(f"  {shown}/{want} nodes alive")
        if len(alive) >= want:
            return
        time.sleep(0.5)
    raise TargetUnavailable(f"local cluster '{cluster.name}' did not come up within "
                            f"{timeout:.0f}s; node logs are in {cluster.state_dir / 'nodes'}")


def down(cluster: LocalCluster) -> dict[str, Any]:
    """End every process this cluster started and remove its namespaces and folders."""
    status = cluster.status()
    killed: list[int] = []
    sup = (cluster.desired() or {}).get("supervisor_pid")
    if sup and cluster.supervisor_alive():
        os.kill(sup, signal.SIGTERM)
        if wait_gone([sup], timeout=30):
            killed += kill_tree(sup)
    for entry in status.get("nodes", {}).values():
        if entry.get("pid"):
            killed += kill_tree(entry["pid"])
    for proc in find_marked(cluster.name):
        killed += kill_tree(proc.pid)
    left = wait_gone(killed, timeout=10)
    plans = cluster.plans()
    storage_left = storage.release_disks((cluster.desired() or {}).get("disks") or [],
                                         cluster.state_dir)
    cluster.net.destroy()
    groups = cpu.cpu_groups()
    if groups is not None:  # empty once its processes are gone; leftovers() names one that is not
        for group in groups.existing(cpu.cluster_prefix(cluster.name)):
            groups.remove(group)
    for plan in plans:
        shutil.rmtree(plan.mount_point, ignore_errors=True)
    shutil.rmtree(cluster.state_dir, ignore_errors=True)
    cluster.close()
    return {"killed": sorted(set(killed)), "left": left + storage_left}


def leftovers(cluster: LocalCluster) -> dict[str, list[Any]]:
    """What of this cluster still exists on the machine (empty lists after ``down``)."""
    groups = cpu.cpu_groups()
    return {"processes": [p.pid for p in find_marked(cluster.name)],
            "namespaces": cluster.net.namespaces(), "links": cluster.net.links(),
            "cgroups": groups.existing(cpu.cluster_prefix(cluster.name)) if groups else [],
            # the state folder, and any spill-disk mount or loop device made from it
            "state_dir": ([str(cluster.state_dir)] if cluster.state_dir.exists() else [])
            + [str(d.get("mount") or d.get("loop"))
               for d in storage.leftover_storage(cluster.state_dir)]}


def _src_path() -> str:
    """The folder ``raychaos`` is imported from, for the supervisor's own interpreter."""
    here = str(Path(__file__).resolve().parents[3])
    existing = os.environ.get("PYTHONPATH")
    return f"{here}{os.pathsep}{existing}" if existing else here
