"""Reusing a local cluster that is already up: the same settings, restored, proven clean.

Starting a cluster is the slowest fixed cost of a run on a small box, so a game day, trials and
the test suite run one after another on the cluster that is up — but only when it is the cluster
the experiment asks for, and only once it is proven to be as a fresh one would be:

- **the same settings**: every field of :class:`~raychaos.config.settings.LocalClusterSpec` that
  shapes the processes (workers, GPUs, CPUs, memory, GCS storage, network mode...) equals what
  the cluster was started with; ``head_restart_delay_s``, which the supervisor reads on every
  tick, is set in place. A cluster with other settings is replaced (when no run holds it);
- **restored**: what an earlier run may have left is undone without its ledger — job drivers
  still running (loads, the sentinel's watcher), qdiscs and nft tables of ours on the pod links,
  traffic-flood and registry processes of this cluster, the registry image, nodes still marked
  not desired after a drain; each removal is named in the evidence;
- **proven clean**: every planned node ALIVE (none draining), with the totals its plan gives it
  (CPUs, GPUs, the driver slots), the supervisor reporting each running, no job running — waited
  for within a bound (a replaced node takes a while), else :class:`TargetUnavailable` names what
  is not back.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import psutil

from raychaos.config.settings import LocalClusterSpec
from raychaos.errors import RaychaosError, TargetUnavailable
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.jobs import LocalJobs
from raychaos.targets.local.network.faults import NETPROBE, netfault_leftovers
from raychaos.targets.local.network.shaping import (
    del_root_qdisc,
    nft_table_del,
    nft_tables,
    root_qdisc,
)
from raychaos.targets.local.nodes import kill_tree, wait_gone
from raychaos.targets.local.registry.fault import REGISTRY_SCRIPT

__all__ = ["LIVE", "differences", "leftover_faults", "prove_clean", "restore"]

LIVE = ("head_restart_delay_s",)  # the supervisor reads these on every tick
NOT_SHAPE = ("name", "state_dir", *LIVE)
SECRET = ("redis_address",)
OURS = ("tbf", "htb")


def differences(cluster: LocalCluster, spec: LocalClusterSpec) -> list[str]:
    """What of ``spec`` the running cluster was not started with (empty: it can be reused)."""
    desired = cluster.desired() or {}
    stored = desired.get("spec") or {}
    out = []
    for key, want in asdict(spec).items():
        if key in NOT_SHAPE:
            continue
        if key == "network":
            mode = desired.get("mode")
            if want in ("netns", "host") and want != mode:
                out.append(f"network {mode} (want {want})")
            continue
        have = stored.get(key)
        if have != want:
            out.append(f"{key} differs" if key in SECRET else f"{key} {have!r} (want {want!r})")
    return out


def restore(cluster: LocalCluster, jobs: LocalJobs, spec: LocalClusterSpec) -> list[str]:
    """Undo what earlier runs left (see the module docstring); what was changed, one item
    each. The caller holds the cluster's run lock: nothing here belongs to a live run."""
    done: list[str] = []
    desired = cluster.require()
    changed = False
    for key in LIVE:
        if desired.get(key) != getattr(spec, key):
            desired[key] = getattr(spec, key)
            changed = True
    if desired.pop("image", None) is not None:
        done.append("removed the registry image (nodes pulled it on every start)")
        changed = True
    for entry in desired["nodes"]:
        if not entry.get("desired", True):
            entry.update(desired=True, replace_delay_s=2.0)
            done.append(f"marked {entry['plan']['name']} desired again (a drain's)")
            changed = True
    if changed:
        cluster.write(desired)
    try:
        active = jobs.active_jobs()
    except TargetUnavailable:
        active = []  # the proof asks again and names it
    for job in active:
        jobs.stop_job(job["job_id"])
        done.append(f"stopped job {job['job_id']} ({job['entrypoint'][:48]}), still "
                    f"{job['status']}")
    if desired.get("mode") == "netns":
        done += _sweep_network(cluster)
    done += _sweep_processes(cluster)
    return done


def _sweep_network(cluster: LocalCluster) -> list[str]:
    done = []
    for name, plan in cluster.pods().items():
        for dev, ns in ((cluster.net.host_link(plan["index"]), None),
                        (cluster.net.node_link(plan["index"]), plan["netns"])):
            kind = root_qdisc(dev, ns)
            if kind in OURS and del_root_qdisc(dev, ns, OURS):
                done.append(f"removed a {kind} qdisc on {ns or 'host'}/{dev}")
        if "raychaos" in nft_tables(plan["netns"]) and nft_table_del(plan["netns"]):
            done.append(f"removed nft table raychaos in {name}")
    kind = root_qdisc(cluster.net.bridge)
    if kind in OURS and del_root_qdisc(cluster.net.bridge, None, OURS):
        done.append(f"removed a {kind} qdisc on {cluster.net.bridge}")
    return done


