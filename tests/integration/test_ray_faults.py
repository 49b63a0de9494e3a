"""Ray-native faults, blackouts and overlapping faults on one real local cluster (eager GCS health
checks as target settings: 1000 ms period, 2000 ms timeout, 3 misses), each through its catalog
experiment: proof that it landed and its effect (failures Ray injected, GCS latency up, a node
marked DEAD while its raylet ran), its undo (no process with the flag, no nft table), and a
probe shown to fail (the negative control). Few runs, one cluster: the CI budget."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from raychaos.config.rayflags import FAULT_ENV
from raychaos.run.runner import run_experiment_file

from ._experiments import (
    REPO,
    assert_healthy,
    method_args,
    own_cluster,
    raychaos_block,
    variant,
)

pytestmark = pytest.mark.integration

if os.geteuid() != 0:
    pytest.skip("blackouts need root (network namespaces, nft)", allow_module_level=True)

NAME = "itrf"
EAGER = {"health_check_period_ms": 1000, "health_check_timeout_ms": 2000,
         "health_check_failure_threshold": 3}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from own_cluster(tmp_path_factory, NAME, **EAGER)


def _run(name: str, cluster: Any, tmp_path: Any, edit: Any = None) -> tuple[int, dict]:
    target, root = cluster

    def change(data: dict) -> None:
        block = raychaos_block(data)
        block["target"] = {"kind": "local", "local": {"name": NAME, "head_restart_delay_s": 1,
                                                      **EAGER}}
        block["monitor"] = {"interval_s": 0.2, "settle_s": 2, "recovery_window_s": 3}
        for load in block.get("loads", []):
            load["args"] = [a if a != "50" else "30" for a in load["args"]]
        if edit:
            edit(data)

    exp = variant(f"experiments/{name}.yaml", tmp_path / f"{name}.yaml", change)
    code = run_experiment_file(exp, results_root=str(tmp_path / "results"),
                               state_root=str(root), quiet=True)
    [run_dir] = list((tmp_path / "results").iterdir())
    return code, json.loads((run_dir / "summary.json").read_text())


def _shape_restored(target: Any) -> None:
    """Every fault undone on the cluster itself: 3 nodes ALIVE with the GPU, no nft table, no
    qdisc, no node (in cluster.json or a live process) with a fault flag."""
    import time

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        alive = [n for n in target.nodes() if n.state == "ALIVE"]
        if len(alive) == 3 and sum(n.gpus for n in alive) == 1:
            break
        time.sleep(1)
    assert len(alive) == 3 and sum(n.gpus for n in alive) == 1, alive
    assert target.netfault_leftovers() == {"qdiscs": [], "nft": []}
    names = ["head", "worker-1", "worker-2"]
    assert {k: v for k, v in target.node_env(names, list(FAULT_ENV)).items() if v} == {}
    assert not any(set(FAULT_ENV) & set(e.get("extra_env") or {})
                   for e in target.cluster.require()["nodes"])


def _probes(summary: dict) -> dict[str, dict]:
    return {p["name"]: p for p in summary["probes"]}


def test_slow_gcs_and_failing_rpcs_land_show_and_are_undone(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)

    def strict_probe(data: dict) -> None:  # the negative control: a bound the slow GCS breaks
        probe = next(a for a in data["method"] if a["name"] == "gcs-latency")
        data["method"].insert(data["method"].index(probe) + 1, {
            **probe, "name": "gcs-latency-strict",
            "provider": {**probe["provider"], "arguments": {"samples": 5, "max_ms": 100}}})

    code, summary = _run("slow-gcs-failing-rpcs", cluster, tmp_path, strict_probe)
    faults = {f["fault"]: f for f in summary["faults"]}
    slow, rpc = faults["slow_gcs"]["evidence"], faults["inject_rpc_failures"]["evidence"]
    assert "HandleRequestImpl=150000:300000" in slow["env_seen"]["head/gcs_server"][
        "RAY_testing_asio_delay_us"]
    assert slow["gcs_call_ms_after"] >= 150 and \
        slow["gcs_call_ms_after"] > 3 * slow["gcs_call_ms_before"], slow
    assert rpc["env_seen"]["worker-1/raylet"]["RAY_testing_rpc_failure"]
    assert rpc["injected_total"] > 0, rpc
    probes = _probes(summary)
    assert probes["gcs_latency"]["evidence"]["ratio"] > 3
    verdicts = [p["verdict"] for p in summary["probes"] if p["name"] == "gcs_latency"]
    assert verdicts == ["pass", "fail"], summary["probes"]  # max 1000 ms passes, 100 ms fails
    assert code == 1 and all(f["state"] == "undone" for f in summary["faults"])
    _shape_restored(cluster[0])


def test_a_blackout_the_eager_gcs_does_not_ride_out_is_a_false_death(cluster, tmp_path,
                                                                    monkeypatch):
    monkeypatch.chdir(REPO)
    code, summary = _run("blackout-false-deaths", cluster, tmp_path,
                         lambda d: method_args(d, "blackout").update(count=1))
    [fault] = summary["faults"]
    assert fault["state"] == "undone" and fault["evidence"]["cycles_run"] == 1
    assert all(11.5 <= c["down_s"] <= 13.5 for c in fault["evidence"]["cycles"])
    deaths = _probes(summary)["false_node_deaths"]
    assert deaths["verdict"] == "fail" and deaths["evidence"]["false_deaths"] >= 1
    assert {d["node"] for d in deaths["evidence"]["false"]} == {"worker-1"}
    assert all(d["raylet_alive"] for d in deaths["evidence"]["false"])
    rows = {s["name"]: s for s in summary["slos"]}
    assert rows["no-false-node-deaths"]["verdict"] == "fail" and code == 1
    _shape_restored(cluster[0])


def test_a_head_kill_during_a_blackout_overlaps_and_everything_comes_back(cluster, tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(REPO)

    def short(data: dict) -> None:  # shorter than the eager GCS takes to declare a death
        method_args(data, "blackout").update(down_s=4, every_s=10)
        next(a for a in data["method"] if a["name"] == "kill-head")["pauses"] = {"before": 1.5}

    code, summary = _run("head-kill-during-blackout", cluster, tmp_path, short)
    spans = {s["fault"]: s for s in summary["fault_spans"]}
    assert spans["blackout"]["overlapped"] == [spans["kill_head"]["id"]], spans
    assert "overlap" in summary["windows"]
    assert sorted(f["fault"] for f in summary["faults"]) == ["blackout", "kill_head"]
    assert all(f["state"] == "undone" for f in summary["faults"])
    probes = _probes(summary)
    assert probes["job_history_preserved"]["evidence"]["before"] >= 1
    assert probes["resources_restored"]["evidence"]["nodes"] == 3
    assert_healthy(code, summary, json.dumps(
        {k: summary[k] for k in ("slos", "probes", "errors")}, indent=1)[:6000])
    _shape_restored(cluster[0])


def test_a_saturated_link_under_a_shuffle_times_out_the_health_checks(cluster, tmp_path,
                                                                     monkeypatch):
    """The background texts' node failure cascade, as shipped: worker-1's link at 2 Mbit with a
    5 s queue and a flood while the shuffle moves blocks; the eager GCS misses its health
    checks and declares the node dead while its raylet runs — every SLO of the profile that
    judges it fails (exit 1), with the link rate, the failed checks and the death on the
    timeline."""
    monkeypatch.chdir(REPO)

    def shorter(data: dict) -> None:  # the death comes within ~10 s of eager checks
        method_args(data, "saturate_network").update(flood_s=40)
        next(a for a in data["method"] if a["name"].startswith("shape"))["pauses"] = \
            {"after": 20}

    code, summary = _run("shuffle-saturation-heartbeats", cluster, tmp_path, shorter)
    [fault] = summary["faults"]
    assert fault["state"] == "undone" and fault["evidence"], fault
    deaths = _probes(summary)["false_node_deaths"]
    assert deaths["verdict"] == "fail", deaths
    assert {d["node"] for d in deaths["evidence"]["false"]} == {"worker-1"}
    rows = {s["name"]: s for s in summary["slos"]}
    assert rows["no-failed-health-checks"]["verdict"] == "fail"
    assert rows["no-failed-health-checks"]["value"] > 0
    assert rows["no-node-deaths"]["value"] >= 1
    assert code == 1, json.dumps({k: summary[k] for k in ("slos", "errors")}, indent=1)[:4000]
    run_dir = next((tmp_path / "results").iterdir())
    links = [r for r in map(json.loads, (run_dir / "timeline.jsonl").read_text().splitlines())
             if r.get("kind") == "signals" and "worker-1" in (r.get("links") or {})]
    assert links, "worker-1's link rate on the timeline"
    _shape_restored(cluster[0])


def _harness(tmp_path: Any, root: Any, act: dict) -> Any:
    from ._harness import HarnessRun, experiment

    target = {"target": {"kind": "local", "local": {"name": NAME, **EAGER}}}
    return HarnessRun(tmp_path, experiment(NAME, [act], extra=target), root)


def test_sigint_in_a_blackout_leaves_no_rule(cluster, tmp_path):
    import signal

    from ._harness import action

    target, root = cluster
    run = _harness(tmp_path, root, action("blackout", "blackout", nodes=["worker-2"],
                                          down_s=60, every_s=90))
    run.wait_event("blackout_down")
    assert target.netfault_leftovers()["nft"] == ["worker-2/raychaos_blackout"]
    run.signal(signal.SIGINT)
    assert run.finish() == 2 and run.summary()["status"] == "interrupted"
    assert [r["state"] for r in run.ledger()["faults"]] == ["undone"]
    assert target.netfault_leftovers() == {"qdiscs": [], "nft": []}


def test_sigkill_while_rpc_flags_apply_then_rollback_leaves_no_node_with_the_flag(
        cluster, tmp_path):
    import signal

    from ._harness import action, run_cli

    target, root = cluster
    spec = {"NodeManagerService.grpc_client.RequestWorkerLease": {
        "num_failures": -1, "req_failure_prob": 0.1}}
    run = _harness(tmp_path, root, action("rpc", "inject_rpc_failures", nodes=["worker-2"],
                                          spec=spec))
    run.wait_for(lambda: target.node_env(["worker-2"], list(FAULT_ENV)).get("worker-2/raylet"),
                 "worker-2 restarted with the flag")
    run.proc.send_signal(signal.SIGKILL)
    run.finish()
    [rec] = run.ledger()["faults"]
    assert rec["undo"]["kind"] == "node_env" and rec["state"] in ("pending", "applied")
    rolled = run_cli("rollback", str(run.run_dir))
    assert rolled.returncode == 0 and "undone ['f1']" in rolled.stdout, rolled.stderr
    _shape_restored(target)
