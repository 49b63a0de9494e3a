"""Head faults on a KubeRay cluster: kill the head (pod, container or only ``gcs_server``) and wait
for the next head incarnation by *watching* pods, not polling.

Why watch: detection latency is part of the evidence, and a poll loop over the API adds load and
up to one period of delay. The watch starts from a list's ``resourceVersion`` (a watch with none
can fail with ``504 Too large resource version``) and a ``410 Gone`` is answered by re-listing.
With KubeRay's autoscaler v2 (``restartPolicy: Never``) a dead head comes back as a *new pod*
(new UID); otherwise the same pod's container ``restartCount`` goes up — both count as "back".
"""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from raychaos.errors import FaultFailed, KubeApiError, NothingMatched, TargetUnavailable
from raychaos.results.store import checkpoint
from raychaos.targets.kubernetes.client import ApiSession
from raychaos.targets.kubernetes.safety import refuse_protected
from raychaos.targets.kubernetes.streams import exec_in

__all__ = ["KILL_MODES", "head_identity", "identity", "kill_head", "wait_head_back"]

KILL_MODES = {
    "pod": None,  # delete the pod with grace 0: KubeRay creates a new head pod
    # every process but PID 1 (the kernel shields a namespace's init from SIGKILL sent inside
    # it); ``ray start --block`` then exits, so the container restarts or the pod is replaced
    "head": ["sh", "-c", "kill -KILL -1"],
    "gcs": ["pkill", "-KILL", "gcs_server"],  # only the GCS: GCS FT should bring it back
}


def head_selector(cluster: str) -> str:
    return f"ray.io/cluster={cluster},ray.io/node-type=head"


def _ready(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in pod.get("status", {}).get("conditions") or [])


def _restarts(pod: dict[str, Any]) -> int:
    return max((int(s.get("restartCount", 0))
                for s in pod.get("status", {}).get("containerStatuses") or []), default=0)


def identity(pod: dict[str, Any]) -> dict[str, Any]:
    meta = pod["metadata"]
    return {"pod": meta["name"], "uid": meta["uid"], "restart_count": _restarts(pod),
            "ready": _ready(pod), "node": pod.get("spec", {}).get("nodeName"),
            "terminating": "deletionTimestamp" in meta}


