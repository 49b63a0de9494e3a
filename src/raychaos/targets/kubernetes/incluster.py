"""In the cluster, the dashboard is a Service's DNS name away: no port-forward.

Why: a game day scheduled as a CronJob (``raychaos schedule``) runs in a pod; there the head
Service's cluster DNS name (``<head Service>.<namespace>.svc``) is how KubeRay's own submitter
reaches the dashboard, it follows the head across replacements by itself, and it needs no
``pods/portforward`` permission for the dashboard. ``RAYCHAOS_DASHBOARD=service-dns`` (set by
the schedule's manifests) turns it on; an explicit ``dashboard_url`` still wins.
"""

from __future__ import annotations

import os

from raychaos.targets.kubernetes.raycluster import DASHBOARD_PORT, RayClusterHandle

__all__ = ["use_service_dns"]


def use_service_dns(handle: RayClusterHandle) -> RayClusterHandle:
    """Point ``handle``'s dashboard at the head Service's DNS name when asked to."""
    if os.environ.get("RAYCHAOS_DASHBOARD") == "service-dns" and not handle.given_url:
        handle.given_url = (f"http://{handle.head_service_name()}.{handle.ns}.svc:"
                            f"{DASHBOARD_PORT}")
    return handle
