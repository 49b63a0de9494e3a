"""The handle every local-target module works on: one embedded cluster's state and its GCS.

A local cluster is described by two files in its state folder — ``cluster.json`` (what should
run: the node plans, ``desired`` flags, the image to pull, written by raychaos) and
``status.json`` (what runs: PIDs, incarnations, events, written by the supervisor) — and reached
through its GCS. :class:`LocalCluster` reads and writes those files and asks the GCS; the
head, jobs, drain, registry and network modules are plain functions over it, so no module needs
to know about another's state and a second process (``raychaos rollback``) gets the same view.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from raychaos.errors import RollbackFailed, TargetUnavailable
from raychaos.results.store import write_json_atomic
from raychaos.targets.base import NodeInfo, Observation
from raychaos.targets.gcs_probe import GcsProbe
from raychaos.targets.local.gcs import GcsAdmin
from raychaos.targets.local.network.pods import PodNetwork
from raychaos.targets.local.nodes import NodePlan, process_matches

__all__ = ["LocalCluster", "Pod"]

STATES = {0: "ALIVE", 1: "DEAD"}
Pod = dict[str, Any]  # a node plan as stored in cluster.json (NodePlan.to_dict())


class LocalCluster:
    """State files, node plans and the GCS of one local cluster (``name`` under ``state_root``)."""

    def __init__(self, name: str, state_dir: Path, net: PodNetwork):
        self.name = name
        self.state_dir = state_dir
        self.net = net
        self._gcs: GcsProbe | None = None
        self._admin: GcsAdmin | None = None
        self._gcs_address = ""

    # --- state files -------------------------------------------------------------------------
    def desired(self) -> dict[str, Any] | None:
        """``cluster.json``, or None when no cluster is set up here."""
        try:
            data: dict[str, Any] = json.loads((self.state_dir / "cluster.json").read_text())
            return data
        except (FileNotFoundError, ValueError):
            return None

    def require(self) -> dict[str, Any]:
        cluster = self.desired()
        if cluster is None:
            raise TargetUnavailable(f"local cluster '{self.name}' is not up "
                                    "(start it with `raychaos local up`)")
        return cluster

    def write(self, cluster: dict[str, Any]) -> None:
        write_json_atomic(self.state_dir / "cluster.json", cluster)

    def status(self) -> dict[str, Any]:
        """``status.json`` as the supervisor last wrote it."""
        try:
            data: dict[str, Any] = json.loads((self.state_dir / "status.json").read_text())
            return data
        except (FileNotFoundError, ValueError):
            return {"supervisor_pid": None, "nodes": {}, "events": []}

    @property
    def mode(self) -> str | None:
        cluster = self.desired()
        return str(cluster["mode"]) if cluster else None

    def plans(self) -> list[NodePlan]:
        cluster = self.desired()
        return [NodePlan(**n["plan"]) for n in cluster["nodes"]] if cluster else []

    def pods(self) -> dict[str, Pod]:
        """Node name -> plan, for faults that need per-node namespaces (netns mode only)."""
        cluster = self.require()
        if cluster.get("mode") != "netns":
            raise TargetUnavailable(f"local cluster '{self.name}' runs in host mode (no network "
                                    "namespaces): this fault needs netns mode, as root")
        return {n["plan"]["name"]: n["plan"] for n in cluster["nodes"]}

    def supervisor_alive(self) -> bool:
        pid = (self.desired() or {}).get("supervisor_pid")
        return isinstance(pid, int) and process_matches(pid, b"supervisor")

    def is_up(self) -> bool:
        return self.desired() is not None and self.supervisor_alive()

    @property
    def gcs_address(self) -> str:
        return str(self.require()["gcs_address"])

    def set_desired(self, names: list[str], desired: bool,
                    replace_delay_s: float | None = None) -> None:
        """Mark nodes wanted (the supervisor starts them) or not (it stops them)."""
        cluster = self.require()
        known = {n["plan"]["name"] for n in cluster["nodes"]}
        missing = [n for n in names if n not in known]
        if missing:
            raise RollbackFailed(f"local cluster '{self.name}' has no node {missing[0]!r} "
                                 "any more: cannot set it desired again")
        for entry in cluster["nodes"]:
            if entry["plan"]["name"] in names:
                entry["desired"] = desired
                if replace_delay_s is not None:
                    entry["replace_delay_s"] = replace_delay_s
        self.write(cluster)

    def wait_stopped(self, names: list[str], timeout: float) -> bool:
        """Wait until the supervisor reports ``names`` stopped or exited; True when they are."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            nodes = self.status().get("nodes", {})
            if all(nodes.get(n, {}).get("state") in ("stopped", "exited", None) for n in names):
                return True
            time.sleep(0.2)
        return False

    def events(self, since: float) -> list[dict[str, Any]]:
        """What the supervisor did after ``since`` (wall clock), oldest first."""
        return [e for e in self.status().get("events", []) if e.get("ts", 0) > since]

    # --- the GCS -----------------------------------------------------------------------------
    def gcs(self) -> GcsProbe:
        """A probe on the current GCS address; one channel, never rebuilt per question."""
        address = self.gcs_address
        if self._gcs is None or address != self._gcs_address:
            self.close()
            self._gcs, self._admin = GcsProbe(address), GcsAdmin(address)
            self._gcs_address = address
        return self._gcs

    def admin(self) -> GcsAdmin:
        """Ray's drain API (faults only, never the sampling loop)."""
        self.gcs()
        assert self._admin is not None
        return self._admin

    def close(self) -> None:
        if self._gcs is not None:
            self._gcs.close()
            self._gcs = None
        if self._admin is not None:
            self._admin.close()
            self._admin = None

    def gcs_alive(self, timeout: float = 0.5) -> bool:
        try:
            return self.gcs().ask(deadline_s=timeout).up
        except TargetUnavailable:
            return False

    def nodes(self, timeout: float = 1.0, draining: bool = False) -> list[NodeInfo]:
        """Every node the GCS knows (dead ones too), named after their pods in netns mode.

        ``draining`` also asks Ray which nodes it is draining (a drain fault's question; it
        goes through Ray's own client, so the monitor does not ask it)."""
        answer = self.gcs().ask(deadline_s=timeout)
        if not answer.up:
            raise TargetUnavailable(f"local cluster '{self.name}': the GCS at "
                                    f"{self.gcs_address} did not answer within {timeout:g} s "
                                    f"({answer.error})")
        drain_ids = self.admin().draining(timeout) if draining else set()
        return self._node_infos(answer.nodes, drain_ids)

    def observe(self, deadline_s: float) -> Observation:
        """One question to the GCS for the monitor (see ``Target.observe``): the node table
        and which raylets reported to this GCS incarnation (``GcsProbe.ask(reports=True)``)."""
        try:
            answer = self.gcs().ask(deadline_s=deadline_s, reports=True)
        except TargetUnavailable as exc:  # no cluster.json: nothing to ask
            return Observation(False, error=str(exc))
        if not answer.up:
            late = (answer.error or "").startswith("DEADLINE_EXCEEDED")
            return Observation(False, error=answer.error, latency_s=answer.latency_s, late=late)
        reported = None if answer.reported is None else frozenset(
            node_id for node_id, has in answer.reported.items() if has)
        return Observation(True, nodes=self._node_infos(answer.nodes, set()),
                           latency_s=answer.latency_s, reported=reported,
                           incarnation=answer.incarnation)

    def _node_infos(self, nodes: Any, drain_ids: set[str]) -> list[NodeInfo]:
        names = {p.ip: p.name for p in self.plans()} if self.mode == "netns" else {}
        out = []
        for n in nodes:
            state = "DRAINING" if n.state == "ALIVE" and n.node_id in drain_ids else n.state
            out.append(NodeInfo(node_id=n.node_id, address=n.address,
                                name=names.get(n.address, n.address), state=state,
                                is_head=n.is_head, gpus=n.resources.get("GPU", 0.0),
                                cpus=n.resources.get("CPU", 0.0), labels=dict(n.labels),
                                resources=dict(n.resources)))
        return out

    def metrics_texts(self, timeout: float = 0.5) -> list[str]:
        """Each node's Prometheus metrics text (object store, spill, resources)."""
        import urllib.request

        default = 8080 if self.mode == "netns" else None
        texts = []
        for plan in self.plans():
            port = plan.ports.get("metrics", default)
            if not port:
                continue
            try:
                with urllib.request.urlopen(f"http://{plan.ip}:{port}/metrics",
                                            timeout=timeout) as resp:
                    texts.append(resp.read().decode(errors="replace"))
            except OSError:
                continue
        return texts


def default_state_root() -> Path:
    return Path(os.environ.get("RAYCHAOS_STATE_ROOT", "/tmp/raychaos"))
