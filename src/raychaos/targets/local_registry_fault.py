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

from raychaos.errors import ConfigError, FaultFailed, NothingMatched, RollbackFailed
from raychaos.results import checkpoint
from raychaos.targets.local_registry import pull_image
from raychaos.targets.local_shaping import add_port_htb, del_root_qdisc, netem_available, sh

__all__ = ["RegistryFaultMixin", "REGISTRY_SCRIPT"]

REGISTRY_SCRIPT = str(Path(__file__).with_name("local_registry.py"))
IMAGE_NAME = "raychaos/ray-node:flt"


class RegistryFaultMixin:
    """Registry-throttle mechanics of LocalTarget (needs ``_cluster``, ``net``...)."""

    def start_registry(self, image_mb: float, error_rate: float = 0.0,
                       undo: dict[str, Any] | None = None,
                       record: dict[str, Any] | None = None) -> dict[str, Any]:
        """Start the registry process on the bridge gateway; its PID, address and image.

        With ``undo``/``record`` the PID goes to the ledger as soon as the process exists, before
        waiting for it to listen: a crash in between must not orphan it.
        """
        host = self.net.gateway  # type: ignore[attr-defined]
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = probe.getsockname()[1]
        log = open(self.state_dir / "registry.log", "ab")  # type: ignore[attr-defined]  # noqa: SIM115
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

    def throttle_registry_pulls(self, rate_bps: float, latency_ms: float = 0.0,
                                error_rate: float = 0.0, image_mb: float = 32.0,
                                restart_workers: list[str] | None = None,
                                record: dict[str, Any] | None = None,
                                probe_node: str | None = None) -> dict[str, Any]:
        record = {} if record is None else record
        cluster = self._cluster() or {}  # type: ignore[attr-defined]
        if cluster.get("mode") != "netns":
            raise ConfigError(f"throttle_registry_pulls: local cluster '{self.spec.name}' runs "  # type: ignore[attr-defined]
                              "in host mode: shaping the registry path needs netns mode, as root")
        if latency_ms and not netem_available():
            raise ConfigError(f"throttle_registry_pulls: latency_ms={latency_ms:g} needs the tc "
                              "netem qdisc, which this kernel does not have; set latency_ms to 0")
        pods = {n["plan"]["name"]: n["plan"] for n in cluster["nodes"]}
        restart = list(restart_workers or [])
        unknown = [n for n in restart if n not in pods or pods[n]["role"] == "head"]
        if unknown:
            raise NothingMatched(f"throttle_registry_pulls: restart_workers names no worker "
                                 f"{unknown[0]!r} (workers: "
                                 f"{sorted(n for n in pods if pods[n]['role'] != 'head')})")
        probe = probe_node or next(n for n in pods if pods[n]["role"] != "head")
        bridge = self.net.bridge  # type: ignore[attr-defined]
        undo: dict[str, Any] = {"kind": "registry_throttle", "pid": None, "bridge": bridge,
                                "image": None, "restarted": restart}
        record["undo"] = undo
        server = self.start_registry(image_mb, error_rate, undo=undo, record=record)
        undo["pid"] = server["pid"]
        images = self.state_dir / "images"  # type: ignore[attr-defined]
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
        cluster = self._cluster()  # type: ignore[attr-defined]
        cluster["image"] = server["image"]
        undo["image"] = server["image"]
        self._write_cluster(cluster)  # type: ignore[attr-defined]
        evidence: dict[str, Any] = {
            "registry": f"{server['host']}:{server['port']}", "image": server["image"],
            "image_mb": image_mb, "limit_bps": rate_bps, "error_rate": error_rate,
            "probe_node": probe, "pull_before": before, "pull_during": during,
            "rate_ratio": round(during["rate_bps"] / rate_bps, 3),
            "tc_classes": classes, "shaped_class": counters.strip(), "landed": True}
        if restart:
            evidence["restarts"] = self._restart_and_watch_pulls(restart, image_mb, rate_bps)
        return evidence

    def _restart_and_watch_pulls(self, names: list[str], image_mb: float,
                                 rate_bps: float) -> list[dict[str, Any]]:
        """Stop and re-desire ``names``; wait for their pulls (from the supervisor's events)."""
        since = time.time()
        self._set_desired(names, False)  # type: ignore[attr-defined]
        self._wait_stopped(names, 30.0)  # type: ignore[attr-defined]
        self._set_desired(names, True, 0.5)  # type: ignore[attr-defined]
        budget = image_mb * 8 * 1024 * 1024 / rate_bps * 1.5 * len(names) + 90
        deadline = time.monotonic() + budget
        pulls: dict[str, dict[str, Any]] = {}
        while time.monotonic() < deadline and len(pulls) < len(names):
            for event in self.status_file().get("events", []):  # type: ignore[attr-defined]
                if event["event"] == "image_pulled" and event["ts"] >= since \
                        and event["node"] in names:
                    pulls[event["node"]] = event
            time.sleep(0.5)
        if len(pulls) < len(names):
            raise FaultFailed(f"throttle_registry_pulls: restarted {names} but saw pulls only "
                              f"for {sorted(pulls)} within {budget:.0f} s")
        return list(pulls.values())

    def undo_registry_throttle(self, undo: dict[str, Any]) -> dict[str, Any]:
        cluster = self._cluster()  # type: ignore[attr-defined]
        if cluster and cluster.pop("image", None) is not None:
            self._write_cluster(cluster)  # type: ignore[attr-defined]
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
        if cluster and self.is_up() and undo.get("restarted"):  # type: ignore[attr-defined]
            self._set_desired(undo["restarted"], True)  # type: ignore[attr-defined]
        if left:
            raise RollbackFailed("registry throttle not fully undone, still applied: "
                                 + ", ".join(left))
        return {"undone": True, "image_removed": True, "registry_pid": pid}


def _is_registry(pid: int) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return b"local_registry" in cmd and state != "Z"
