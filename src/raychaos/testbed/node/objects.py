"""Small helpers on Kubernetes objects as plain dicts (the shape the API serves)."""

from __future__ import annotations

import time
from typing import Any

__all__ = ["now", "quantity", "set_condition"]


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
