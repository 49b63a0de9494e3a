"""deploy/rbac.yaml, and the Roles ``raychaos schedule`` writes, against the real RBAC
authorizer: the harness's whole tour of the Kubernetes API runs *as* the ServiceAccount they
bind, on a bed of its own (the real kube-apiserver, controllers, scheduler and KubeRay operator;
simulated nodes). What it called and whether RBAC allowed each call are read from the API
server's audit log (``authorization.k8s.io/decision``), not from our code: a call the Role lacks
is a real 403, a rule no call used is unused. And a Role missing one rule is refused for real:
the drain stops in one sentence naming what is forbidden, and its undo leaves nothing behind.

Its own bed, not the package's: the tour kills the head, drains GPU nodes and recreates pods of
a RayCluster with token auth (KubeRay 1.5 has no ``authOptions``: ``RAY_AUTH_MODE`` and
``RAY_AUTH_TOKEN`` from a Secret in the head container, which is what the target reads).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, utils

from raychaos.config.settings import KubernetesSpec
from raychaos.errors import FaultFailed, RaychaosError, TargetBusy
from raychaos.run.schedule import schedule_manifests
from raychaos.targets.kubernetes import network, registry
from raychaos.targets.kubernetes.lease import LeaseLock
from raychaos.targets.kubernetes.target import KubernetesTarget
from raychaos.testbed import bed as testbed
from raychaos.testbed.demo import DEMO
from tests.k8s.simbed.conftest import REPO, admin, delete_all, get, narrowed_account, until

pytestmark = pytest.mark.k8s

RBAC = REPO / "deploy" / "rbac.yaml"
PLAN = REPO / "experiments" / "gamedays" / "weekly.yaml"
NS = "ray"
#: what only a ClusterRole can grant: cluster-scoped objects, and a drain's pods in any namespace
CLUSTER_SCOPED = {("list", "nodes"), ("get", "pods"), ("patch", "nodes"),
                  ("get", "customresourcedefinitions"), ("list", "pods"),
                  ("create", "pods/eviction"), ("list", "poddisruptionbudgets")}
#: the schedule's privileged creates: only in its opt-in network Role
PRIVILEGED = {("create", "", "pods"), ("create", "apps", "daemonsets")}
_PLURAL = {"ServiceAccount": "serviceaccounts", "Role": "roles", "RoleBinding": "rolebindings",
           "ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
           "Secret": "secrets", "Deployment": "deployments", "Service": "services",
           "RayCluster": "rayclusters", "RayJob": "rayjobs", "RayService": "rayservices",
           "ReplicaSet": "replicasets", "PodDisruptionBudget": "poddisruptionbudgets",
           "CronJob": "cronjobs"}


def _path(doc: dict[str, Any], ns: str | None = NS) -> str:
    """The collection path of ``doc``'s kind (namespaced unless ``ns`` is None)."""
    api = doc["apiVersion"]
    base = f"/api/{api}" if "/" not in api else f"/apis/{api}"
    where = f"/namespaces/{ns}" if ns else ""
    return f"{base}{where}/{_PLURAL[doc['kind']]}"


def _create(b: testbed.Bed, doc: dict[str, Any]) -> dict[str, Any]:
    ns = None if doc["kind"].startswith("Cluster") else doc["metadata"].get("namespace", NS)
    code, body = admin(b).call("POST", _path(doc, ns), doc, timeout=30)
    assert code == 201, (doc["kind"], doc["metadata"]["name"], code, body)
    return body


def _delete(b: testbed.Bed, doc: dict[str, Any]) -> None:
    ns = None if doc["kind"].startswith("Cluster") else doc["metadata"].get("namespace", NS)
    code, body = admin(b).call("DELETE", f"{_path(doc, ns)}/{doc['metadata']['name']}")
    assert code in (200, 202, 404), (code, body)


