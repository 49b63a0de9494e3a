"""Ray's fault flags on a KubeRay cluster (and the undo of blackouts, :mod:`.blackout`).

Why these mechanics:

- **Fault flags** (``RAY_testing_rpc_failure``, ``RAY_testing_asio_delay_us``) are read by Ray at
  process start, and a running pod's env cannot change. So the variable goes into the container
  env of the pod's *group template* in the RayCluster (a merge patch guarded by the object's
  ``resourceVersion``; lists are replaced whole, so the full group list is sent), with a
  ``raychaos.io/fault-env`` template label, and the chosen pods are deleted: KubeRay recreates
  them from the patched template — the pods restart with the variable. Other pods of the group
  get it too if they are recreated before the undo (said in the evidence). The undo puts the
  template's env back and deletes every pod that still carries the variable. The operator makes
  a replacement from the RayCluster in its cache, which can lag the pods' deletion on a loaded
  machine: a replacement made from the other template is deleted again, both ways, and the
  undo has landed when the replacements exist without the variable.
- **Blackouts** are :mod:`.blackout`'s; this module's ``undo`` and ``METHODS`` cover both, as
  the target asks for them.

Pods are named as everywhere on this target (a pod name, ``head``, ``worker-N``) and read from
the handle's informer (no list request per question). Every mutating call goes through the
dry-run gate (``api.write``): ``--dry-run`` prints the patch and the deletes, and notes that the
pods would restart. Every object created carries ``raychaos.io/run-id``.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from kubernetes import client

from raychaos.config.rayflags import RAY_VERSION
from raychaos.errors import (
    ConfigError,
    FaultFailed,
    KubeApiError,
    NothingMatched,
    RollbackFailed,
    TargetUnavailable,
)
from raychaos.results.store import checkpoint
from raychaos.targets.kubernetes import blackout
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.raycluster import RayClusterHandle, pod_ready
from raychaos.targets.kubernetes.rayobserve import ray_container_running, raylet_in_pod
from raychaos.targets.kubernetes.safety import chosen_pods

if TYPE_CHECKING:
    from raychaos.targets.kubernetes.target import KubernetesTarget

__all__ = ["FAULT_ENV_LABEL", "METHODS", "UNDO_KINDS", "check_ray_version", "preflight",
           "undo"]

UNDO_KINDS = ("node_env", "blackout")

FAULT_ENV_LABEL = "raychaos.io/fault-env"
RC = ("ray.io", "v1", "rayclusters")
RESTART_NOTE = ("the pods restart: deleted, and recreated by KubeRay from the patched group "
                "template; other pods of the same groups carry the variable too if they are "
                "recreated before the undo")

#: A replacement running Ray but not Ready this long has landed anyway, its readiness in the
#: evidence: a GCS slowed past 0.1 s a request keeps the head unready for as long as it lasts
#: (Ray's ``/api/gcs_healthz``, KubeRay's head readiness, asks CheckAlive with a 0.1 s deadline).
UNREADY_GRACE_S = 15.0
#: how long the undo deletes carriers and waits for their replacements (without the variable)
UNDO_SETTLE_S = 60.0

def check_ray_version(raycluster: dict[str, Any], fault: str) -> None:
    """The fault flags' formats are pinned to Ray 2.60.0: refuse a RayCluster on another."""
    version = str(raycluster.get("spec", {}).get("rayVersion") or "")
    if version and version != RAY_VERSION:
        raise ConfigError(f"{fault}: RayCluster {raycluster['metadata']['name']} runs Ray "
                          f"{version}, and raychaos knows the fault flags of Ray {RAY_VERSION} "
                          "only (a malformed flag kills the process)")


def _group(pod: dict[str, Any]) -> str:
    labels = pod["metadata"].get("labels") or {}
    return "head" if labels.get("ray.io/node-type") == "head" else str(labels.get("ray.io/group"))


def _template(spec: dict[str, Any], group: str) -> dict[str, Any]:
    if group == "head":
        template: dict[str, Any] = spec["headGroupSpec"].setdefault("template", {})
        return template
    for worker in spec.get("workerGroupSpecs") or []:
        if worker.get("groupName") == group:
            found: dict[str, Any] = worker.setdefault("template", {})
            return found
    raise NothingMatched(f"the RayCluster has no worker group {group!r}")


