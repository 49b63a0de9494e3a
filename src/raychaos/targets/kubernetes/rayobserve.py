"""What Ray is doing inside a KubeRay cluster's pods, for the monitor and the probes.

The dashboard (behind the head Service) answers for the GCS: the node table, each node's
logical resources from the load report, the Jobs API's history. What only the pod itself knows
— is a dead node's raylet still running, how often Ray's own logs said something — is asked
by an exec in the pod (through the kubelet, so a pod whose network is cut still answers).
Pods are named as everywhere on this target (a pod name, ``head``, ``worker-N``) and read from
the handle's informer (no list request per question).
"""

from __future__ import annotations

import shlex
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from raychaos.errors import KubeApiError, NothingMatched, TargetUnavailable
from raychaos.targets.base import NodeInfo
from raychaos.targets.kubernetes.streams import exec_in

if TYPE_CHECKING:
    from raychaos.targets.kubernetes.target import KubernetesTarget

__all__ = ["LOG_COUNT_EVERY_S", "METHODS", "RAY_LOG_GLOB", "ray_container_running", "raylet_in_pod"]


# --- the Target methods of KubernetesTarget (``self`` is the target) ------------------------
def gcs_call_ms(self: KubernetesTarget, timeout: float = 2.0) -> float | None:
    """Ray's node table through the dashboard (a GetAllNodeInfo behind it), timed; None when
    it did not answer."""
    t0 = time.monotonic()
    try:
        self._handle().dashboard.ray_nodes(timeout)
    except (TargetUnavailable, KubeApiError):
        return None
    return round((time.monotonic() - t0) * 1000, 2)


def node_resources(self: KubernetesTarget, timeout: float = 2.0) -> list[NodeInfo]:
    """The ALIVE Ray nodes with each logical resource's total and what is free of it, from the
    load report behind the dashboard's node summary (a node it does not list yet: None)."""
    nodes = [n for n in self.nodes(timeout) if n.state == "ALIVE"]
    usage = self._handle().dashboard.logical_resources(max(timeout, 2.0))
    # the report's own totals: it rounds byte sizes as Ray prints them, so what is free is
    # comparable only with them
    return [replace(n, available=usage[n.node_id]["available"],
                    resources=usage[n.node_id]["total"])
            if n.node_id in usage else n for n in nodes]


def raylet_alive(self: KubernetesTarget, node_ids: list[str]) -> dict[str, bool | None]:
    """For each GCS node ID: is its raylet still running in its pod? The pod is found by the
    node's address; the check is an exec (through the kubelet, so a pod whose network is cut
    still answers). True/False from ``pgrep``; no pod with that address: False (the pod is
    gone), and False when the pod's container is not running (restarting: no process of the
    container it ran in is left); None when the node, or the exec, gives no answer. When the
    dashboard cannot say where the node was (it runs on the head: a head that just restarted
    is the usual case), every Ray pod is asked instead."""
    handle = self._handle()
    try:
        ips: dict[str, str] | None = {
            str(r.get("node_id")): str(r.get("node_ip")) for r in handle.dashboard.ray_nodes(5)}
    except (TargetUnavailable, KubeApiError):
        ips = None
    pods = [p for p in handle.pods() if "deletionTimestamp" not in p["metadata"]]
    by_ip = {(p.get("status") or {}).get("podIP"): p for p in pods}
    out: dict[str, bool | None] = {}
    for node_id in node_ids:
        if ips is None:
            asked = pods
        elif node_id not in ips:
            out[node_id] = None
            continue
        elif ips[node_id] not in by_ip:
            out[node_id] = False
            continue
        else:
            asked = [by_ip[ips[node_id]]]
        answers = [raylet_in_pod(handle, pod, node_id) for pod in asked]
        if True in answers:
            out[node_id] = True
        elif answers and None not in answers:
            out[node_id] = False  # every pod asked said no
        else:
            out[node_id] = None
    return out


def raylet_in_pod(handle: Any, pod: dict[str, Any], node_id: str) -> bool | None:
    if not ray_container_running(pod):
        return False
    try:
        ran = exec_in(handle.api, handle.ns, pod["metadata"]["name"],
                      pod["spec"]["containers"][0]["name"],
                      ["pgrep", "-f", f"raylet.*node_id={node_id}"], timeout=10)
    except (TargetUnavailable, KubeApiError):
        # refused because the container went down meanwhile: its raylet went with it
        again = next((p for p in handle.pods()
                      if p["metadata"]["name"] == pod["metadata"]["name"]), None)
        return None if again is not None and ray_container_running(again) else False
    return {0: True, 1: False}.get(ran.code) if ran.code is not None else None


def ray_container_running(pod: dict[str, Any]) -> bool:
    """The pod's Ray container (its first) is running now (not waiting to restart, not
    terminated)."""
    name = pod["spec"]["containers"][0]["name"]
    status = next((c for c in (pod.get("status") or {}).get("containerStatuses") or []
                   if c.get("name") == name), None)
    return bool(status and "running" in (status.get("state") or {}))


#: Ray's own logs in a KubeRay container: ``ray start``'s default temp dir (``session_latest``
#: is a link to the newest session, so the sessions are matched by their date instead)
RAY_LOG_GLOB = "/tmp/ray/session_2*/logs"
#: The monitor asks once a second; an exec per pod that often would be most of its traffic
LOG_COUNT_EVERY_S = 5.0


