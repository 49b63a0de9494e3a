"""The glue between the Kubernetes target and the RayJob/RayService it was named by.

Why not in ``target.py``: the target is a facade over RayCluster mechanics and is being split;
what a named workload adds — resolve its RayCluster at connect, follow it to a new one when
KubeRay switches (a RayService upgrade, a RayJob retry), send Serve traffic through the
RayService's Serve Service, and put the workload's status on the timeline — lives here, behind
four calls the target makes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.forward import LocalForward
from raychaos.targets.kubernetes.incluster import use_service_dns
from raychaos.targets.kubernetes.owner import Owner, ServeServiceResolver
from raychaos.targets.kubernetes.raycluster import RayClusterHandle

__all__ = ["Workload"]


class Workload:
    """A RayJob or RayService and the RayCluster it runs on now."""

    def __init__(self, api: ApiSession, ns: str, kind: str, name: str,
                 dashboard_url: str | None = None):
        self.api, self.ns, self.dashboard_url = api, ns, dashboard_url
        self.owner = Owner(api, ns, kind, name)
        self._serve: LocalForward | None = None

    def resolve(self) -> str:
        """The RayCluster behind the workload (TargetUnavailable, one sentence, if none)."""
        return self.owner.resolve()

    def status(self) -> dict[str, Any]:
        return self.owner.status()

    def serve_url(self, pods: Callable[[], list[dict[str, Any]]]) -> str | None:
        """A RayService's Serve, through its Serve Service's selector; None for a RayJob."""
        if self.owner.kind != "rayservice":
            return None
        if self._serve is None:
            self._serve = LocalForward(self.api, self.ns, ServeServiceResolver(self.owner, pods),
                                       "serve").start()
        return self._serve.url

    def events(self, handle: RayClusterHandle) -> tuple[list[dict[str, Any]],
                                                        RayClusterHandle | None]:
        """The workload's timeline events since the last call, and — when KubeRay moved it to
        another RayCluster — a handle on that cluster (the caller closes the old one)."""
        events = self.owner.poll(time.time())
        if self.owner.cluster == handle.name:
            return events, None
        rc = self.api.read(self.api.custom.get_namespaced_custom_object, "ray.io", "v1",
                           self.ns, "rayclusters", self.owner.cluster)
        new = use_service_dns(RayClusterHandle(self.api, self.ns, self.owner.cluster, rc,
                                               self.dashboard_url))
        new.find_token()
        return events, new

    def close(self) -> None:
        if self._serve is not None:
            self._serve.close()
            self._serve = None
