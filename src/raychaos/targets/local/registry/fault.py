"""Throttle image pulls of the local target: a registry behind a real kernel shaper.

The fault starts the registry (:mod:`local_registry`, its own process) on the bridge gateway,
shapes the registry's replies with an HTB class on the bridge's egress matched by the registry's
TCP source port (u32) — pod-to-pod traffic is bridged and never touches that qdisc — and sets
``image`` in cluster.json so every node (re)start pulls first. Optionally it restarts workers so
their pull happens under the throttle. Proof: a pull measured from a pod at close to ``rate``,
and the shaped class's byte counter. Latency needs netem: refused where the kernel lacks it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from raychaos.errors import FaultFailed, NothingMatched, RollbackFailed
from raychaos.results.store import checkpoint
from raychaos.targets.local.cluster import LocalCluster
from raychaos.targets.local.network.shaping import add_port_htb, del_root_qdisc, sh
from raychaos.targets.local.nodes import process_matches
from raychaos.targets.local.registry.server import pull_image

__all__ = ["REGISTRY_SCRIPT", "start_registry", "throttle_registry_pulls",
           "undo_registry_throttle"]

REGISTRY_SCRIPT = str(Path(__file__).with_name("server.py"))
IMAGE_NAME = "raychaos/ray-node:flt"


def start_registry(cluster: LocalCluster, image_mb: float, error_rate: float = 0.0,
                   undo: dict[str, Any] | None = None,
                   record: dict[str, Any] | None = None) -> dict[str, Any]:
    """Start the registry process on the bridge gateway; its PID, address and image.

    With ``undo``/``record`` the PID goes to the ledger as soon as the process exists, before
    waiting for it to listen: a crash in between must not orphan it.
    """
    host = cluster.net.gateway
    with socket.socket() as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    log = open(cluster.state_dir / "registry.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, REGISTRY_SCRIPT, "serve", host, str(port),
                             str(image_mb), str(error_rate)], stdout=subprocess.PIPE,
                            stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    if undo is not None:
        undo["pid"] = proc.pid
        checkpoint(record or {})
    line = proc.stdout.readline().decode() if proc.stdout else ""
    if "listening" not in line:
        proc.kill()
        raise FaultFailed(f"registry did not start on {host}:{port}: {line!r}")
    return {"pid": proc.pid, "host": host, "port": port,
            "image": f"{host}:{port}/{IMAGE_NAME}"}

def throttle_registry_pulls(cluster: LocalCluster, *, rate_bps: float, error_rate: float,
                            image_mb: float, restart_workers: list[str] | None,
                            record: dict[str, Any], probe_node: str | None = None
                            ) -> dict[str, Any]:
    pods = cluster.pods()
    restart = list(restart_workers or [])
    unknown = [n for n in restart if n not in pods or pods[n]["role"] == "head"]
    if unknown:
        raise NothingMatched(f"throttle_registry_pulls: restart_workers names no worker "
                             f"{unknown[0]!r} (workers: "
                             f"{sorted(n for n in pods if pods[n]['role'] != 'head')})")
    probe = probe_node or next(n for n in pods if pods[n]["role"] != "head")
    bridge = cluster.net.bridge
    undo: dict[str, Any] = {"kind": "registry_throttle", "pid": None, "bridge": bridge,
                            "image": None, "restarted": restart}
    record["undo"] = undo
    server = start_registry(cluster, image_mb, error_rate, undo=undo, record=record)
    undo["pid"] = server["pid"]
    images = cluster.state_dir / "images"
    before = pull_image(server["image"], images / "probe", netns=pods[probe]["netns"])
    undo["qdisc"] = True
    checkpoint(record)
    classes = add_port_htb(bridge, server["port"], rate_bps)
    during = pull_image(server["image"], images / "probe", netns=pods[probe]["netns"])
    counters = sh("tc", "-s", "class", "show", "dev", bridge, "classid", "1:20").stdout
    if during["rate_bps"] > rate_bps * 1.5 or during["rate_bps"] >= before["rate_bps"]:
        raise FaultFailed(f"throttle_registry_pulls: a pull from {probe} ran at "
                          f"{during['rate_bps'] / 1e6:.1f} Mbit/s, not throttled to "
                          f"{rate_bps / 1e6:g} Mbit/s")
    desired = cluster.require()
    desired["image"] = server["image"]
    undo["image"] = server["image"]
    cluster.write(desired)
    evidence: dict[str, Any] = {
        "registry": f"{server['host']}:{server['port']}", "image": server["image"],
        "image_mb": image_mb, "limit_bps": rate_bps, "error_rate": error_rate,
        "probe_node": probe, "pull_before": before, "pull_during": during,
        "rate_ratio": round(during["rate_bps"] / rate_bps, 3),
        "tc_classes": classes, "shaped_class": counters.strip(), "landed": True}
    if restart:
        evidence["restarts"] = _restart_and_watch_pulls(cluster, restart, image_mb, rate_bps)
    return evidence

def _restart_and_watch_pulls(cluster: LocalCluster, names: list[str], image_mb: float,
                             rate_bps: float) -> list[dict[str, Any]]:
    """Stop and re-desire ``names``; wait for their pulls (from the supervisor's events)."""
    since = time.time()
    cluster.set_desired(names, False)
    cluster.wait_stopped(names, 30.0)
    cluster.set_desired(names, True, 0.5)
    budget = image_mb * 8 * 1024 * 1024 / rate_bps * 1.5 * len(names) + 90
    deadline = time.monotonic() + budget
    pulls: dict[str, dict[str, Any]] = {}
    while time.monotonic() < deadline and len(pulls) < len(names):
        for event in cluster.status().get("events", []):
            if event["event"] == "image_pulled" and event["ts"] >= since \
                    and event["node"] in names:
                pulls[event["node"]] = event
        time.sleep(0.5)
    if len(pulls) < len(names):
        raise FaultFailed(f"throttle_registry_pulls: restarted {names} but saw pulls only "
                          f"for {sorted(pulls)} within {budget:.0f} s")
    return list(pulls.values())

def undo_registry_throttle(cluster: LocalCluster, undo: dict[str, Any]) -> dict[str, Any]:
    desired = cluster.desired()
    if desired and desired.pop("image", None) is not None:
        cluster.write(desired)
    left = []
    if not del_root_qdisc(undo["bridge"], None, kinds=("htb",)):
        left.append(f"htb qdisc on {undo['bridge']}")
    pid = undo.get("pid")
    if pid and _is_registry(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
        deadline = time.monotonic() + 5
        while _is_registry(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_registry(pid):
            left.append(f"registry PID {pid}")
    if desired and cluster.is_up() and undo.get("restarted"):
        cluster.set_desired(undo["restarted"], True)
    if left:
        raise RollbackFailed("registry throttle not fully undone, still applied: "
                             + ", ".join(left))
    return {"undone": True, "image_removed": True, "registry_pid": pid}


def _is_registry(pid: int) -> bool:
    return process_matches(pid, b"registry")