def _our_processes(cluster: LocalCluster) -> list[tuple[int, str]]:
    """Floods (netprobe towards a pod of this cluster) and this cluster's registry processes."""
    ips = {p.ip for p in cluster.plans()} | {cluster.net.gateway}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info.get("cmdline") or []
        if any(script in cmd for script in (NETPROBE, REGISTRY_SCRIPT)) and ips & set(cmd):
            found.append((int(proc.info["pid"]),
                          "registry" if REGISTRY_SCRIPT in cmd else "traffic flood"))
    return found


def _sweep_processes(cluster: LocalCluster) -> list[str]:
    hit: list[int] = []
    done = []
    for pid, what in _our_processes(cluster):
        hit += kill_tree(pid)
        done.append(f"ended {what} process {pid}")
    wait_gone(hit, timeout=5)
    return done


def leftover_faults(cluster: LocalCluster) -> list[str]:
    """Every fault of ours still in effect on this cluster (empty when none); reads only."""
    desired = cluster.desired() or {}
    out = []
    if desired.get("mode") == "netns":
        left = netfault_leftovers(cluster)
        out += [f"qdisc on {dev}" for dev in left["qdiscs"]]
        out += [f"nft table raychaos in {name}" for name in left["nft"]]
    if desired.get("image"):
        out.append("the registry image is set")
    out += [f"{e['plan']['name']} is marked not desired" for e in desired.get("nodes", [])
            if not e.get("desired", True)]
    out += [f"{what} process {pid}" for pid, what in _our_processes(cluster)]
    return out


def _problems(cluster: LocalCluster, jobs: LocalJobs) -> tuple[list[str], dict[str, Any]]:
    """What keeps the cluster from being as a fresh one (empty: clean), and what was seen."""
    plans = cluster.plans()
    try:
        nodes = cluster.nodes(timeout=2.0, draining=True)  # a drain left is not clean
    except RaychaosError as exc:
        return [f"the GCS does not answer ({exc})"], {}
    alive = [n for n in nodes if n.state == "ALIVE"]
    problems = [f"node {n.name} is {n.state}" for n in nodes if n.state == "DRAINING"]
    if len(alive) != len(plans):
        problems.append(f"{len(alive)} of {len(plans)} nodes ALIVE")
    by_name = {n.name: n for n in alive}
    for plan in plans:
        node = by_name.get(plan.name) if cluster.mode == "netns" else None
        if node is None:
            continue
        want = {"CPU": float(plan.cpus), "GPU": float(plan.gpus), **plan.resources}
        have = {k: node.resources.get(k, 0.0) for k in want}
        if any(abs(have[k] - v) > 1e-6 for k, v in want.items() if v or have[k]):
            problems.append(f"{plan.name} has {have} (plan {want})")
    if cluster.mode != "netns":  # host mode: nodes share an address; compare the sums
        for key in ("CPU", "GPU"):
            want_sum = sum(float(p.cpus if key == "CPU" else p.gpus) for p in plans)
            have_sum = sum(n.resources.get(key, 0.0) for n in alive)
            if abs(want_sum - have_sum) > 1e-6:
                problems.append(f"{have_sum:g} {key} alive (plan {want_sum:g})")
    states = {n: e.get("state") for n, e in cluster.status().get("nodes", {}).items()}
    problems += [f"{p.name} is {states.get(p.name)} (supervisor)" for p in plans
                 if states.get(p.name) != "running"]
    try:
        problems += [f"job {j['job_id']} is {j['status']}" for j in jobs.active_jobs()]
    except TargetUnavailable as exc:
        problems.append(str(exc))
    seen = {"nodes_alive": len(alive), "nodes_planned": len(plans),
            "cpus": sum(n.cpus for n in alive), "gpus": sum(n.gpus for n in alive)}
    return problems, seen


def prove_clean(cluster: LocalCluster, jobs: LocalJobs, timeout: float = 120.0,
                say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Wait until the cluster is clean (see the module docstring); evidence, else raise
    TargetUnavailable naming what is not back. A fault still in effect fails at once: it does
    not go away by waiting (:func:`restore` removes them)."""
    t0 = time.monotonic()
    faults = leftover_faults(cluster)
    if faults:
        raise TargetUnavailable(f"local cluster '{cluster.name}' still has faults applied: "
                                f"{'; '.join(faults)} (`raychaos rollback` the run that "
                                "applied them)")
    said = False
    while True:
        problems, seen = _problems(cluster, jobs)
        if not problems:
            return {"clean": True, "faults": [], "waited_s": round(time.monotonic() - t0, 2),
                    **seen}
        if time.monotonic() - t0 > timeout:
            raise TargetUnavailable(
                f"local cluster '{cluster.name}' is not clean {timeout:.0f} s after an earlier "
                f"run: {'; '.join(problems)} (take it down with `raychaos local down --name "
                f"{cluster.name}`)")
        if say is not None and not said and time.monotonic() - t0 > 2.0:
            say(f"  waiting for the cluster to be whole again: {'; '.join(problems)}")
            said = True
        time.sleep(0.5)