def _patch_groups(api: ApiSession, ns: str, rc: dict[str, Any], groups: dict[str, Any],
                  edit: Any) -> dict[str, Any]:
    """Apply ``edit(template, group)`` to each group's template; one merge patch guarded by the
    object's ``resourceVersion``, re-read and sent again on a 409 (KubeRay writes the status
    all the time, and every status write bumps the version)."""
    name = rc["metadata"]["name"]
    for attempt in range(8):
        spec = copy.deepcopy(rc.get("spec", {}))
        for group in groups:
            edit(_template(spec, group), group)
        body: dict[str, Any] = {"metadata": {
            "resourceVersion": rc["metadata"].get("resourceVersion")}, "spec": {}}
        if "head" in groups:
            body["spec"]["headGroupSpec"] = spec["headGroupSpec"]
        if any(g != "head" for g in groups):
            body["spec"]["workerGroupSpecs"] = spec["workerGroupSpecs"]
        try:
            api.write("PATCH", f"/apis/ray.io/v1/namespaces/{ns}/rayclusters/{name}",
                      api.custom.patch_namespaced_custom_object, *RC[:2], ns, RC[2], name,
                      body=body)
            return body
        except KubeApiError as exc:
            if exc.status != 409 or attempt == 7:
                raise
        time.sleep(0.1 * (attempt + 1))
        rc = api.read(api.custom.get_namespaced_custom_object, *RC[:2], ns, RC[2], name)
    raise AssertionError("unreachable")  # pragma: no cover


def _env_of(container: dict[str, Any], names: list[str]) -> dict[str, str]:
    return {e["name"]: str(e.get("value", "")) for e in container.get("env") or []
            if e.get("name") in names}


def _node_env(handle: RayClusterHandle, nodes: list[str], names: list[str]
              ) -> dict[str, dict[str, str]]:
    """The variables as each pod's Ray container carries them (a pod's env is its spec's)."""
    wanted = {handle.pod_named(n)["metadata"]["name"] if n == "head" or n.startswith("worker-")
              else n for n in nodes}
    out = {}
    for pod in handle.pods():
        if pod["metadata"]["name"] in wanted:
            container = (pod["spec"].get("containers") or [{}])[0]
            out[f"{pod['metadata']['name']}/{container.get('name')}"] = _env_of(container, names)
    return out


def _carries(pod: dict[str, Any], names: list[str]) -> bool:
    """The pod's Ray container has any of the variables ``names``."""
    return bool(_env_of((pod["spec"].get("containers") or [{}])[0], names))


def _carriers(handle: RayClusterHandle, names: list[str]) -> list[dict[str, Any]]:
    return [p for p in handle.pods() if "deletionTimestamp" not in p["metadata"]
            and _carries(p, names)]


def _delete_pod(api: ApiSession, ns: str, name: str) -> None:
    api.delete_quietly(f"/api/v1/namespaces/{ns}/pods/{name}", api.core.delete_namespaced_pod,
                       name, ns, body=client.V1DeleteOptions(grace_period_seconds=0))


