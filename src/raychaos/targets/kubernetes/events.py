"""What the kubelet and KubeRay did, for the timeline: image pulls, pods started, exited, Ready.

Why: the time a node (a replaced worker, a new head pod) spent pulling its image is part of
its recovery time, and the kubelet says it in words — "Successfully pulled image "X" in 12.3s
(12.3s including waiting). Image size: N bytes." — as a Go duration in every form Go prints
(``456ms``, ``12.3s``, ``1m23.456s``, ``1h2m3.5s``). "already present on machine" is a pull that
did not happen, and says so. Restarts and replacements are read from the pod informer's
snapshots (:func:`pod_changes`), placed at the times the pods' status gives.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from raychaos.targets.kubernetes.client import ApiSession

__all__ = ["go_duration_s", "image_pull_seconds", "pod_changes", "pod_pulls", "pull_events"]

PULLED = re.compile(r'Successfully pulled image "(?P<image>[^"]+)" in (?P<took>[0-9hmsµu.]+)')
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_GO_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(h|ms|us|µs|ns|m|s)")


def go_duration_s(text: str) -> float | None:
    """Seconds in a Go duration as the kubelet prints it: ``12.3s``, ``1m23.456s``, ``456ms``,
    ``1h2m3.5s``; None when it is not one."""
    parts = _GO_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _GO_UNITS[u] for n, u in parts)


def image_pull_seconds(api: ApiSession, ns: str) -> list[float]:
    """Pull durations from the kubelet's ``Pulled`` events, in seconds."""
    events = api.read(api.core.list_namespaced_event, ns, field_selector="reason=Pulled")
    return [float(e["seconds"]) for e in pull_events(events["items"], 0.0)]


def pull_events(events: list[dict[str, Any]], since: float) -> list[dict[str, Any]]:
    """Of ``Pulled`` Event objects, those at or after ``since`` (wall clock) as cluster events:
    ``{"ts", "event": "image_pulled", "node": pod, "image", "seconds", "uid"}``, oldest first
    (the caller drops the ones it has seen: event times have one-second resolution)."""
    out = []
    for ev in events:
        m = PULLED.search(ev.get("message", ""))
        seconds = go_duration_s(m["took"]) if m else None
        if m is None or seconds is None:
            continue
        ts = _event_time(ev)
        if ts < since:
            continue
        meta = ev.get("metadata") or {}
        out.append({"ts": ts, "event": "image_pulled", "image": m["image"],
                    "node": (ev.get("involvedObject") or {}).get("name", ""),
                    "seconds": round(seconds, 3),
                    "uid": f"{meta.get('uid', meta.get('name'))}/{ev.get('count', 1)}"})
    return sorted(out, key=lambda e: e["ts"])


def _event_time(ev: dict[str, Any]) -> float:
    for key in ("lastTimestamp", "eventTime", "firstTimestamp"):
        text = ev.get(key) or ((ev.get("metadata") or {}).get("creationTimestamp")
                               if key == "firstTimestamp" else None)
        if text:
            try:
                return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return 0.0


PRESENT = re.compile(r'Container image "(?P<image>[^"]+)" already present on machine')


def pod_pulls(api: ApiSession, ns: str, pod: str) -> list[dict[str, Any]]:
    """The ``Pulled`` events of one pod: ``{"image", "seconds"}`` or ``{"image", "present":
    True}`` (no pull happened: the node had the image)."""
    events = api.read(api.core.list_namespaced_event, ns,
                      field_selector=f"reason=Pulled,involvedObject.name={pod}")
    out: list[dict[str, Any]] = []
    for ev in events["items"]:
        msg = ev.get("message", "")
        m = PULLED.search(msg)
        if m and (seconds := go_duration_s(m["took"])) is not None:
            out.append({"image": m["image"], "seconds": round(seconds, 3)})
        elif (p := PRESENT.search(msg)) is not None:
            out.append({"image": p["image"], "present": True})
    return out


def _ts(text: Any) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _summary(pod: dict[str, Any]) -> dict[str, Any]:
    st = pod.get("status") or {}
    cs = (st.get("containerStatuses") or [{}])[0]
    ready: dict[str, Any] = next((c for c in st.get("conditions") or []
                                  if c.get("type") == "Ready"), {})
    return {"name": pod["metadata"]["name"], "restarts": int(cs.get("restartCount") or 0),
            "ready": ready.get("status") == "True", "ready_at": _ts(ready.get(
                "lastTransitionTime")), "created": _ts(pod["metadata"].get("creationTimestamp")),
            "exited": _ts(((cs.get("lastState") or {}).get("terminated") or {}).get(
                "finishedAt")), "exit_code": ((cs.get("lastState") or {}).get("terminated")
                                              or {}).get("exitCode"),
            "started": _ts(((cs.get("state") or {}).get("running") or {}).get("startedAt")),
            "k8s_node": (pod.get("spec") or {}).get("nodeName")}


def pod_changes(before: dict[str, dict[str, Any]] | None, pods: list[dict[str, Any]],
                now: float) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """What happened to the Ray pods between two snapshots, as the local target's supervisor
    reports it (``node_started`` / ``node_exited`` / ``node_ready`` / ``node_stopped``, ``node``:
    the pod), each at the time the pod's status gives; and the new snapshot. The first call
    (``before`` None) only takes the snapshot."""
    after = {p["metadata"]["uid"]: _summary(p) for p in pods}
    if before is None:
        return [], after
    out: list[dict[str, Any]] = []
    for uid, s in after.items():
        old = before.get(uid)
        if old is None:
            out.append({"ts": s["created"] or now, "event": "node_started", "node": s["name"],
                        "k8s_node": s["k8s_node"], "new_pod": True})
        elif s["restarts"] > old["restarts"]:
            out.append({"ts": s["exited"] or now, "event": "node_exited", "node": s["name"],
                        "exit_code": s["exit_code"], "restart_count": s["restarts"]})
            out.append({"ts": s["started"] or now, "event": "node_started", "node": s["name"],
                        "restart_count": s["restarts"]})
        if s["ready"] and not (old or {}).get("ready"):
            out.append({"ts": s["ready_at"] or now, "event": "node_ready", "node": s["name"]})
    out += [{"ts": now, "event": "node_stopped", "node": s["name"]}
            for uid, s in before.items() if uid not in after]
    return sorted(out, key=lambda e: e["ts"]), after
