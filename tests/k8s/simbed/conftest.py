"""A test bed with simulated nodes (``raychaos testbed up --sim-nodes``): the real etcd,
kube-apiserver, controller-manager, scheduler and KubeRay operator, and nodes whose kubelet runs
nothing (pods Running and Ready at once, no Ray in them). One for the package, in the light
lane: its parts stay in the lane's CPU group; it needs no root."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raychaos.testbed import bed as testbed
from tests.k8s._bed import api as admin  # the bed's admin (not audited: not the run's user)

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="package")
def bed_state(tmp_path_factory) -> Path:  # noqa: ANN001 - pytest fixture
    """One state root for every bed of the package (``down`` finds a bed by it)."""
    root = tmp_path_factory.mktemp("simbed-state")
    os.environ["RAYCHAOS_TESTBED_STATE"] = str(root)
    return root


@pytest.fixture(scope="package")
def simbed(bed_state: Path) -> Iterator[testbed.Bed]:
    """The bed ``sim`` with the default four nodes simulated and the demo RayCluster ready to
    the operator; ``down`` at the end must stop every part it started."""
    b = testbed.up("sim", "ray", say=print, cluster=True,
                   sim_nodes=[dict(n) for n in testbed.DEFAULT_NODES])
    try:
        yield b
    finally:
        stopped = testbed.down("sim")
        assert set(stopped) >= {"kube-apiserver", "kuberay-operator", "sim-nodes"}, stopped


@pytest.fixture(autouse=True)
def _targets_closed(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every KubernetesTarget a test connects is closed after it, however the test made it (a
    module's own helper, the harness run in-process): an open one keeps its pod informer and
    its port-forwards running for the rest of the lane (22 such threads were left at its end)."""
    from raychaos.targets.kubernetes.target import KubernetesTarget

    connected: list[KubernetesTarget] = []
    connect = KubernetesTarget.connect

    def tracked(self: KubernetesTarget) -> None:
        connected.append(self)
        connect(self)

    monkeypatch.setattr(KubernetesTarget, "connect", tracked)
    yield
    for t in connected:
        t.close()


@pytest.fixture
def make_target(simbed: testbed.Bed):  # noqa: ANN201
    """Build (and connect) a target against the sim bed's demo; keywords go to KubernetesSpec."""
    from raychaos.config.settings import KubernetesSpec
    from raychaos.targets.kubernetes.target import KubernetesTarget

    made: list[KubernetesTarget] = []

    def make(connect: bool = True, **spec_kwargs: object) -> KubernetesTarget:
        kw = {"cluster": "demo", "namespace": "ray", "kubeconfig": str(simbed.kubeconfig)}
        target = KubernetesTarget(KubernetesSpec(**(kw | spec_kwargs)), run_id="run1")
        if connect:
            target.connect()
        made.append(target)
        return target

    yield make
    for t in made:
        t.close()


def get(b: testbed.Bed, path: str) -> dict | None:
    """GET ``path`` on the bed's API server as its admin: the object, or None (404)."""
    code, body = admin(b).call("GET", path)
    if code == 404:
        return None
    assert code == 200, (code, body)
    return body


@pytest.fixture
def target(make_target):  # noqa: ANN001, ANN201
    return make_target()


def until(what: str, check: Callable[[], Any], bound_s: float = 180.0,
          detail: Callable[[], Any] = lambda: "") -> Any:  # noqa: ANN401
    """Poll ``check`` until it returns something truthy; fail naming ``what`` (and what
    ``detail()`` says was seen) after ``bound_s`` (a bound for a busy box, not a wait)."""
    deadline = time.monotonic() + bound_s
    while not (got := check()):
        assert time.monotonic() < deadline, f"{what}: not within {bound_s:g} s {detail()}"
        time.sleep(0.2)
    return got


def ready(obj: dict[str, Any]) -> bool:
    """A pod's (or node's) Ready condition is True."""
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or [])


DEMO_PODS = "/api/v1/namespaces/ray/pods?labelSelector=ray.io%2Fcluster%3Ddemo"


