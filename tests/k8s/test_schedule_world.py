"""``raychaos schedule``'s manifests are applied to the world (over HTTP, with the official
client) and their Role, ClusterRole and opt-in network Role grant every call a game day made
there — the harness's whole tour plus a RayJob and a RayService target — and nothing more than
``DOCUMENTED_EXTRA``. The calls are the world's own record of this run (``w.rbac``, per world
instance), not a module-global list."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes import client, config, utils

from raychaos.run.schedule import schedule_manifests
from tests.k8s.test_rbac import tour

pytestmark = pytest.mark.k8s
PLAN = Path(__file__).resolve().parents[2] / "experiments" / "gamedays" / "weekly.yaml"
#: granted though this run did not call it: nothing
DOCUMENTED_EXTRA: set[tuple[str, str, str]] = set()
PRIVILEGED = {("create", "", "pods"), ("create", "apps", "daemonsets")}


def _grants(w, kinds: tuple[str, ...], names: set[str]) -> set[tuple[str, str, str]]:  # noqa: ANN001
    out = set()
    for plural in kinds:
        for role in w.store.list(plural):
            if role["metadata"]["name"] not in names:
                continue
            for rule in role["rules"]:
                out |= {(v, g, r) for g in rule["apiGroups"] for r in rule["resources"]
                        for v in rule["verbs"]}
    return out


def test_schedule_manifests_apply_and_grant_exactly_what_a_game_day_calls(sim, make_target,
                                                                          monkeypatch):
    manifests = schedule_manifests(PLAN, "0 3 * * 1", "ray", "raychaos:0.1.0",
                                   plan_in_image="experiments/gamedays/weekly.yaml",
                                   target_namespace="ray", network=True)
    cfg = client.Configuration()
    config.load_kube_config(sim.kubeconfig, client_configuration=cfg)
    api = client.ApiClient(cfg)
    try:
        for m in manifests:
            utils.create_from_dict(api, m, namespace=m["metadata"].get("namespace"))
    finally:
        api.close()
    kinds = [(m["kind"], m["metadata"]["name"]) for m in manifests]
    for kind, name in kinds:
        plural = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding":
                  "rolebindings", "ClusterRole": "clusterroles", "ClusterRoleBinding":
                  "clusterrolebindings", "CronJob": "cronjobs"}[kind]
        assert any(o["metadata"]["name"] == name for o in sim.store.list(plural)), (kind, name)
    cron = sim.store.list("cronjobs")[0]
    assert cron["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] > 0

    before = set(sim.rbac)
    tour(sim, make_target, monkeypatch)
    used = set(sim.rbac) - before  # what the game day called, not the kubectl apply above
    for sub in ("pods/exec", "pods/portforward"):  # a WebSocket GET, authorized as create
        if ("get", "", sub) in used:
            used.add(("create", "", sub))
    names = {n for _k, n in kinds}
    base = _grants(sim, ("roles", "clusterroles"), names - {n for n in names
                                                            if n.endswith("-network")})
    network = _grants(sim, ("roles",), {n for n in names if n.endswith("-network")})
    missing = sorted(used - base - network)
    assert not missing, f"the schedule's roles lack {missing}"
    unused = sorted((base | network) - used - DOCUMENTED_EXTRA)
    assert not unused, f"the schedule's roles grant {unused} that the game day did not call"
    assert not PRIVILEGED & base, "privileged creates belong in the opt-in network Role only"
    assert PRIVILEGED <= network
    assert ("get", "ray.io", "rayjobs") in used and ("get", "ray.io", "rayservices") in used
