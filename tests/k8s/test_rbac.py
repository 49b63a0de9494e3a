"""deploy/rbac.yaml grants exactly what the code calls: recorded on the fake API server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.k8s._faults import drain, saturate, throttle
from tests.k8s.fakeapi import RECORDED_RBAC

pytestmark = pytest.mark.k8s

RBAC = Path(__file__).resolve().parents[2] / "deploy" / "rbac.yaml"
CLUSTER_SCOPED = {"nodes", "customresourcedefinitions"}


def granted() -> dict[tuple[str, str, str], str]:
    """(verb, group, resource) → kind of the role granting it."""
    out = {}
    for doc in yaml.safe_load_all(RBAC.read_text()):
        if doc["kind"] in ("Role", "ClusterRole"):
            for rule in doc["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        for v in rule["verbs"]:
                            out[(v, g, r)] = doc["kind"]
    return out


def tour(fake, make_target) -> set[tuple[str, str, str]]:  # noqa: ANN001
    """Run every fault, undo and cleanup once; return what dry-run planned but could not send."""
    with fake.lock:
        fake.put("customresourcedefinitions", {"metadata": {"name": "networkchaos.chaos-mesh.org"}})
    t = make_target()
    t.describe()
    ev = t.kill_head("pod", {})
    t.wait_head_back(ev["old"], timeout=3)
    rec: dict = {}
    drain(t, record=rec, count=1, deadline_s=2)
    t.undo(rec)
    throttle(t, 1e6, nodes=["gpu-0"], registry_hosts=["r.example"], record={})
    saturate(t, record={})
    worker = next(n.name for n in t.nodes() if not n.is_head and n.state == "ALIVE")
    cut: dict = {}
    t.cut_network(nodes=[worker], record=cut)
    t.undo(cut)
    flags: dict = {}  # Ray's fault flags: the group's template patched, the pod recreated
    t.restart_with_env(nodes=[worker], env={"RAY_testing_asio_delay_us": "x=1:2"}, wait_s=5,
                       record=flags)
    t.undo(flags)
    t.cluster_events(0)
    t.cleanup_run()
    with fake.lock:
        fake.remove("customresourcedefinitions", "", "networkchaos.chaos-mesh.org")
    saturate(t, record={}, nodes=["gpu-0", "gpu-1"])
    worker = next(n.name for n in t.nodes() if not n.is_head and n.state == "ALIVE")
    t.cut_network(nodes=[worker], record={})  # the DaemonSet kind of cut
    t.cleanup_run()
    dry = make_target(dry_run=True)
    dry.kill_head("gcs", {})
    planned = set()
    for call in dry.planned_calls():  # exec is a websocket the fake does not serve
        m = re.match(r"/api/v1/namespaces/[^/]+/pods/[^/]+/exec$", call["path"])
        if m:
            planned |= {("create", "", "pods/exec"), ("get", "", "pods/exec")}
    return planned


def test_rbac_grants_every_call_and_nothing_unused(fake, make_target):
    planned = tour(fake, make_target)
    used = set(RECORDED_RBAC) | planned
    grants = granted()
    missing = sorted(u for u in used if u not in grants)
    assert not missing, f"deploy/rbac.yaml lacks {missing}"
    unused = sorted(g for g in grants if g not in used)
    assert not unused, f"deploy/rbac.yaml grants {unused} that no code path uses"
    for verb, group, resource in used:
        kind = grants[(verb, group, resource)]
        assert (kind == "ClusterRole") == (resource in CLUSTER_SCOPED), (verb, resource, kind)