def _live_heads(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    live = [p for p in items if "deletionTimestamp" not in p["metadata"]]
    return sorted(live, key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)


def head_identity(api: ApiSession, ns: str, cluster: str) -> dict[str, Any]:
    """The current head pod's name, UID, restart count, readiness and node."""
    items = api.read(api.core.list_namespaced_pod, ns,
                     label_selector=head_selector(cluster))["items"]
    heads = _live_heads(items)
    if not heads:
        raise NothingMatched(f"kubernetes: no head pod with labels {head_selector(cluster)} "
                             f"in namespace {ns}")
    return identity(heads[0]) | {"namespace": ns, "cluster": cluster}


def kill_head(api: ApiSession, ns: str, cluster: str, mode: str,
              record: dict[str, Any]) -> dict[str, Any]:
    """Kill the head as ``mode`` says (see :data:`KILL_MODES`); evidence names what was killed.

    The undo record is written before acting; there is nothing to revert (KubeRay and the
    kubelet bring the head back), so undo only notes that.
    """
    if mode not in KILL_MODES:
        raise FaultFailed(f"kill_head: unknown mode {mode!r} (use one of {sorted(KILL_MODES)})")
    pods = api.read(api.core.list_namespaced_pod, ns, label_selector=head_selector(cluster))
    heads = _live_heads(pods["items"])
    if not heads:
        raise NothingMatched(f"kill_head: no head pod with labels {head_selector(cluster)} in "
                             f"namespace {ns}")
    pod = heads[0] | {"kind": "Pod"}
    refuse_protected([pod], "kill_head")
    old = identity(pod)
    name = old["pod"]
    record["undo"] = {"kind": "kill_head", "mode": mode, "namespace": ns, "pod": name,
                      "uid": old["uid"]}
    path = f"/api/v1/namespaces/{ns}/pods/{name}"
    checkpoint(record)
    killed_at = time.time()
    proof: dict[str, Any] = {}
    if mode == "pod":
        try:
            reply = api.write("DELETE", path, api.core.delete_namespaced_pod, name, ns,
                              body=client.V1DeleteOptions(grace_period_seconds=0))
        except KubeApiError as exc:
            raise FaultFailed(f"kill_head: deleting pod {ns}/{name} failed: "
                              f"HTTP {exc.status} {exc.reason}") from exc
        proof = {"deleted": True, "deletion_timestamp": ((reply or {}).get("metadata") or {})
                 .get("deletionTimestamp")}
    else:
        container = pod["spec"]["containers"][0]["name"]
        command = KILL_MODES[mode] or []
        done = api.gate("POST", f"{path}/exec", {"container": container, "command": command},
                        lambda: _exec(api, ns, name, container, command, old))
        proof = done or {"dry_run": True}
    return {"mode": mode, "namespace": ns, "old": old | {"killed_at": killed_at},
            "killed_at": killed_at, "dry_run": api.gate.dry_run, "proof": proof}


#: Exit statuses of an exec the container's own death ended: SIGKILL (the runtime kills every
#: process of a container whose PID 1 exited, the exec's included), as the kubelet reports it
#: (137) or as a process table does (-9)
KILLED_WITH_CONTAINER = (137, -9)
#: How long a kill whose exec ended with the container has to show its effect
DEATH_SEEN_WITHIN_S = 20.0
#: Between tries of an API server that did not answer while waiting for the head
UNREACHABLE_RETRY_S = 1.0


def _exec(api: ApiSession, ns: str, name: str, container: str,
          command: list[str], old: dict[str, Any]) -> dict[str, Any]:
    """Run the kill command; its exit status is the proof it did something — or, when the
    kill took the container down so fast that the exec went with it (SIGKILL, or a stream cut
    without a status), the container's own death: its restart count up or the pod gone."""
    what = " ".join(command)
    try:
        result = exec_in(api, ns, name, container, command, timeout=20)
    except (KubeApiError, TargetUnavailable) as exc:
        raise FaultFailed(f"kill_head: exec {what!r} in {ns}/{name} failed: {exc}") from exc
    cut = result.code is None and "closed without an exit status" in str(result.error)
    if result.code in KILLED_WITH_CONTAINER or cut:
        seen = _container_died(api, ns, name, old)
        if seen is None:
            how = "without an exit status" if cut else f"by SIGKILL ({result.code})"
            raise FaultFailed(f"kill_head: {what!r} in {ns}/{name} ended {how} and the "
                              f"container did not restart within {DEATH_SEEN_WITHIN_S:g} s: "
                              "the kill is not proven")
        return {"exec": result.to_dict(), "ended_with_the_container": seen}
    if result.code is None:  # the API server answered, but the command never ran there
        raise FaultFailed(f"kill_head: exec {what!r} in {ns}/{name}/{container} did not run: "
                          f"{result.error}")
    if command[0] == "pkill" and result.code == 1:
        raise FaultFailed(f"kill_head: {what!r} in {ns}/{name} matched no process (exit 1): "
                          f"nothing was killed")
    if result.code != 0:
        raise FaultFailed(f"kill_head: {what!r} in {ns}/{name} exited {result.code}: "
                          f"{(result.stderr or result.stdout).strip()[-300:]}")
    return {"exec": result.to_dict()}


def _container_died(api: ApiSession, ns: str, name: str, old: dict[str, Any]
                    ) -> dict[str, Any] | None:
    """The head container's death after a kill, as the pod's status shows it: its restart
    count above the one before, or the pod gone or replaced; None when neither is seen."""
    deadline = time.monotonic() + DEATH_SEEN_WITHIN_S
    while True:
        pod = api.read_or_none(api.core.read_namespaced_pod, name, ns)
        if pod is None or pod["metadata"]["uid"] != old["uid"]:
            return {"pod_gone": True}
        if _restarts(pod) > old["restart_count"]:
            return {"restart_count": _restarts(pod)}
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.5)


