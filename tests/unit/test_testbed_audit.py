"""The bed's audit log, read back (``raychaos.testbed.bed.audit_requests``): one record per
request from the API server's JSON lines (a watch's ResponseStarted and ResponseComplete folded
into one, open until it completes), in arrival order, since a moment; a torn line is skipped."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from raychaos.testbed.audit import AUDIT_POLICY, USER, audit_requests

pytestmark = pytest.mark.unit


def _event(audit_id: str, stage: str, verb: str, uri: str, at: str, code: int | None = 200
           ) -> str:
    ev = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
          "auditID": audit_id, "stage": stage, "requestURI": uri, "verb": verb,
          "user": {"username": USER, "groups": ["system:masters", "system:authenticated"]},
          "sourceIPs": ["127.0.0.1"], "userAgent": "OpenAPI-Generator/33.1.0/python",
          "requestReceivedTimestamp": at, "stageTimestamp": at}
    if code is not None:
        ev["responseStatus"] = {"metadata": {}, "code": code}
    return json.dumps(ev)


def test_requests_fold_their_stages_and_keep_arrival_order(tmp_path):
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        _event("a", "ResponseComplete", "patch", "/api/v1/nodes/gpu-a", "2026-12-07T00:00:01Z"),
        _event("w", "ResponseStarted", "watch", "/api/v1/namespaces/ray/pods?watch=true",
               "2026-12-07T00:00:02Z"),
        _event("e", "ResponseComplete", "create",
               "/api/v1/namespaces/ray/pods/demo-gpu-worker-x/eviction",
               "2026-12-07T00:00:03.500000Z", 201),
        _event("w", "ResponseComplete", "watch", "/api/v1/namespaces/ray/pods?watch=true",
               "2026-12-07T00:00:02Z"),
        _event("o", "ResponseStarted", "watch", "/api/v1/nodes?watch=true",
               "2026-12-07T00:00:04Z"),
        '{"kind": "Event", "auditID": "torn", "stage": "Resp']) + "\n")
    got = audit_requests(log)
    assert [(r["verb"], r["code"]) for r in got] == [
        ("patch", 200), ("watch", 200), ("create", 201), ("watch", None)]
    since = datetime(2026, 12, 7, 0, 0, 3, tzinfo=UTC).timestamp()
    assert [r["uri"].rsplit("/", 1)[-1] for r in audit_requests(log, since)] == [
        "eviction", "nodes?watch=true"]
    assert audit_requests(tmp_path / "absent.log") == []


def test_the_policy_follows_the_kubeconfig_user_only():
    rules = AUDIT_POLICY["rules"]
    assert rules[0] == {"level": "Metadata", "users": [USER]} and rules[-1] == {"level": "None"}
    assert AUDIT_POLICY["omitStages"] == ["RequestReceived"]
