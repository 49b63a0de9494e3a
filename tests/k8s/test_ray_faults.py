"""Ray's fault flags and blackouts on KubeRay, against the KubeRay test world (simulated
kubelets): the group template is patched and KubeRay recreates the pod with the variable (and
back), a blackout is a NetworkChaos partition or an iptables DaemonSet, and the dry run of the
catalog's experiments prints those calls — the restarts said in so many words — and sends none."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from raychaos.cli import main
from raychaos.errors import ConfigError, FaultFailed
from raychaos.targets.kubernetes import rayfaults
from tests.k8s.conftest import mutations
from tests.k8s.world import resources as R
from tests.k8s.world.chaosmesh import NETWORKCHAOS_CRD

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
FLAG = "RAY_testing_rpc_failure"
SPEC = json.dumps({"*": {"num_failures": -1, "req_failure_prob": 10}})


def _group_pods(w, group: str) -> list[dict]:  # noqa: ANN001
    return [p for p in w.ray_pods("worker") if p["metadata"]["labels"].get("ray.io/group")
            == group and "deletionTimestamp" not in p["metadata"]]


def _carriers(w) -> list[str]:  # noqa: ANN001
    return [p["metadata"]["name"] for p in w.ray_pods() if "deletionTimestamp" not in
            p["metadata"] and any(e.get("name") == FLAG
                                  for e in p["spec"]["containers"][0].get("env") or [])]


def _template(w, group: str) -> dict:  # noqa: ANN001
    spec = w.store.get("rayclusters", "ray", "demo")["spec"]
    if group == "head":
        return spec["headGroupSpec"]["template"]
    return next(g for g in spec["workerGroupSpecs"] if g["groupName"] == group)["template"]


def _until(cond, timeout: float = 15.0) -> bool:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)
    return bool(cond())


def test_restart_with_env_recreates_the_pod_from_the_patched_template_and_back(sim, target):
    [victim] = [p["metadata"]["name"] for p in _group_pods(sim, "gpu")]
    record: dict = {}
    ev = target.restart_with_env(nodes=["worker-1"], env={FLAG: SPEC}, wait_s=20,
                                 record=record)
    assert ev["groups"] == ["gpu"] and "the pods restart" in ev["note"]
    [fresh] = ev["new_pods"]
    assert fresh != victim and sim.store.get("pods", "ray", victim) is None
    assert list(ev["env_seen"].values()) == [{FLAG: SPEC}]
    template = _template(sim, "gpu")
    assert {"name": FLAG, "value": SPEC} in template["spec"]["containers"][0]["env"]
    assert template["metadata"]["labels"]["raychaos.io/fault-env"] == "run1"
    assert target.node_env([fresh], [FLAG]) == {f"{fresh}/ray-worker": {FLAG: SPEC}}
    out = target.undo(record)
    assert out["pods_deleted"] == [fresh] and out["templates_restored"] == ["gpu"]
    assert FLAG not in [e["name"] for e in _template(sim, "gpu")["spec"]["containers"][0].get(
        "env") or []]
    assert _until(lambda: _carriers(sim) == [] and len(_group_pods(sim, "gpu")) == 1), \
        _carriers(sim)
    assert _until(lambda: target.undo(record)["pods_deleted"] == [])  # idempotent


def test_head_is_the_head_pod_and_another_ray_version_is_refused(sim, target):
    record: dict = {}
    target.restart_with_env(nodes=["head"], env={FLAG: SPEC}, wait_s=20, record=record)
    env = _template(sim, "head")["spec"]["containers"][0]["env"]
    assert FLAG in [e["name"] for e in env]
    target.undo(record)
    target.raycluster["spec"]["rayVersion"] = "2.41.0"
    with pytest.raises(ConfigError, match="runs Ray 2.41.0, and raychaos knows the fault flags "
                                          "of Ray 2.60.0 only"):
        target.preflight("slow_gcs", {})


@pytest.mark.parametrize("chaos_mesh", [False, True])
def test_a_blackout_cut_is_a_partition_or_a_daemonset_and_restore_deletes_it(sim, make_target,
                                                                            chaos_mesh,
                                                                            monkeypatch):
    if chaos_mesh:
        sim.api.create(R.BUILTIN["customresourcedefinitions"], "",
                       json.loads(json.dumps(NETWORKCHAOS_CRD)))
    target = make_target()
    [victim] = [p["metadata"]["name"] for p in _group_pods(sim, "gpu")]
    record: dict = {}
    resource = "networkchaos" if chaos_mesh else "daemonsets"
    if chaos_mesh:
        ev = target.cut_network(nodes=["worker-1"], record=record)
        [obj] = sim.store.list(resource, "ray")
        assert ev["pods"] == [victim]
        assert ev["via"] == "chaos-mesh partition" and obj["spec"]["action"] == "partition"
        assert obj["spec"]["selector"]["pods"] == {"ray": [victim]}
        assert "target" not in obj["spec"], "all the pod's traffic, as the local blackout"
    else:
        # the simulated kubelet runs nothing: its DaemonSet pod goes Running but never reports
        # DROP rules in place, and a cut nobody saw land is a failure (on real pods:
        # test_world_ray's blackout), never "landed" because the API accepted the DaemonSet
        monkeypatch.setattr(rayfaults, "LANDED_WAIT_S", 2.0)
        with pytest.raises(FaultFailed, match=r"blackout: the cut did not land on .*no report"):
            target.cut_network(nodes=["worker-1"], record=record)
        [obj] = sim.store.list(resource, "ray")
        container = obj["spec"]["template"]["spec"]["containers"][0]
        assert "iptables" in container["command"][2] and container["env"][0]["value"]
        assert obj["metadata"]["name"] in json.dumps(record["undo"]), "recorded for the undo"
    assert target.restore_network(record)["deleted"] == [obj["metadata"]["name"]]
    assert _until(lambda: sim.store.list(resource, "ray") == [])
    assert target.undo(record)["deleted"] == []


@pytest.mark.parametrize("experiment,expected", [
    ("head-kill-during-blackout.yaml", ["POST /apis/apps/v1/namespaces/ray/daemonsets",
                                        "DELETE /apis/apps/v1/namespaces/ray/daemonsets/",
                                        "POST /api/v1/namespaces/ray/pods/demo-head",
                                        "[background: overlaps what follows]"]),
    ("blackout-false-deaths.yaml", ["POST /apis/apps/v1/namespaces/ray/daemonsets",
                                    "DELETE /apis/apps/v1/namespaces/ray/daemonsets/"]),
    ("slow-gcs-failing-rpcs.yaml", ["PATCH /apis/ray.io/v1/namespaces/ray/rayclusters/demo",
                                    "RAY_testing_asio_delay_us", "RAY_testing_rpc_failure",
                                    "DELETE /api/v1/namespaces/ray/pods/demo-head",
                                    "note: the pods restart", "note: restarts the head"]),
])
def test_dry_run_plans_the_calls_says_the_pods_restart_and_sends_none(
        sim, capsys, monkeypatch, experiment, expected):
    monkeypatch.chdir(REPO)
    since = len(sim.server.requests)
    code = main(["run", f"experiments/{experiment}", "--dry-run", "--target", "kubernetes",
                 "--kubeconfig", sim.kubeconfig, "--namespace", "ray", "--cluster", "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    for fragment in expected:
        assert fragment in out, (fragment, out)
    assert "would fail" not in out, out
    assert mutations(sim, since) == [], "a dry run sent a mutating request"



def test_the_saturated_shuffle_plans_a_networkchaos_with_its_deep_queue(sim, capsys, caplog,
                                                                       monkeypatch):
    """Its 5 s shaper queue at 2 Mbit/s is what makes heartbeats time out: on Kubernetes the
    NetworkChaos bandwidth's ``limit`` (bytes queued) is that queue, 2e6 × 5 / 8 = 1.25 MB."""
    monkeypatch.chdir(REPO)
    sim.api.create(R.BUILTIN["customresourcedefinitions"], "",
                   json.loads(json.dumps(NETWORKCHAOS_CRD)))
    since = len(sim.server.requests)
    code = main(["run", "experiments/shuffle-saturation-heartbeats.yaml", "--dry-run",
                 "--target", "kubernetes", "--kubeconfig", sim.kubeconfig, "--namespace", "ray",
                 "--cluster", "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "POST /apis/chaos-mesh.org/v1alpha1/namespaces/ray/networkchaos" in out, out
    assert '"limit": 1250000, "rate": "2mbit"' in caplog.text, caplog.text  # the whole body
    assert mutations(sim, since) == []
