"""Ray's fault flags and blackouts on KubeRay, against the fake API server: the group template is
patched and the pod recreated with the variable (and back), a blackout is a NetworkChaos
partition or a DaemonSet, and the dry run of the catalog's experiments prints those calls — the
restarts said in so many words — and sends none."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from raychaos.cli import main
from raychaos.errors import ConfigError

pytestmark = pytest.mark.k8s

REPO = Path(__file__).resolve().parents[2]
FLAG = "RAY_testing_rpc_failure"
SPEC = json.dumps({"*": {"num_failures": -1, "req_failure_prob": 10}})


def _workers(fake) -> list[str]:
    with fake.lock:
        return sorted(p["metadata"]["name"] for p in fake.items("pods", "ray")
                      if p["metadata"]["labels"].get("ray.io/group") == "gpu"
                      and "worker" in p["metadata"]["name"])


def _carriers(fake) -> list[str]:
    with fake.lock:
        return [p["metadata"]["name"] for p in fake.items("pods", "ray")
                if any(e.get("name") == FLAG
                       for e in p["spec"]["containers"][0].get("env") or [])]


def test_restart_with_env_recreates_the_pod_from_the_patched_template_and_back(fake, target):
    victim = _workers(fake)[0]
    record: dict = {}
    ev = target.restart_with_env(nodes=[victim], env={FLAG: SPEC}, wait_s=10, record=record)
    assert ev["groups"] == ["gpu"] and "the pods restart" in ev["note"]
    [fresh] = ev["new_pods"]
    assert fresh != victim and fake.get("pods", "ray", victim) is None
    assert list(ev["env_seen"].values()) == [{FLAG: SPEC}]
    template = fake.get("rayclusters", "ray", "demo")["spec"]["workerGroupSpecs"][0]["template"]
    assert template["spec"]["containers"][0]["env"] == [{"name": FLAG, "value": SPEC}]
    assert template["metadata"]["labels"]["raychaos.io/fault-env"] == "run1"
    assert target.node_env([fresh], [FLAG]) == {f"{fresh}/ray-worker": {FLAG: SPEC}}
    out = target.undo(record)
    assert out["pods_deleted"] == [fresh] and out["templates_restored"] == ["gpu"]
    template = fake.get("rayclusters", "ray", "demo")["spec"]["workerGroupSpecs"][0]["template"]
    assert template["spec"]["containers"][0]["env"] == []
    deadline = time.monotonic() + 5
    while len(_workers(fake)) < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _carriers(fake) == [] and len(_workers(fake)) == 4
    assert target.undo(record)["pods_deleted"] == []  # idempotent


def test_head_is_the_head_pod_and_another_ray_version_is_refused(fake, target):
    record: dict = {}
    target.restart_with_env(nodes=["head"], env={FLAG: SPEC}, wait_s=10, record=record)
    head = fake.get("rayclusters", "ray", "demo")["spec"]["headGroupSpec"]["template"]
    assert head["spec"]["containers"][0]["env"][0]["name"] == FLAG
    target.undo(record)
    target.raycluster["spec"]["rayVersion"] = "2.41.0"
    with pytest.raises(ConfigError, match="runs Ray 2.41.0, and raychaos knows the fault flags "
                                          "of Ray 2.60.0 only"):
        target.preflight("slow_gcs", {})


@pytest.mark.parametrize("chaos_mesh", [False, True])
def test_a_blackout_cut_is_a_partition_or_a_daemonset_and_restore_deletes_it(fake, target,
                                                                            chaos_mesh):
    if chaos_mesh:
        with fake.lock:
            fake.put("customresourcedefinitions", {"metadata": {
                "name": "networkchaos.chaos-mesh.org"}})
    victim = _workers(fake)[0]
    record: dict = {}
    ev = target.cut_network(nodes=[victim], record=record)
    resource = "networkchaos" if chaos_mesh else "daemonsets"
    [obj] = fake.items(resource, "ray")
    if chaos_mesh:
        assert ev["via"] == "chaos-mesh partition" and obj["spec"]["action"] == "partition"
        assert obj["spec"]["selector"]["pods"] == {"ray": [victim]}
    else:
        container = obj["spec"]["template"]["spec"]["containers"][0]
        assert "iptables" in container["command"][2] and container["env"][0]["value"]
    assert target.restore_network(record)["deleted"] == [obj["metadata"]["name"]]
    assert fake.items(resource, "ray") == [] and target.undo(record)["deleted"] == []


def _variant(src: str, dest: Path, node: str) -> Path:
    data = yaml.safe_load((REPO / "experiments" / src).read_text())
    for act in data["method"]:
        args = act["provider"].get("arguments") or {}
        if "nodes" in args:
            args["nodes"] = [node]
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


@pytest.mark.parametrize("experiment,expected", [
    ("head-kill-during-blackout.yaml", ["POST /apis/apps/v1/namespaces/ray/daemonsets",
                                        "DELETE /apis/apps/v1/namespaces/ray/daemonsets/",
                                        "POST /api/v1/namespaces/ray/pods/demo-head",
                                        "[background: overlaps what follows]"]),
    ("slow-gcs-failing-rpcs.yaml", ["PATCH /apis/ray.io/v1/namespaces/ray/rayclusters/demo",
                                    "RAY_testing_asio_delay_us", "RAY_testing_rpc_failure",
                                    "DELETE /api/v1/namespaces/ray/pods/demo-head",
                                    "note: the pods restart", "note: restarts the head"]),
])
def test_dry_run_plans_the_calls_says_the_pods_restart_and_sends_none(
        fake, tmp_path, capsys, monkeypatch, experiment, expected):
    monkeypatch.chdir(REPO)
    exp = _variant(experiment, tmp_path / experiment, _workers(fake)[0])
    code = main(["run", str(exp), "--dry-run", "--target", "kubernetes", "--kubeconfig",
                 fake.kubeconfig(str(tmp_path / "kc")), "--namespace", "ray", "--cluster",
                 "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    for fragment in expected:
        assert fragment in out, (fragment, out)
    assert "would fail" not in out, out
    assert fake.mutating_requests() == [], "a dry run sent a mutating request"