def _restart_with_env(handle: RayClusterHandle, run_id: str, record: dict[str, Any], *,
                      nodes: list[str], env: dict[str, str], wait_s: float) -> dict[str, Any]:
    """Patch the groups' templates with ``env``, delete ``nodes`` (pods), wait for their
    replacements to be Ready with it; see the module docstring."""
    api, ns, cluster = handle.api, handle.ns, handle.name
    pods = chosen_pods(handle, nodes, "restart_with_env")
    rc = api.read(api.custom.get_namespaced_custom_object, *RC[:2], ns, RC[2], cluster)
    check_ray_version(rc, "restart_with_env")
    groups: dict[str, list[dict[str, Any]]] = {_group(p): [] for p in pods}
    for group in groups:
        template = _template(copy.deepcopy(rc["spec"]), group)
        container = (template.get("spec", {}).get("containers") or [{}])[0]
        groups[group] = copy.deepcopy(container.get("env") or [])
    record["undo"] = {"kind": "node_env", "namespace": ns, "cluster": cluster,
                      "vars": sorted(env), "original_env": groups, "pods": list(nodes)}
    checkpoint(record)  # on disk before the template changes

    def add(template: dict[str, Any], _group: str) -> None:
        template.setdefault("metadata", {}).setdefault("labels", {})[FAULT_ENV_LABEL] = run_id
        container = template.setdefault("spec", {}).setdefault("containers", [{}])[0]
        kept = [e for e in container.get("env") or [] if e.get("name") not in env]
        container["env"] = kept + [{"name": k, "value": v} for k, v in sorted(env.items())]

    known = {p["metadata"]["uid"] for p in handle.pods()}  # every pod before the patch
    _patch_groups(api, ns, rc, groups, add)
    for pod in pods:
        _delete_pod(api, ns, pod["metadata"]["name"])
    evidence: dict[str, Any] = {"nodes": [p["metadata"]["name"] for p in pods],
                                "groups": sorted(groups),
                                "variables": dict(env), "note": RESTART_NOTE,
                                "dry_run": api.gate.dry_run, "landed": True}
    if api.gate.dry_run:
        return evidence
    old = {p["metadata"]["uid"] for p in pods}
    deadline = time.monotonic() + wait_s
    up_since: float | None = None
    stale: list[str] = []
    while time.monotonic() < deadline:
        # a replacement made without the variable was made from the operator's cached template
        # (its watch of the RayCluster behind its watch of the pods): deleted again
        for pod in handle.pods():
            meta = pod["metadata"]
            if (meta["uid"] not in known and meta["name"] not in stale and _group(pod) in groups
                    and "deletionTimestamp" not in meta and not _carries(pod, sorted(env))):
                _delete_pod(api, ns, meta["name"])
                stale.append(meta["name"])
                evidence["stale_replacements_deleted"] = stale
        fresh = [p for p in _carriers(handle, sorted(env)) if p["metadata"]["uid"] not in old]
        ready = [p for p in fresh if pod_ready(p)]
        if len(ready) >= len(pods):
            return _landed(handle, evidence, ready, env)
        # Ready did not come: once the containers have run UNREADY_GRACE_S, a replacement
        # whose raylet is up has landed unready (one exec per unready pod, only from then on)
        if len(fresh) >= len(pods) and all(ray_container_running(p) for p in fresh):
            up_since = up_since or time.monotonic()
            if time.monotonic() - up_since >= UNREADY_GRACE_S and all(
                    pod_ready(p) or raylet_in_pod(handle, p, "") for p in fresh):
                evidence["not_ready"] = {p["metadata"]["name"]: _unready_why(handle, p)
                                         for p in fresh if not pod_ready(p)}
                return _landed(handle, evidence, fresh, env)
        else:
            up_since = None
        time.sleep(1.0)
    raise FaultFailed(f"restart_with_env: no replacement with {sorted(env)} for {nodes} "
                      f"Ready, or running Ray, within {wait_s:g} s")


def _landed(handle: RayClusterHandle, evidence: dict[str, Any], pods: list[dict[str, Any]],
            env: dict[str, str]) -> dict[str, Any]:
    evidence["new_pods"] = [p["metadata"]["name"] for p in pods]
    evidence["env_seen"] = _node_env(handle, evidence["new_pods"], sorted(env))
    return evidence


def _unready_why(handle: RayClusterHandle, pod: dict[str, Any]) -> str:
    """Why a replacement running Ray is not Ready: its Ready condition, and for the head what
    its readiness endpoint answers (Ray's ``/api/gcs_healthz`` gives the GCS 0.1 s)."""
    cond: dict[str, Any] = next((c for c in (pod.get("status") or {}).get("conditions") or []
                                 if c.get("type") == "Ready"), {})
    why = f"Ready={cond.get('status', '?')} {cond.get('message') or ''}".strip()
    if (pod["metadata"].get("labels") or {}).get("ray.io/node-type") != "head":
        return why
    said = ""
    for _ in range(3):  # a dashboard still starting (its modules ask the slow GCS) may not answer
        try:
            status, _reason, raw = handle.dashboard.exchange("GET", "/api/gcs_healthz",
                                                             timeout=5.0)
            return why + f"; /api/gcs_healthz: HTTP {status} " \
                         f"{raw[:200].decode(errors='replace')}"
        except (TargetUnavailable, KubeApiError) as exc:
            said = f"; /api/gcs_healthz did not answer: {exc}"
    return why + said


