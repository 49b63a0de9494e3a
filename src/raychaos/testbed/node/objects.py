"""Small helpers on Kubernetes objects as plain dicts (the shape the API serves)."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["event_body", "now", "quantity", "set_condition"]


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def quantity(text: Any) -> float:
    """A Kubernetes quantity as a float ('500m' → 0.5, '1Gi' → 1073741824)."""
    s = str(text).strip()
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
             "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "m": 1e-3}
    for u in sorted(units, key=len, reverse=True):
        if s.endswith(u):
            return float(s[: -len(u)]) * units[u]
    return float(s or 0)


def set_condition(obj: dict[str, Any], ctype: str, status: str, reason: str | None = None,
                  message: str | None = None, probe_time: bool = True) -> bool:
    """Set one status condition (lastTransitionTime moves only when status changes)."""
    conds = obj.setdefault("status", {}).setdefault("conditions", [])
    for c in conds:
        if c["type"] == ctype:
            changed = bool(c["status"] != status or c.get("reason") != reason)
            if c["status"] != status:
                c["lastTransitionTime"] = now()
            c["status"] = status
            for k, v in (("reason", reason), ("message", message)):
                if v is not None:
                    c[k] = v
                else:
                    c.pop(k, None)
            return changed
    c = {"type": ctype, "status": status}
    if probe_time:
        c["lastProbeTime"] = None
    c["lastTransitionTime"] = now()
    if reason is not None:
        c["reason"] = reason
    if message is not None:
        c["message"] = message
    conds.append(c)
    return True


def event_body(obj: dict[str, Any], reason: str, message: str, component: str,
               etype: str | None = None, host: str | None = None,
               field_path: str | None = None) -> dict[str, Any]:
    """An Event about ``obj`` in the shape kubelet and scheduler write them (golden
    events-list): the world stores it, the bed's agent posts it to the real API."""
    meta = obj["metadata"]
    ns = meta.get("namespace") or "default"
    ts = now()
    ev: dict[str, Any] = {
        "metadata": {"name": f"{meta['name']}.{time.time_ns() & 0xFFFFFFFFFFFFFFFF:016x}",
                     "namespace": ns},
        "involvedObject": {"kind": obj.get("kind", "Pod"), "namespace": ns, "name": meta["name"],
                           "uid": meta.get("uid", ""), "apiVersion": obj.get("apiVersion", "v1")},
        "reason": reason, "message": message,
        "source": {"component": component, **({"host": host} if host else {})},
        "firstTimestamp": ts, "lastTimestamp": ts, "count": 1, "type": etype or "Normal",
        "eventTime": None, "reportingComponent": component, "reportingInstance": host or ""}
    if field_path:
        ev["involvedObject"]["fieldPath"] = field_path
    return ev
