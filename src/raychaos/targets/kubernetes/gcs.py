"""The monitor's question to a KubeRay cluster's GCS: asked over gRPC, through raychaos's own
port-forward to the head pod's GCS port, with the same :class:`GcsProbe` the local target uses.

Why not the dashboard alone: the dashboard answers "is the GCS up" and lists the node table, but
a GCS restored from Redis lists the old workers ALIVE at once — only a raylet's own resource
report to the *new* GCS incarnation shows it is back (re-registration), and the dashboard does
not say which raylets reported. ``GcsProbe.ask(reports=True)`` does, as it does locally. The
port-forward re-resolves the head pod per connection, so after a head replacement gRPC's
reconnect reaches the new pod; a connection that finds no Running head is closed at once (an
outage, as a client sees it).

When the probe cannot be built (Ray's generated protos missing), or a user gave
``dashboard_url`` (the GCS port may not be reachable then), the dashboard answers instead and
re-registration stays unknown (``reported`` None, never a pass).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from raychaos.targets.base import NodeInfo, Observation

if TYPE_CHECKING:
    from raychaos.targets.gcs_probe import GcsProbe
    from raychaos.targets.kubernetes.raycluster import RayClusterHandle

__all__ = ["GCS_PORT", "GcsObserver", "gcs_port"]

GCS_PORT = 6379


def gcs_port(raycluster: dict[str, Any]) -> int:
    """The head's GCS port: ``headGroupSpec.rayStartParams.port`` (KubeRay's default 6379)."""
    params = (((raycluster.get("spec") or {}).get("headGroupSpec") or {})
              .get("rayStartParams") or {})
    port = str(params.get("port", GCS_PORT))
    return int(port) if port.isdigit() else GCS_PORT


class GcsObserver:
    """One GcsProbe over the handle's ``gcs`` port-forward, made at the first question."""

    def __init__(self, handle: RayClusterHandle):
        self.handle = handle
        self._probe: GcsProbe | None = None
        self.unavailable: str | None = None  # why the gRPC path is not used (then: dashboard)
        try:  # on the connecting thread, before the monitor's first question (import lock)
            from raychaos.targets.gcs_probe import GcsProbe

            GcsProbe.load_protos()
        except ImportError as exc:  # Ray's protos: the dashboard answers instead
            self.unavailable = f"no GCS client ({exc})"

    def _get(self) -> GcsProbe | None:
        if self._probe is None and self.unavailable is None:
            if self.handle.given_url:
                self.unavailable = "dashboard_url given: the GCS is asked through it"
                return None
            try:
                from raychaos.targets.gcs_probe import GcsProbe
            except ImportError as exc:  # Ray's protos: the dashboard answers instead
                self.unavailable = f"no GCS client ({exc})"
                return None
            url = self.handle.forward("gcs").url
            self._probe = GcsProbe(url.removeprefix("http://"), token=self.handle.dashboard.token)
        return self._probe

    def observe(self, deadline_s: float) -> Observation:
        probe = self._get()
        if probe is None:
            return self._by_dashboard(deadline_s)
        answer = probe.ask(deadline_s=deadline_s, reports=True)
        if not answer.up:
            late = (answer.error or "").startswith("DEADLINE_EXCEEDED")
            return Observation(False, error=answer.error, latency_s=answer.latency_s, late=late)
        reported = None if answer.reported is None else frozenset(
            node_id for node_id, has in answer.reported.items() if has)
        return Observation(True, nodes=self._named(answer.nodes), latency_s=answer.latency_s,
                           reported=reported, incarnation=answer.incarnation)

    def _named(self, nodes: Any) -> list[NodeInfo]:
        """GCS rows named after the pods at their addresses (a DEAD one too, as in
        :meth:`RayClusterHandle.nodes`); a node whose pod is terminating reads DRAINING, as in
        the dashboard's node table."""
        by_ip = {p["status"].get("podIP"): p for p in self.handle.pods() if p.get("status")}
        out = []
        for n in nodes:
            at = by_ip.get(n.address)
            pod = at if n.state == "ALIVE" else None
            state = "DRAINING" if pod is not None and "deletionTimestamp" in pod["metadata"] \
                else n.state
            labels = {**((pod or {}).get("metadata", {}).get("labels") or {}), **n.labels}
            out.append(NodeInfo(node_id=n.node_id, address=n.address, state=state,
                                name=at["metadata"]["name"] if at else (n.name or n.address),
                                is_head=n.is_head, gpus=n.resources.get("GPU", 0.0),
                                cpus=n.resources.get("CPU", 0.0), labels=labels,
                                resources=dict(n.resources)))
        return out

    def _by_dashboard(self, deadline_s: float) -> Observation:
        """The dashboard's GCS check (a timeout is ``late``, not down) and Ray's node table;
        which raylets re-registered is not known this way (``reported`` None)."""
        t0 = time.monotonic()
        up, why, late = self.handle.dashboard.gcs_health(deadline_s)
        if not up:
            return Observation(False, error=why or "the GCS did not answer", late=late,
                               latency_s=time.monotonic() - t0)
        try:  # within what is left of the deadline: a slow node table is unknown, not late
            nodes = self.handle.nodes(max(deadline_s - (time.monotonic() - t0), 0.05))
        except Exception:  # noqa: BLE001 - the GCS answered; the node table did not in time
            return Observation(True, latency_s=time.monotonic() - t0)
        return Observation(True, nodes=nodes, latency_s=time.monotonic() - t0)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None