def _token_cluster() -> list[dict[str, Any]]:
    """The bed's demo (Redis, its Service, RayCluster ``demo``) with Ray token auth: a Secret
    and, in the head container, ``RAY_AUTH_MODE=token`` and ``RAY_AUTH_TOKEN`` from it."""
    docs = [d for d in yaml.safe_load_all(DEMO.read_text()) if d]
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-ray-token"},
              "data": {"auth_token": base64.b64encode(b"tour-token").decode()}}
    for doc in docs:
        if doc["kind"] == "RayCluster":
            head = doc["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
            head["env"] = [{"name": "RAY_AUTH_MODE", "value": "token"},
                           {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {
                               "name": "demo-ray-token", "key": "auth_token"}}}]
    return [secret, *docs]


@pytest.fixture(scope="module")
def rbacbed(bed_state: Path) -> Iterator[testbed.Bed]:
    b = testbed.up("rbac", NS, say=print, cluster=False,
                   sim_nodes=[dict(n) for n in testbed.DEFAULT_NODES])
    try:
        for doc in _token_cluster():
            _create(b, doc)
        until("RayCluster ray/demo ready to the operator",
               lambda: ((get(b, f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/demo") or {})
                        .get("status") or {}).get("state") == "ready", 300)
        yield b
    finally:
        stopped = testbed.down("rbac")
        assert "kube-apiserver" in stopped, stopped


def _apply(b: testbed.Bed, docs: list[dict[str, Any]]) -> None:
    """``kubectl apply`` of manifests, with the official client, as the bed's admin."""
    cfg = client.Configuration()
    config.load_kube_config(str(b.root / "kubeconfig-system"), client_configuration=cfg)
    api = client.ApiClient(cfg)
    try:
        for m in docs:
            utils.create_from_dict(api, m, namespace=m["metadata"].get("namespace"))
    finally:
        api.close()


def _target(kubeconfig: Path, **kw: Any) -> KubernetesTarget:
    spec = {"cluster": "demo", "namespace": NS, "kubeconfig": str(kubeconfig)} | kw
    t = KubernetesTarget(KubernetesSpec(**spec), run_id="run1")  # type: ignore[arg-type]
    t.connect()
    return t


def tour(b: testbed.Bed, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every target method that talks to the API, once, as ``kubeconfig``'s user. Simulated
    nodes run nothing: what needs a container (exec, logs, port-forward, a pod's metrics, a
    throttle's report) fails, but the request is made, authorized and audited."""
    monkeypatch.setattr(registry, "LANDED_WAIT_S", 0.5)
    monkeypatch.setattr(registry, "CLEAN_WAIT_S", 0.5)
    monkeypatch.setattr(network, "INJECTED_WAIT_S", 0.3)
    t = _target(kubeconfig, cluster=None)  # found by listing the namespace's RayClusters
    try:
        _tour(b, t, kubeconfig)
    finally:
        t.close()


def _tour(b: testbed.Bed, t: KubernetesTarget, kubeconfig: Path) -> None:  # noqa: PLR0915
    assert t.handle.dashboard.token == "tour-token", "the token came from the Secret"
    t.describe()
    t.gcs_alive(0.5)  # the port-forward to the head
    t.cluster_events(0)
    t.metrics_texts(0.5)  # the pods' metrics through the pod proxy
    # one run at a time: a live holder refuses (read back to name it); a dead one's Lease,
    # made a minute old rather than waited out, is taken over (patched)
    dead = LeaseLock(t._api(), NS, "demo", duration_s=60)
    dead.acquire("dead")
    with pytest.raises(TargetBusy):
        t.run_lock().acquire("run1")
    dead._stop.set()
    code, body = admin(b).call(
        "PATCH", f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{dead.name}",
        {"spec": {"renewTime": "2000-01-01T00:00:00.000000Z"}},
        content_type="application/merge-patch+json")
    assert code == 200, (code, body)
    lock = t.run_lock()
    lock.acquire("run1")
    lock.release()
    registry.report_of(t._api(), NS, t.handle.pod_named("head")["metadata"]["name"])
    ev = t.kill_head("pod", {})
    t.wait_head_back(ev["old"], timeout=120)
    for attempt in (lambda: t.kill_head("gcs", {}),
                    lambda: t.throttle_registry_pulls(rate_bps=1e6, latency_ms=0, error_rate=0,
                                                      image_mb=32, restart_workers=None,
                                                      record={"undo": {}})):
        with pytest.raises(FaultFailed):
            attempt()
    rec: dict = {}
    t.drain_nodes(count=1, selector=None, deadline_s=60, reason="preemption", replace=True,
                  replace_delay_s=0, record=rec)
    t.undo(rec)
    with pytest.raises(RaychaosError):  # the cleanup pods cannot report on sim nodes
        t.undo({"undo": {"kind": "throttle_registry_pulls", "nodes": ["gpu-a"],
                         "run_id": "run1", "objects": [
                             {"api": "daemonset", "namespace": NS,
                              "name": "raychaos-pull-throttle-run1"}]}})
    with pytest.raises(RaychaosError):  # no container answers the transfer probe
        t.saturate_network(nodes=["worker-1"], bandwidth_bps=8e6, loss_pct=0, latency_ms=0,
                           flood=True, partition=False, flood_s=5, record={})
    with pytest.raises(FaultFailed):  # nobody injects it on simulated nodes
        network._networkchaos(t._api(), NS, "raychaos-net-run1", {"raychaos.io/run-id": "run1"},
                              [t.handle.pod_named("worker-1")], "8mbit")
    t.undo({"undo": {"kind": "saturate_network", "objects": [], "floods": [
        {"namespace": NS, "pod": "gone", "container": "c"}]}})
    t.cleanup_run()
    # a budget that allows no disruption: the eviction's 429 is explained from the budgets
    pdb = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
           "metadata": {"name": "none"}, "spec": {"maxUnavailable": 0, "selector": {
               "matchLabels": {"ray.io/node-type": "worker"}}}}
    _create(b, pdb)
    try:
        with pytest.raises(FaultFailed):
            t.drain_nodes(count=1, selector=None, deadline_s=1, reason="preemption",
                          replace=True, replace_delay_s=0, record=rec)
        t.undo(rec)
    finally:
        _delete(b, pdb)
    # a drain empties the node: a pod of another namespace (a ReplicaSet's) is evicted too
    others = []
    for node in ("gpu-a", "gpu-b"):
        rs = {"apiVersion": "apps/v1", "kind": "ReplicaSet",
              "metadata": {"name": f"elsewhere-{node}", "namespace": "default"},
              "spec": {"replicas": 1, "selector": {"matchLabels": {"app": f"e-{node}"}},
                       "template": {"metadata": {"labels": {"app": f"e-{node}"}}, "spec": {
                           "nodeName": node, "containers": [{"name": "c", "image": "x"}]}}}}
        others.append(_create(b, rs))
    try:
        t.drain_nodes(count=1, selector={"raychaos.io/node-pool": "gpu"}, deadline_s=60,
                      reason="preemption", replace=True, replace_delay_s=0, record=rec)
        t.undo(rec)
    finally:
        for rs in others:
            _delete(b, rs)
    cut: dict = {}  # a blackout: a NetworkChaos partition (the CRD is the real one)
    try:
        t.cut_network(nodes=["worker-1"], record=cut)
    except FaultFailed:
        pass  # nobody injects it on simulated nodes: the object was made, read, and goes
    t.undo(cut)
    flags: dict = {}  # Ray's fault flags: the group's template patched, the pod recreated
    t.restart_with_env(nodes=["worker-2"], env={"RAY_testing_asio_delay_us": "x=1:2"},
                       wait_s=120, record=flags)
    t.undo(flags)
    # a target named by its RayJob (the operator follows its clusterSelector to demo) or its
    # RayService (one the operator leaves alone: an invalid spec only gets an event; its
    # status written as the operator writes an active cluster's)
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "train"},
           "spec": {"entrypoint": "python -c pass", "clusterSelector": {"ray.io/cluster": "demo"}}}
    _create(b, job)
    until("RayJob ray/train following demo", lambda: ((get(
        b, f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/train") or {}).get("status") or {}).get(
        "rayClusterName") == "demo")
    svc = {"apiVersion": "ray.io/v1", "kind": "RayService", "metadata": {"name": "chat"},
           "spec": {"rayClusterConfig": {"headGroupSpec": {
               "rayStartParams": {}, "headService": {"metadata": {"name": "not-allowed"}},
               "template": {"spec": {"containers": [{"name": "ray-head",
                                                     "image": "rayproject/ray:2.60.0"}]}}}}}}
    _create(b, svc)
    code, body = admin(b).call("PATCH", f"/apis/ray.io/v1/namespaces/{NS}/rayservices/chat/status",
                               {"status": {"activeServiceStatus": {"rayClusterName": "demo"}}},
                               content_type="application/merge-patch+json")
    assert code == 200, (code, body)
    try:
        for kind, name in (("rayjob", "train"), ("rayservice", "chat")):
            owned = _target(kubeconfig, kind=kind, name=name, cluster=None)
            try:
                assert owned.owner()["kind"] == kind
                owned.serve_url()
            finally:
                owned.close()
    finally:
        _delete(b, job)
        _delete(b, svc)


def _used(b: testbed.Bed, user: str, since: float) -> set[tuple[str, str, str]]:
    """(verb, group, resource) of every request ``user`` made since ``since``, each allowed by
    RBAC: a request it refused fails the test here, naming it."""
    sent = b.requests(since, user=user)
    assert sent, f"the audit log has no request of {user}"
    refused = sorted({(r["verb"], r["group"], r["resource"], r["code"]) for r in sent
                      if r["decision"] != "allow"})
    assert not refused, f"RBAC refused {user}: {refused}"
    used = {(r["verb"], r["group"], r["resource"]) for r in sent if r["resource"]}
    # a WebSocket GET to exec or port-forward is authorized as get (the request's verb, the one
    # audited) and as create (the API server's own check on the upgrade since 1.35:
    # AuthorizePodWebsocketUpgradeCreatePermission; test_exec_needs_create_as_well)
    for sub in ("pods/exec", "pods/portforward"):
        if ("get", "", sub) in used:
            used.add(("create", "", sub))
    return used


def _rules(docs: list[dict[str, Any]], kinds: tuple[str, ...]) -> dict[tuple[str, str, str],
                                                                      str]:
    """(verb, group, resource) → kind of the role granting it."""
    out = {}
    for doc in docs:
        if doc["kind"] in kinds:
            for rule in doc["rules"]:
                out |= {(v, g, r): doc["kind"] for g in rule["apiGroups"]
                        for r in rule["resources"] for v in rule["verbs"]}
    return out


@pytest.fixture(scope="module")
def rbac_docs(rbacbed: testbed.Bed) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    _apply(rbacbed, docs)
    return docs


def test_rbac_grants_every_call_and_nothing_unused(rbacbed, rbac_docs, tmp_path, monkeypatch):
    kubeconfig = rbacbed.serviceaccount_kubeconfig(NS, "raychaos", tmp_path / "kubeconfig")
    since = time.time()
    tour(rbacbed, kubeconfig, monkeypatch)
    used = _used(rbacbed, f"system:serviceaccount:{NS}:raychaos", since)
    grants = _rules(rbac_docs, ("Role", "ClusterRole"))
    unused = sorted(g for g in grants if g not in used)
    assert not unused, f"deploy/rbac.yaml grants {unused} that no code path uses"
    for verb, group, resource in used:
        kind = grants[(verb, group, resource)]
        assert (kind == "ClusterRole") == ((verb, resource) in CLUSTER_SCOPED), \
            (verb, resource, kind)


def test_a_role_without_eviction_is_refused_for_real_and_the_drain_leaves_nothing(
        rbacbed, rbac_docs, tmp_path):
    """The ClusterRole without ``pods/eviction``: the API server answers 403 (its audit log says
    ``forbid``), the drain fails in one sentence naming it, and undo uncordons the node."""
    kubeconfig, made = narrowed_account(rbacbed, NS, "no-eviction", "ClusterRole", lambda rules: [
        r for r in rules if r["resources"] != ["pods/eviction"]], tmp_path / "kubeconfig")
    since = time.time()
    t = _target(kubeconfig)
    rec: dict = {}
    try:
        with pytest.raises(RaychaosError, match=r"(?i)forbidden") as err:
            t.drain_nodes(count=1, selector=None, deadline_s=30, reason="preemption",
                          replace=True, replace_delay_s=0, record=rec)
        print("refused:", err.value)
        assert "\n" not in str(err.value).strip(), str(err.value)
        t.undo(rec)
    finally:
        t.close()
    sent = rbacbed.requests(since, user=f"system:serviceaccount:{NS}:no-eviction")
    forbid = [r for r in sent if r["decision"] == "forbid"]
    assert [(r["verb"], r["resource"], r["code"]) for r in forbid] == [
        ("create", "pods/eviction", 403)], forbid
    nodes = get(rbacbed, "/api/v1/nodes")["items"]
    assert not [n["metadata"]["name"] for n in nodes if n["spec"].get("unschedulable")]
    delete_all(rbacbed, made)


def test_exec_needs_create_as_well(rbacbed, rbac_docs, tmp_path):
    """A Role granting ``pods/exec`` only ``get``: the WebSocket upgrade is allowed as the get
    it is (the audit log's decision) and then refused by the API server's own check for create
    (403): the gcs-mode head kill fails naming it, and the head pod is the same one."""
    def get_only(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{**r, "verbs": ["get"]} if r["resources"] == ["pods/exec"] else r
                for r in rules]

    kubeconfig, made = narrowed_account(rbacbed, NS, "exec-get-only", "Role", get_only,
                                        tmp_path / "kubeconfig")
    since = time.time()
    t = _target(kubeconfig)
    try:
        before = t.handle.pod_named("head")["metadata"]["uid"]
        with pytest.raises(RaychaosError, match=r"(?i)forbidden") as err:
            t.kill_head("gcs", {})
        print("refused:", err.value)
        assert t.handle.pod_named("head")["metadata"]["uid"] == before
    finally:
        t.close()
    sent = rbacbed.requests(since, user=f"system:serviceaccount:{NS}:exec-get-only")
    execs = [(r["verb"], r["decision"], r["code"]) for r in sent if r["resource"] == "pods/exec"]
    assert execs and set(execs) == {("get", "allow", 403)}, execs
    delete_all(rbacbed, made)


def test_schedule_manifests_apply_and_grant_exactly_what_a_game_day_calls(rbacbed, tmp_path,
                                                                          monkeypatch):
    manifests = schedule_manifests(PLAN, "0 3 * * 1", NS, "raychaos:0.1.0",
                                   plan_in_image="experiments/gamedays/weekly.yaml",
                                   target_namespace=NS, network=True)
    _apply(rbacbed, manifests)
    for m in manifests:
        ns = None if m["kind"].startswith("Cluster") else NS
        assert get(rbacbed, f"{_path(m, ns)}/{m['metadata']['name']}"), m["metadata"]
    [cron] = [get(rbacbed, f"/apis/batch/v1/namespaces/{NS}/cronjobs/{m['metadata']['name']}")
              for m in manifests if m["kind"] == "CronJob"]
    assert cron["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] > 0
    account = next(m for m in manifests if m["kind"] == "ServiceAccount")["metadata"]["name"]
    kubeconfig = rbacbed.serviceaccount_kubeconfig(NS, account, tmp_path / "kubeconfig")
    since = time.time()
    tour(rbacbed, kubeconfig, monkeypatch)
    used = _used(rbacbed, f"system:serviceaccount:{NS}:{account}", since)
    names = {m["metadata"]["name"] for m in manifests if "Role" in m["kind"]
             and "Binding" not in m["kind"]}
    base = set(_rules([m for m in manifests if m["metadata"]["name"] in names
                       and not m["metadata"]["name"].endswith("-network")],
                      ("Role", "ClusterRole")))
    net = set(_rules([m for m in manifests if m["metadata"]["name"].endswith("-network")],
                     ("Role",)))
    unused = sorted((base | net) - used)
    assert not unused, f"the schedule's roles grant {unused} that the game day did not call"
    assert not PRIVILEGED & base, "privileged creates belong in the opt-in network Role only"
    assert PRIVILEGED <= net
    assert ("get", "ray.io", "rayjobs") in used and ("get", "ray.io", "rayservices") in used