def _is_back(pod: dict[str, Any], old: dict[str, Any]) -> bool:
    if "deletionTimestamp" in pod["metadata"] or not _ready(pod):
        return False
    if pod["metadata"]["uid"] != old.get("uid"):
        return True
    return _restarts(pod) > int(old.get("restart_count", 0))


def wait_head_back(api: ApiSession, ns: str, cluster: str, old: dict[str, Any],
                   timeout: float) -> dict[str, Any]:
    """Wait (by watch) for a Ready head that is a new pod or a restarted container.

    ``old`` is a :func:`head_identity` or the ``old`` of :func:`kill_head`'s evidence. Returns
    ``recovered`` with old/new UID, restart counts, seconds since the kill, and ``detected_at``
    (wall clock) so a caller can compute detection latency from the API's own event.
    """
    start = time.monotonic()
    deadline = start + timeout
    sel = head_selector(cluster)
    relists = events = 0
    via = "list"
    found: dict[str, Any] | None = None
    unreachable: list[float] = []  # seconds into the wait at which the API server was not there
    away: TargetUnavailable | None = None  # the API server's last absence, until it answers
    while found is None and time.monotonic() < deadline:
        try:
            listing = api.read(api.core.list_namespaced_pod, ns, label_selector=sel)
        except TargetUnavailable as exc:
            # an API server away for a moment while a head restarts (seen: 35 s on a busy
            # host) is not the head failing to come back; away until the deadline, it is
            # the harness that cannot see (raised as before)
            unreachable.append(round(time.monotonic() - start, 2))
            away = exc
            if time.monotonic() + UNREACHABLE_RETRY_S >= deadline:
                raise
            time.sleep(UNREACHABLE_RETRY_S)
            continue
        away = None
        relists += 1
        found = next((p for p in _live_heads(listing["items"]) if _is_back(p, old)), None)
        if found:
            break
        rv = listing["metadata"]["resourceVersion"]
        remaining = max(1, int(deadline - time.monotonic() + 0.999))
        try:
            for event in api.watch(api.core.list_namespaced_pod, ns, label_selector=sel,
                                   resource_version=rv, allow_watch_bookmarks=True,
                                   timeout_s=remaining):
                events += 1
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        break  # Gone: re-list
                    raise FaultFailed(f"wait_head_back: watch on {ns} pods failed: "
                                      f"{obj.get('message')}")
                if event.get("type") in ("ADDED", "MODIFIED") and _is_back(obj, old):
                    found, via = obj, "watch"
                    break
                if time.monotonic() >= deadline:
                    break
        except KubeApiError as exc:
            if exc.status != 410:
                raise  # 410: our resourceVersion is too old: list again
        except TargetUnavailable as exc:
            unreachable.append(round(time.monotonic() - start, 2))  # list again (above)
            away = exc
    if found is None and away is not None:
        # the deadline passed while the API server was away (a retry's sleep that overran it
        # on a busy box ended the loop instead of the check above): the harness cannot see
        raise away
    detected_at = time.time()
    evidence: dict[str, Any] = {
        "back": found is not None, "recovered": found is not None, "old_pod": old.get("pod"),
        "old_uid": old.get("uid"),
        "old_restart_count": old.get("restart_count", 0), "waited_s": round(
            time.monotonic() - start, 4), "detected_at": detected_at, "via": via,
        "lists": relists, "watch_events": events}
    if unreachable:
        evidence["api_unreachable_at_s"] = unreachable[:20]
    if old.get("killed_at"):
        evidence["seconds"] = round(detected_at - float(old["killed_at"]), 4)
    if found is not None:
        new = identity(found)
        evidence |= {"new": new, "new_pod": new["pod"], "new_uid": new["uid"],
                     "restart_count": new["restart_count"],
                     "uid_changed": new["uid"] != old.get("uid"), "node": new["node"]}
    return evidence