def _undo_restart_with_env(handle: RayClusterHandle, undo: dict[str, Any]) -> dict[str, Any]:
    """Put the templates' env back, delete every pod that still carries the variables."""
    api = handle.api
    ns, cluster, names = undo["namespace"], undo["cluster"], list(undo["vars"])
    rc = api.read(api.custom.get_namespaced_custom_object, *RC[:2], ns, RC[2], cluster)
    original: dict[str, list[dict[str, Any]]] = undo.get("original_env") or {}

    def put_back(template: dict[str, Any], group: str) -> None:
        (template.get("metadata", {}).get("labels") or {}).pop(FAULT_ENV_LABEL, None)
        container = template.setdefault("spec", {}).setdefault("containers", [{}])[0]
        kept = [e for e in container.get("env") or [] if e.get("name") not in names]
        container["env"] = kept + [e for e in original.get(group, []) if e.get("name") in names]

    if original:
        _patch_groups(api, ns, rc, original, put_back)
    if api.gate.dry_run:
        carriers = [p["metadata"]["name"] for p in _carriers(handle, names)]
        for name in carriers:
            _delete_pod(api, ns, name)
        return {"undone": True, "templates_restored": sorted(original), "pods_deleted": carriers,
                "dry_run": True}
    settled = delete_until_clean(handle.pods, lambda name: _delete_pod(api, ns, name),
                                 lambda pod: _carries(pod, names), UNDO_SETTLE_S)
    if settled["still_carrying"]:
        raise RollbackFailed(
            f"restart_with_env: pods of RayCluster {cluster} still carry {names} after "
            f"{UNDO_SETTLE_S:g} s of deleting them: {', '.join(settled['still_carrying'])}")
    return {"undone": True, "templates_restored": sorted(original),
            "pods_deleted": settled["deleted"], "replaced": settled["replaced"],
            "dry_run": False}


def delete_until_clean(pods: Callable[[], list[dict[str, Any]]], delete: Callable[[str], None],
                       carries: Callable[[dict[str, Any]], bool], wait_s: float,
                       pause_s: float = 0.5) -> dict[str, Any]:
    """Delete every live pod that ``carries`` the fault, and again each replacement that comes
    with it, until every group has as many live pods as before and none carries it.

    Why: the operator recreates a deleted pod from the RayCluster in its cache, and its watch
    of the RayCluster and its watch of the pods are two streams: on a loaded machine the pod's
    deletion can reach it before the restored template does, and the replacement is made from
    the patched one (seen once on the test bed: a carrier back after the undo). The undo has
    landed when the replacements exist without the variable, not when the deletes were sent.
    Returns ``deleted`` (every pod deleted, in order), ``still_carrying`` (live carriers at the
    deadline: the undo failed) and ``replaced`` (every group back to its count)."""
    def live() -> list[dict[str, Any]]:
        return [p for p in pods() if "deletionTimestamp" not in p["metadata"]]

    first = live()
    want: dict[str, int] = {}
    for pod in first:
        if carries(pod):
            want[_group(pod)] = sum(1 for p in first if _group(p) == _group(pod))
    deleted: list[str] = []
    deadline = time.monotonic() + wait_s
    seen = first
    while True:
        now = [p for p in seen if p["metadata"]["name"] not in deleted]
        carriers = [p["metadata"]["name"] for p in now if carries(p)]
        for name in carriers:
            delete(name)
            deleted.append(name)
        replaced = all(sum(1 for p in now if _group(p) == g and not carries(p)) >= n
                       for g, n in want.items())
        if (not carriers and replaced) or time.monotonic() >= deadline:
            # carriers still coming at the deadline: something re-adds the variable
            return {"deleted": deleted, "still_carrying": carriers, "replaced": replaced}
        time.sleep(pause_s)
        seen = live()


def undo(handle: RayClusterHandle, record: dict[str, Any]) -> dict[str, Any]:
    """The undo of a ``node_env`` or ``blackout`` (:mod:`.blackout`) record."""
    if (record.get("undo") or {}).get("kind") == "blackout":
        return blackout.restore(handle.api, record)
    return _undo_restart_with_env(handle, record["undo"])


def preflight(self: KubernetesTarget, fault: str, args: Mapping[str, Any]) -> None:
    """The pods a blackout or an RPC fault names exist; the RayCluster runs Ray 2.60."""
    if fault in ("inject_rpc_failures", "blackout"):
        chosen_pods(self._handle(), list(args.get("nodes") or ["worker-1"]), fault)
    if fault in ("inject_rpc_failures", "slow_gcs"):
        check_ray_version(self.raycluster, fault)


# --- the Target methods of KubernetesTarget (``self`` is the target) ------------------------
def node_env(self: KubernetesTarget, nodes: list[str], names: list[str]
             ) -> dict[str, dict[str, str]]:
    return _node_env(self._handle(), nodes, names)


def restart_with_env(self: KubernetesTarget, *, nodes: list[str], env: dict[str, str],
                     wait_s: float, record: dict[str, Any]) -> dict[str, Any]:
    return _restart_with_env(self._handle(), self.run_id, record, nodes=nodes, env=env,
                             wait_s=wait_s)


METHODS = (node_env, restart_with_env, blackout.cut_network, blackout.restore_network)
