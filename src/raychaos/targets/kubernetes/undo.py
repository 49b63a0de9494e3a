"""Undoing what a run did on Kubernetes: one ledger record at a time (the rollback and
``raychaos rollback``), or everything a run labelled (``cleanup_run``, the crash path).

Why its own module: the undo of each fault kind lives next to none of the faults' apply paths
(drain, registry, network each own their mechanics); this is the one dispatch over them, so a
new fault kind is added here once, and an unknown kind is refused with its record's id.
"""

from __future__ import annotations

from typing import Any

from raychaos.errors import KubeApiError, RollbackFailed, TargetUnavailable
from raychaos.targets.kubernetes import drain as k8s_drain
from raychaos.targets.kubernetes import network as k8s_network
from raychaos.targets.kubernetes import registry as k8s_registry
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.safety import CORDONED_BY, RUN_ID, label_value

__all__ = ["undo", "cleanup_run"]


def undo(api: ApiSession, ns: str, record: dict[str, Any]) -> dict[str, Any]:
    """Revert one ledger record (dispatching on its undo ``kind`` or ``fault``); idempotent."""
    spec = record.get("undo") or {}
    kind = spec.get("kind") or record.get("fault")
    try:
        if kind == "kill_head" or not spec:
            return {"undone": True, "note": "nothing to revert: KubeRay recreates the head"}
        if kind == "drain_nodes":
            return {"undone": True, "uncordoned": k8s_drain.uncordon(api, spec["nodes"])}
        if kind == "throttle_registry_pulls":
            deleted = k8s_network.delete_created(api, spec)
            removed = {} if api.gate.dry_run else k8s_registry.clean_nodes(api, ns, spec)
            return {"undone": True, "deleted": deleted, "left_on_nodes_removed": removed}
        if kind == "saturate_network":
            stopped = [] if api.gate.dry_run else k8s_network.stop_floods(api, spec)
            return {"undone": True, "deleted": k8s_network.delete_created(api, spec),
                    "floods_stopped": stopped}
    except (KubeApiError, TargetUnavailable) as exc:
        raise RollbackFailed(f"undo {kind}: {spec} may still be applied: {exc}") from exc
    raise RollbackFailed(f"undo: unknown fault kind {kind!r} in record {record.get('id')}")


def cleanup_run(api: ApiSession, ns: str, run_id: str) -> dict[str, Any]:
    """Delete every object labelled ``raychaos.io/run-id=<run_id>``; uncordon our nodes."""
    nodes = [n["metadata"]["name"] for n in api.read(
        api.core.list_node, label_selector=f"{CORDONED_BY}={label_value(run_id)}")["items"]]
    return {"run_id": run_id, "uncordoned": k8s_drain.uncordon(api, nodes),
            "deleted": k8s_network.delete_labelled(api, ns, f"{RUN_ID}={label_value(run_id)}")}
