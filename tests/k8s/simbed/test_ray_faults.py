"""Ray's fault flags and blackouts on KubeRay, against the real API server and KubeRay operator
(simulated nodes): the group template is patched and the real operator recreates the pod with
the variable (and back), a blackout is a NetworkChaos partition (Chaos Mesh's CRD installed) or
an iptables DaemonSet (not installed: the real DaemonSet controller places its pods), and the
dry run of the catalog's experiments prints those calls — the restarts said in so many words —
and sends none, as the API server's audit log says."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
import yaml

from raychaos.cli import main
from raychaos.errors import ConfigError, FaultFailed
from raychaos.targets.kubernetes import blackout
from raychaos.testbed import bed as testbed
from raychaos.testbed import build
from tests.k8s.simbed.conftest import REPO, admin, get, mutations, until

pytestmark = [pytest.mark.k8s, pytest.mark.usefixtures("demo_restored")]

FLAG = "RAY_testing_rpc_failure"
SPEC = json.dumps({"*": {"num_failures": -1, "req_failure_prob": 10}})
PODS = "/api/v1/namespaces/ray/pods"
RAYCLUSTER = "/apis/ray.io/v1/namespaces/ray/rayclusters/demo"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
NETWORKCHAOS_CRD = "networkchaos.chaos-mesh.org"
COLLECTION = {"networkchaos": "/apis/chaos-mesh.org/v1alpha1/namespaces/ray/networkchaos",
              "daemonsets": "/apis/apps/v1/namespaces/ray/daemonsets"}


def _ray_pods(b: testbed.Bed) -> list[dict[str, Any]]:
    return [p for p in get(b, f"{PODS}?labelSelector=ray.io%2Fcluster%3Ddemo")["items"]
            if "deletionTimestamp" not in p["metadata"]]


def _group_pods(b: testbed.Bed, group: str) -> list[str]:
    return [p["metadata"]["name"] for p in _ray_pods(b)
            if p["metadata"]["labels"].get("ray.io/group") == group]


def _carriers(b: testbed.Bed) -> list[str]:
    return [p["metadata"]["name"] for p in _ray_pods(b) if any(
        e.get("name") == FLAG for e in p["spec"]["containers"][0].get("env") or [])]


def _template(b: testbed.Bed, group: str) -> dict[str, Any]:
    spec = get(b, RAYCLUSTER)["spec"]
    if group == "head":
        return dict(spec["headGroupSpec"]["template"])
    return dict(next(g for g in spec["workerGroupSpecs"] if g["groupName"] == group)[
        "template"])


@pytest.fixture(scope="class")
def no_chaos_mesh(simbed: testbed.Bed) -> Iterator[None]:
    """Chaos Mesh not installed: the bed's NetworkChaos CRD deleted, and put back after (the
    same definition, Established again) for the tests and modules that follow. Once for the
    tests that need it gone: a CRD deleted right after it was made again can stay
    terminating for minutes on a loaded box."""
    api = admin(simbed)
    code, body = api.call("DELETE", f"{CRDS}/{NETWORKCHAOS_CRD}", timeout=30)
    assert code in (200, 404), body
    try:
        until("the NetworkChaos CRD gone", lambda: get(simbed, f"{CRDS}/{NETWORKCHAOS_CRD}")
               is None, detail=lambda: (get(simbed, f"{CRDS}/{NETWORKCHAOS_CRD}") or {}).get(
                   "status"))
        yield
    finally:
        [crd] = [p for p in build.chaos_mesh_crds() if p.stem.endswith("_networkchaos")]
        doc = yaml.safe_load(crd.read_text())
        assert doc["metadata"]["name"] == NETWORKCHAOS_CRD
        code, body = api.call("POST", CRDS, doc, timeout=30)
        assert code in (201, 409), body
        until("the NetworkChaos CRD Established and served", partial(
            testbed._established, api, doc))


def test_restart_with_env_recreates_the_pod_from_the_patched_template_and_back(simbed,
                                                                               target):
    [victim] = _group_pods(simbed, "gpu")
    assert target.handle.pod_named("worker-1")["metadata"]["name"] == victim
    record: dict = {}
    ev = target.restart_with_env(nodes=["worker-1"], env={FLAG: SPEC}, wait_s=120,
                                 record=record)
    assert ev["groups"] == ["gpu"] and "the pods restart" in ev["note"]
    [fresh] = ev["new_pods"]
    assert fresh != victim and get(simbed, f"{PODS}/{victim}") is None
    assert list(ev["env_seen"].values()) == [{FLAG: SPEC}]
    template = _template(simbed, "gpu")
    assert {"name": FLAG, "value": SPEC} in template["spec"]["containers"][0]["env"]
    assert template["metadata"]["labels"]["raychaos.io/fault-env"] == "run1"
    assert target.node_env([fresh], [FLAG]) == {f"{fresh}/ray-worker": {FLAG: SPEC}}
    out = target.undo(record)
    assert out["pods_deleted"] == [fresh] and out["templates_restored"] == ["gpu"]
    assert FLAG not in [e["name"] for e in _template(simbed, "gpu")["spec"]["containers"][
        0].get("env") or []]
    # the undo itself waited for this (it deletes a replacement made from a stale template)
    until("no pod with the variable, one gpu worker", lambda: _carriers(simbed) == [] and len(
        _group_pods(simbed, "gpu")) == 1, detail=lambda: (
            f"carriers {_carriers(simbed)}, gpu workers {_group_pods(simbed, 'gpu')}, "
            f"undo {out}"))
    until("the undo again, nothing left to delete",
           lambda: target.undo(record)["pods_deleted"] == [])  # idempotent


def test_head_is_the_head_pod_and_another_ray_version_is_refused(simbed, target):
    record: dict = {}
    try:
        ev = target.restart_with_env(nodes=["head"], env={FLAG: SPEC}, wait_s=120,
                                     record=record)
        assert ev["groups"] == ["head"], ev
        env = _template(simbed, "head")["spec"]["containers"][0]["env"]
        assert FLAG in [e["name"] for e in env]
    finally:
        target.undo(record)
    target.raycluster["spec"]["rayVersion"] = "2.41.0"
    with pytest.raises(ConfigError, match="runs Ray 2.41.0, and raychaos knows the fault flags "
                                          "of Ray 2.60.0 only"):
        target.preflight("slow_gcs", {})


def _blackout_objects(b: testbed.Bed, resource: str) -> list[dict[str, Any]]:
    return list(get(b, COLLECTION[resource])["items"])


def _blackout(simbed: testbed.Bed, make_target: Callable[..., Any], chaos_mesh: bool,
              monkeypatch: pytest.MonkeyPatch) -> None:
    """A blackout cut of worker-1 and its restore, the NetworkChaos CRD installed or not."""
    target = make_target()
    [victim] = _group_pods(simbed, "gpu")
    record: dict = {}
    resource = "networkchaos" if chaos_mesh else "daemonsets"
    try:
        if chaos_mesh:
            ev = target.cut_network(nodes=["worker-1"], record=record)
            [obj] = _blackout_objects(simbed, resource)
            assert ev["pods"] == [victim]
            assert ev["via"] == "chaos-mesh partition" and obj["spec"]["action"] == "partition"
            assert obj["spec"]["selector"]["pods"] == {"ray": [victim]}
            assert "target" not in obj["spec"], "all the pod's traffic, as the local blackout"
        else:
            # the simulated kubelet runs nothing: the DaemonSet's pod goes Running but never
            # reports DROP rules in place, and a cut nobody saw land is a failure (on real
            # pods: tests/k8s/bed), never "landed" because the API accepted the DaemonSet
            monkeypatch.setattr(blackout, "LANDED_WAIT_S", 2.0)
            with pytest.raises(FaultFailed, match=r"blackout: the cut did not land on "
                                                  r".*no report"):
                target.cut_network(nodes=["worker-1"], record=record)
            [obj] = _blackout_objects(simbed, resource)
            container = obj["spec"]["template"]["spec"]["containers"][0]
            assert "iptables" in container["command"][2] and container["env"][0]["value"]
            assert obj["metadata"]["name"] in json.dumps(record["undo"]), "recorded for undo"
            placed = until("the DaemonSet's pod on the victim's node", lambda: [
                p for p in get(simbed, f"{PODS}?labelSelector=raychaos.io%2Ffault%3Dblackout")[
                    "items"]])
            assert {p["spec"]["nodeName"] for p in placed} == {
                get(simbed, f"{PODS}/{victim}")["spec"]["nodeName"]}
        assert target.restore_network(record)["deleted"] == [obj["metadata"]["name"]]
        until(f"no {resource} left", lambda: _blackout_objects(simbed, resource) == [])
        assert target.undo(record)["deleted"] == []
    finally:
        target.undo(record)
        until("no blackout pod left", lambda: get(
            simbed, f"{PODS}?labelSelector=raychaos.io%2Ffault%3Dblackout")["items"] == [])


def _dry_run(simbed: testbed.Bed, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch, experiment: str, expected: list[str]) -> None:
    """``raychaos run EXPERIMENT --dry-run`` prints every fragment and sends no mutation."""
    monkeypatch.chdir(REPO)
    since = time.time()
    code = main(["run", f"experiments/{experiment}", "--dry-run", "--target", "kubernetes",
                 "--kubeconfig", str(simbed.kubeconfig), "--namespace", "ray",
                 "--cluster", "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    for fragment in expected:
        assert fragment in out, (fragment, out)
    assert "would fail" not in out, out
    sent = simbed.requests(since)
    assert sent, "the audit log saw none of the run's requests"
    assert mutations(simbed, since) == [], "a dry run sent a mutating request"


def test_a_blackout_cut_is_a_networkchaos_partition_and_restore_deletes_it(
        simbed, make_target, monkeypatch):
    _blackout(simbed, make_target, True, monkeypatch)


@pytest.mark.parametrize("experiment,expected", [
    ("blackout-false-deaths.yaml", [
        "POST /apis/chaos-mesh.org/v1alpha1/namespaces/ray/networkchaos",
        "DELETE /apis/chaos-mesh.org/v1alpha1/namespaces/ray/networkchaos/"]),
    ("slow-gcs-failing-rpcs.yaml", [
        "PATCH /apis/ray.io/v1/namespaces/ray/rayclusters/demo", "RAY_testing_asio_delay_us",
        "RAY_testing_rpc_failure", "DELETE /api/v1/namespaces/ray/pods/demo-head",
        "note: the pods restart", "note: restarts the head"]),
])
def test_dry_run_plans_the_calls_says_the_pods_restart_and_sends_none(
        simbed, capsys, monkeypatch, experiment, expected):
    _dry_run(simbed, capsys, monkeypatch, experiment, expected)


@pytest.mark.usefixtures("no_chaos_mesh")
class TestWithoutChaosMesh:
    """Chaos Mesh not installed: a blackout is a privileged iptables DaemonSet."""

    def test_a_blackout_cut_is_a_daemonset_and_restore_deletes_it(self, simbed, make_target,
                                                                   monkeypatch):
        _blackout(simbed, make_target, False, monkeypatch)

    @pytest.mark.parametrize("experiment,expected", [
        ("head-kill-during-blackout.yaml", [
            "POST /apis/apps/v1/namespaces/ray/daemonsets",
            "DELETE /apis/apps/v1/namespaces/ray/daemonsets/",
            "POST /api/v1/namespaces/ray/pods/demo-head",
            "[background: overlaps what follows]"]),
        ("blackout-false-deaths.yaml", ["POST /apis/apps/v1/namespaces/ray/daemonsets",
                                        "DELETE /apis/apps/v1/namespaces/ray/daemonsets/"]),
    ])
    def test_dry_run_plans_the_daemonset(self, simbed, capsys, monkeypatch, experiment,
                                         expected):
        _dry_run(simbed, capsys, monkeypatch, experiment, expected)


def test_the_saturated_shuffle_plans_a_networkchaos_with_its_deep_queue(simbed, capsys, caplog,
                                                                       monkeypatch):
    """Its 5 s shaper queue at 2 Mbit/s is what makes heartbeats time out: on Kubernetes the
    NetworkChaos bandwidth's ``limit`` (bytes queued) is that queue, 2e6 × 5 / 8 = 1.25 MB.
    The bed has Chaos Mesh's real CRD (and no controller: nothing would inject it)."""
    monkeypatch.chdir(REPO)
    since = time.time()
    code = main(["run", "experiments/shuffle-saturation-heartbeats.yaml", "--dry-run",
                 "--target", "kubernetes", "--kubeconfig", str(simbed.kubeconfig),
                 "--namespace", "ray", "--cluster", "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "POST /apis/chaos-mesh.org/v1alpha1/namespaces/ray/networkchaos" in out, out
    assert '"limit": 1250000, "rate": "2mbit"' in caplog.text, caplog.text  # the whole body
    assert simbed.requests(since) and mutations(simbed, since) == []
