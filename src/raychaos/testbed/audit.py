"""The bed's audit log: the API server records every request of the kubeconfig's user and of
every ServiceAccount (a run under ``deploy/rbac.yaml``'s, or a scheduled game day's), metadata
only, one JSON event per stage; the bed's own parts authenticate as another user, ``admin``, and
are not followed. :func:`audit_requests` folds it back into one record per request. It is the
independent count of what a run asked the real API server, and — the RBAC authorizer's own
``authorization.k8s.io/decision`` on each — of what a Role allowed and what it refused (tests
and benches use it).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["AUDIT_LOG", "AUDIT_POLICY", "DECISION", "USER", "audit_requests"]

AUDIT_LOG = "audit.log"
#: who the kubeconfig ``up`` writes is, to the API server (the audit log follows this user only:
#: the operator's and the controllers' own traffic would bury a run's)
USER = "raychaos-user"
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy",
                "omitStages": ["RequestReceived"],
                "rules": [{"level": "Metadata", "users": [USER]},
                          {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
                          {"level": "None"}]}
DECISION = "authorization.k8s.io/decision"


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def audit_requests(path: Path, since: float = 0.0) -> list[dict[str, Any]]:
    """One record per request of an API server's JSON audit log (its stages folded: a watch
    logs ResponseStarted, then ResponseComplete when it ends); a torn last line is skipped."""
    by_id: dict[str, dict[str, Any]] = {}
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        t = _epoch(ev.get("requestReceivedTimestamp") or ev.get("stageTimestamp"))
        if t < since:
            continue
        ref = ev.get("objectRef") or {}
        resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
        rec = by_id.setdefault(ev.get("auditID", ""), {
            "t": t, "verb": ev.get("verb"), "uri": ev.get("requestURI"), "code": None,
            "agent": ev.get("userAgent", ""), "user": (ev.get("user") or {}).get("username"),
            "group": ref.get("apiGroup", ""), "resource": resource,
            "namespace": ref.get("namespace"), "name": ref.get("name"),
            "decision": (ev.get("annotations") or {}).get(DECISION)})
        if ev.get("stage") == "ResponseComplete" or rec["code"] is None:
            rec["code"] = (ev.get("responseStatus") or {}).get("code")
        if ev.get("stage") == "ResponseStarted":  # a watch: open until it completes
            rec["code"] = None
    return sorted(by_id.values(), key=lambda r: r["t"])