def ray_log_counts(self: KubernetesTarget, nodes: list[str], needles: list[str]
                   ) -> dict[str, dict[str, int]]:
    """Lines of Ray's own logs in each named pod (``head``, ``worker-N`` or a pod name) that
    contain each needle, counted by ``grep`` in the pod through an exec; cumulative over the
    run: a restarted container or a replaced pod starts its logs again, and what the earlier
    one had counted is kept. A pod is asked at most every 5 s (the last answer in between).

    A container that exited (its raylet died: ``ray start --block`` ends and prints the last
    200 lines of the dead process's ``.out``/``.err``) takes its files with it: what it wrote
    after the last look is read from its output (the pod's log, ``previous`` once it was
    restarted), so a raylet that logged a line and exited between two looks still counts it.
    A pod that cannot be asked either way (gone, the exec and the log refused) is left out."""
    handle = self._handle()
    cache = self.log_counts
    out: dict[str, dict[str, int]] = {}
    script = (f"cat {RAY_LOG_GLOB}/*.out {RAY_LOG_GLOB}/*.err {RAY_LOG_GLOB}/*.log "
              "2>/dev/null | grep -F -o " + " ".join(f"-e {shlex.quote(n)}" for n in needles)
              + " | sort | uniq -c")
    zero = dict.fromkeys(needles, 0)
    for name in nodes:
        key = (name, tuple(needles))
        last = cache.get(key)
        if last is not None and time.monotonic() - last["at"] < LOG_COUNT_EVERY_S:
            out[name] = dict(last["total"])
            continue
        try:
            pod = handle.pod_named(name)
        except (TargetUnavailable, KubeApiError, NothingMatched):
            continue
        container = pod["spec"]["containers"][0]["name"]
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        status: dict[str, Any] = next((c for c in statuses if c.get("name") == container), {})
        running = "running" in (status.get("state") or {})
        seen = _grep_in(handle, pod, container, script, needles) if running else None
        # the container of each count: a pod replaced or a container restarted is another one
        cid = f"{pod['metadata'].get('uid')}/{status.get('containerID') or ''}"
        exited = _exited(pod, status)
        base, last_cid, last_seen = ((dict(last["base"]), last["cid"], dict(last["seen"]))
                                     if last else (dict(zero), None, dict(zero)))
        # the exited container's output, read once: for the container of the last look (what
        # it wrote after that look), or for the count itself when nothing runs to grep in
        same = exited is not None and exited[0] == last_cid
        told = _count_in_output(handle, pod, container, exited[1], needles) \
            if exited is not None and (same or seen is None) else None
        if same and told is not None:
            last_seen = {n: max(last_seen[n], told[n]) for n in needles}
        if seen is None:  # not running (or the exec refused)
            if exited is None or told is None:
                continue
            seen, cid = (last_seen if same else told), exited[0]
        if last_cid is not None and cid != last_cid:
            base = {n: base[n] + last_seen[n] for n in needles}  # the earlier logs' share
        total = {n: base[n] + seen[n] for n in needles}
        cache[key] = {"at": time.monotonic(), "cid": cid, "seen": seen, "base": base,
                      "total": total}
        out[name] = dict(total)
    return out


def _grep_in(handle: Any, pod: dict[str, Any], container: str, script: str,
             needles: list[str]) -> dict[str, int] | None:
    """Each needle's count in the running container's Ray logs (None: the exec refused)."""
    try:
        ran = exec_in(handle.api, handle.ns, pod["metadata"]["name"], container,
                      ["sh", "-c", script], timeout=10)
    except (TargetUnavailable, KubeApiError):
        return None
    if ran.code not in (0, 1):  # grep's 1: nothing matched
        return None
    seen = dict.fromkeys(needles, 0)
    for line in ran.stdout.splitlines():  # "      3 NEEDLE" (a needle may end in a space)
        count, _, text = line.lstrip().partition(" ")
        if text in seen and count.isdigit():
            seen[text] = int(count)
    return seen


def _exited(pod: dict[str, Any], status: dict[str, Any]) -> tuple[str, bool] | None:
    """The last container that exited in this pod, as (its key, is it the ``previous`` one):
    the one terminated now, else the last state's (restarted since, or waiting to be)."""
    uid = pod["metadata"].get("uid")
    term = (status.get("state") or {}).get("terminated")
    if term and term.get("containerID"):
        return f"{uid}/{term['containerID']}", False
    term = (status.get("lastState") or {}).get("terminated")
    if term and term.get("containerID"):
        return f"{uid}/{term['containerID']}", True
    return None


def _count_in_output(handle: Any, pod: dict[str, Any], container: str, previous: bool,
                     needles: list[str]) -> dict[str, int] | None:
    """Each needle's count in a container's output (the pod's log; None: it was refused)."""
    try:
        text = handle.api.read_text(handle.api.core.read_namespaced_pod_log,
                                    pod["metadata"]["name"], handle.ns, container=container,
                                    previous=previous)
    except (TargetUnavailable, KubeApiError):
        return None
    return {n: text.count(n) for n in needles}


def network_counters(self: KubernetesTarget) -> dict[str, dict[str, int]]:
    return {}


def job_history(self: KubernetesTarget, timeout: float = 5.0) -> list[dict[str, Any]]:
    """The Jobs API's list (the submission jobs the GCS keeps), finished ones included."""
    jobs = self._handle().dashboard.json("GET", "/api/jobs/", timeout=timeout)
    return [{"job_id": j.get("job_id"), "submission_id": j.get("submission_id"),
             "dead": j.get("status") in ("SUCCEEDED", "FAILED", "STOPPED")}
            for j in (jobs if isinstance(jobs, list) else [])]


METHODS = (gcs_call_ms, node_resources, raylet_alive, ray_log_counts, network_counters,
           job_history)