def demo_pods(b: testbed.Bed) -> list[tuple[str, str, bool, bool]]:
    """(name, group, Ready, terminating) of the demo's pods, and its state: what a test left."""
    rc = get(b, "/apis/ray.io/v1/namespaces/ray/rayclusters/demo") or {}
    pods = get(b, DEMO_PODS) or {}
    return [("state", str((rc.get("status") or {}).get("state")), True, False)] + [
        (p["metadata"]["name"], p["metadata"]["labels"].get("ray.io/group", ""), ready(p),
         "deletionTimestamp" in p["metadata"]) for p in pods.get("items") or []]


def demo_whole(b: testbed.Bed) -> bool:
    """The demo as the bed made it: ready to the operator, one Ready head, one Ready pod per
    worker group, nothing terminating."""
    rc = get(b, "/apis/ray.io/v1/namespaces/ray/rayclusters/demo") or {}
    pods = (get(b, DEMO_PODS) or {}).get("items") or []
    kinds = sorted((p["metadata"]["labels"].get("ray.io/group"), ready(p)) for p in pods
                   if "deletionTimestamp" not in p["metadata"])
    return (rc.get("status") or {}).get("state") == "ready" and len(kinds) == len(pods) and \
        kinds == [("cpu", True), ("gpu", True), ("headgroup", True)]


Rules = list[dict[str, Any]]
RBAC_DOCS = REPO / "deploy" / "rbac.yaml"


def narrowed_account(b: testbed.Bed, namespace: str, account: str, kind: str,
                     narrow: Callable[[Rules], Rules], kubeconfig: Path
                     ) -> tuple[Path, list[str]]:
    """ServiceAccount ``namespace/account`` bound to deploy/rbac.yaml's Role and ClusterRole,
    the one of ``kind`` passed through ``narrow`` (rules → rules): its kubeconfig (a real token:
    the real RBAC authorizer decides) and the paths of what was made, for :func:`delete_all`."""
    api = admin(b)
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    made: list[tuple[str, dict[str, Any]]] = [
        (f"/api/v1/namespaces/{namespace}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})]
    for doc in yaml.safe_load_all(RBAC_DOCS.read_text()):
        if not doc or doc["kind"] not in ("Role", "ClusterRole"):
            continue
        role = {"apiVersion": doc["apiVersion"], "kind": doc["kind"],
                "metadata": {"name": f"{account}-{doc['kind'].lower()}"},
                "rules": narrow(doc["rules"]) if doc["kind"] == kind else doc["rules"]}
        binding = {"apiVersion": doc["apiVersion"], "kind": f"{doc['kind']}Binding",
                   "metadata": dict(role["metadata"]),
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": doc["kind"],
                               "name": role["metadata"]["name"]},
                   "subjects": [{"kind": "ServiceAccount", "name": account,
                                 "namespace": namespace}]}
        where = f"{rbac}/namespaces/{namespace}/" if doc["kind"] == "Role" else f"{rbac}/"
        made += [(f"{where}{doc['kind'].lower()}s", role),
                 (f"{where}{doc['kind'].lower()}bindings", binding)]
    paths = []
    for collection, doc in made:
        code, body = api.call("POST", collection, doc, timeout=30)
        assert code == 201, (doc["kind"], code, body)
        paths.append(f"{collection}/{doc['metadata']['name']}")
    return b.serviceaccount_kubeconfig(namespace, account, kubeconfig), paths


def delete_all(b: testbed.Bed, paths: list[str]) -> None:
    """DELETE each path, last made first (gone already is fine)."""
    api = admin(b)
    for path in reversed(paths):
        code, body = api.call("DELETE", path)
        assert code in (200, 202, 404), (path, code, body)


#: the verbs of a request that changes something (the audit log's, RBAC's)
MUTATING = ("create", "update", "patch", "delete", "deletecollection")


def mutations(b: testbed.Bed, since: float) -> list[tuple[str, str]]:
    """(verb, path) of every changing request the kubeconfig's user sent since ``since``."""
    return [(r["verb"], r["uri"].split("?")[0]) for r in b.requests(since)
            if r["verb"] in MUTATING]


@pytest.fixture
def demo_restored(simbed: testbed.Bed) -> Iterator[None]:
    """The test starts from, and leaves, the demo whole (a killed head is back, a recreated
    worker Ready): for modules whose tests break the demo on purpose."""
    until("the demo RayCluster whole", lambda: demo_whole(simbed))
    yield
    until("the demo RayCluster whole again", lambda: demo_whole(simbed), bound_s=300.0,
          detail=lambda: demo_pods(simbed))
