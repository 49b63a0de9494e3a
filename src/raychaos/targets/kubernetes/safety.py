"""Guard rails for faults on a real Kubernetes cluster: labels, protected objects, pod filters.

Why a module of its own: these rules decide what raychaos may touch (and, in
:data:`UNSUPPORTED`, which fault arguments it cannot honour here), so they are written once
and read in one place — a ``raychaos.io/protected=true`` object is never deleted, cordoned or
evicted; DaemonSet and mirror pods are skipped by a drain, as ``kubectl drain`` does; every object
raychaos creates carries ``raychaos.io/run-id`` so ``cleanup_run`` can find leftovers.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from raychaos.errors import ConfigError, FaultFailed

__all__ = [
    "CORDONED_BY", "NEUTRAL", "PROTECTED", "RUN_ID", "UNSUPPORTED", "check_namespace",
    "chosen_pods", "gpu_count", "is_daemonset_pod", "is_mirror_pod", "is_protected", "label_value",
    "object_name", "refuse_protected", "run_labels", "unsupported",
]

RUN_ID = "raychaos.io/run-id"
PROTECTED = "raychaos.io/protected"
#: put on a node we cordon, so a later ``cleanup_run`` can uncordon it (we did not create it)
CORDONED_BY = "raychaos.io/cordoned-by"
GPU = "nvidia.com/gpu"


def _fit(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, a hash of the whole keeping cut names distinct."""
    if len(text) <= limit:
        return text
    digest = hashlib.sha1(text.encode()).hexdigest()[:8]
    return f"{text[:limit - 9].rstrip('-._')}-{digest}"


def object_name(*parts: str) -> str:
    """A valid object name (RFC 1123: lowercase alphanumerics and '-', at most 63, alphanumeric
    at both ends) from ``parts`` — run ids carry upper case (``20261201T133913Z-…``)."""
    text = re.sub(r"[^a-z0-9-]+", "-", "-".join(parts).lower()).strip("-")
    return _fit(text, 63)


def label_value(text: str) -> str:
    """A valid label value for ``text`` (at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric at both
    ends); written and selected through this one function, so both agree."""
    return _fit(re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-_."), 63)


def run_labels(run_id: str, **extra: str) -> dict[str, str]:
    """Labels for an object raychaos creates."""
    return {RUN_ID: label_value(run_id), "app.kubernetes.io/managed-by": "raychaos", **extra}


def is_protected(obj: dict[str, Any]) -> bool:
    labels = obj.get("metadata", {}).get("labels") or {}
    return str(labels.get(PROTECTED, "")).lower() == "true"


def refuse_protected(objs: list[dict[str, Any]], action: str) -> None:
    """Raise before acting when any of ``objs`` carries ``raychaos.io/protected=true``."""
    names = [f"{o.get('kind', 'object').lower()} {o['metadata']['name']}"
             for o in objs if is_protected(o)]
    if names:
        raise FaultFailed(f"{action}: refusing to touch {', '.join(names)}: labelled "
                          f"{PROTECTED}=true")


def check_namespace(namespace: str, allowed: list[str]) -> None:
    """An empty allowlist allows any namespace; otherwise ``namespace`` must be on it."""
    if allowed and namespace not in allowed:
        raise ConfigError(f"target.kubernetes.namespace: {namespace!r} is not in "
                          f"allowed_namespaces {allowed}")


def is_daemonset_pod(pod: dict[str, Any]) -> bool:
    refs = pod.get("metadata", {}).get("ownerReferences") or []
    return any(r.get("kind") == "DaemonSet" for r in refs)


def is_mirror_pod(pod: dict[str, Any]) -> bool:
    return "kubernetes.io/config.mirror" in (pod.get("metadata", {}).get("annotations") or {})


def gpu_count(node_or_pod: dict[str, Any]) -> float:
    """GPUs a node can allocate, or a pod's containers request (limits)."""
    if "allocatable" in node_or_pod.get("status", {}):
        return float(node_or_pod["status"]["allocatable"].get(GPU, 0) or 0)
    total = 0.0
    for c in node_or_pod.get("spec", {}).get("containers", []):
        total += float((c.get("resources", {}).get("limits") or {}).get(GPU, 0) or 0)
    return total


#: What the Kubernetes target cannot do, per fault argument (checked before anything starts).
UNSUPPORTED: dict[str, dict[str, str]] = {
    "throttle_registry_pulls": {
        "latency_ms": "the kubernetes target shapes pull rate only (tc tbf); set it to 0",
        "error_rate": "the kubernetes target cannot fail registry requests; set it to 0",
    },
    "saturate_network": {
        "loss_pct": "not supported on the kubernetes target yet (bandwidth and flood only); "
                    "set it to 0",
        "latency_ms": "not supported on the kubernetes target yet; set it to 0",
        "partition": "not supported on the kubernetes target yet; set it to false",
    },
    "drain_gpu_nodes": {
        "replace": "KubeRay always recreates evicted workers; set it to true",
        "reason": "the kubernetes target drains by eviction (preemption); set it to "
                  "'preemption'",
    },
}
#: The fault functions' defaults: an argument equal to these asks for nothing unsupported.
NEUTRAL: dict[str, Any] = {"latency_ms": 0.0, "error_rate": 0.0, "loss_pct": 0.0,
                           "partition": False, "replace": True, "reason": "preemption"}


def unsupported(fault: str, args: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(argument, why) for each argument of ``fault`` the Kubernetes target cannot honour."""
    if fault == "resize_dev_shm":
        return [("", "the kubernetes target does not roll pods onto another /dev/shm; "
                     "`raychaos review` checks the RayCluster's shared-memory sizeLimit")]
    return [(arg, why) for arg, why in UNSUPPORTED.get(fault, {}).items()
            if arg in args and args[arg] != NEUTRAL.get(arg)]


def chosen_pods(handle: Any, names: list[str], action: str) -> list[dict[str, Any]]:
    """The Ray pods of ``handle`` (a RayClusterHandle) named — a pod name, ``head`` or
    ``worker-N`` — protected ones refused."""
    chosen = [handle.pod_named(n) | {"kind": "Pod"} for n in names]
    refuse_protected(chosen, action)
    return chosen
