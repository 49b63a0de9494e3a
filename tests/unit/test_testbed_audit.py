"""The bed's audit log, read back (``raychaos.testbed.audit.audit_requests``): one record per
request from the API server's JSON lines (a watch's ResponseStarted and ResponseComplete folded
into one, open until it completes), in arrival order, since a moment, with who asked, for what
(group, resource/subresource, namespace, name) and the authorizer's decision; a torn line is
skipped."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from raychaos.testbed.audit import AUDIT_POLICY, DECISION, USER, audit_requests

pytestmark = pytest.mark.unit


def _event(audit_id: str, stage: str, verb: str, uri: str, at: str, code: int | None = 200,
           user: str = USER, ref: dict | None = None, decision: str = "allow") -> str:
    ev = {"kind": "Event", "apiVersion": "audit.k8s.io/v1", "level": "Metadata",
          "auditID": audit_id, "stage": stage, "requestURI": uri, "verb": verb,
          "user": {"username": user, "groups": ["system:masters", "system:authenticated"]},
          "sourceIPs": ["127.0.0.1"], "userAgent": "OpenAPI-Generator/33.1.0/python",
          "requestReceivedTimestamp": at, "stageTimestamp": at}
    if code is not None:
        ev["responseStatus"] = {"metadata": {}, "code": code}
    if ref is not None:
        ev["objectRef"] = ref
    ev["annotations"] = {DECISION: decision, "authorization.k8s.io/reason": ""}
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


def test_a_record_says_who_asked_for_what_and_whether_rbac_allowed_it(tmp_path):
    sa = "system:serviceaccount:ray:raychaos"
    log = tmp_path / "audit.log"
    log.write_text("\n".join([
        _event("x", "ResponseComplete", "create",
               "/api/v1/namespaces/ray/pods/demo-head-x/exec?command=kill", "2026-12-07T00:00:01Z",
               101, sa, {"resource": "pods", "namespace": "ray", "name": "demo-head-x",
                         "apiVersion": "v1", "subresource": "exec"}),
        _event("n", "ResponseComplete", "patch", "/api/v1/nodes/gpu-a", "2026-12-07T00:00:02Z",
               403, sa, {"resource": "nodes", "name": "gpu-a", "apiVersion": "v1"}, "forbid"),
        _event("l", "ResponseComplete", "list", "/apis/apps/v1/namespaces/ray/daemonsets",
               "2026-12-07T00:00:03Z", 200, USER, {"resource": "daemonsets", "namespace": "ray",
                                                   "apiGroup": "apps", "apiVersion": "v1"}),
    ]) + "\n")
    got = audit_requests(log)
    assert [(r["user"], r["verb"], r["group"], r["resource"], r["namespace"], r["name"],
             r["decision"], r["code"]) for r in got] == [
        (sa, "create", "", "pods/exec", "ray", "demo-head-x", "allow", 101),
        (sa, "patch", "", "nodes", None, "gpu-a", "forbid", 403),
        (USER, "list", "apps", "daemonsets", "ray", None, "allow", 200)]


def test_the_policy_follows_the_kubeconfig_user_and_service_accounts_only():
    rules = AUDIT_POLICY["rules"]
    assert rules[0] == {"level": "Metadata", "users": [USER]} and rules[-1] == {"level": "None"}
    assert rules[1] == {"level": "Metadata", "userGroups": ["system:serviceaccounts"]}
    assert len(rules) == 3
    assert AUDIT_POLICY["omitStages"] == ["RequestReceived"]
