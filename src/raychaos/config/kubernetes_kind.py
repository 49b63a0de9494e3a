"""What ``target.kubernetes.kind`` and ``name`` may be, checked when the settings are built.

Why separate from the settings: the rule (a RayJob or RayService target needs the object's
name, and a name must be one Kubernetes would accept) is shared by the experiment loader, the
``--target`` override and the Kubernetes target, and the config layer may not import targets.
Each problem is one sentence naming the key and the value; the loader adds the file and path.
"""

from __future__ import annotations

import re

__all__ = ["check_name", "check_workload"]

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_WHAT = {"rayjob": "RayJob", "rayservice": "RayService", "raycluster": "RayCluster"}


def check_name(name: str) -> str | None:
    """Why ``name`` cannot be a KubeRay object's name (a DNS-1123 subdomain), or None."""
    if len(name) > 253 or not _NAME.match(name):
        return (f"{name!r} is not a Kubernetes object name (lowercase letters, digits, '-' "
                f"and '.', beginning and ending with a letter or digit)")
    return None


def check_workload(kind: str, name: str | None, cluster: str | None) -> None:
    """Raise ValueError (one sentence, key and value) for a kind/name/cluster that cannot be."""
    for key, value in (("name", name), ("cluster", cluster)):
        why = check_name(value) if value is not None else None
        if why:
            raise ValueError(f"{key}: {why}")
    if kind == "raycluster":
        if name and cluster and name != cluster:
            raise ValueError(f"name: {name!r} and cluster: {cluster!r} name two RayClusters; "
                             f"give one of them")
        return
    if not name:
        raise ValueError(f"name: kind {kind!r} needs the name of the {_WHAT[kind]} to target "
                         f"(its RayCluster is read from the {_WHAT[kind]}'s status)")
    if cluster:
        raise ValueError(f"cluster: {cluster!r} cannot be given with kind {kind!r}: the "
                         f"{_WHAT[kind]} {name!r} names its RayCluster itself")
