"""Every experiment of the catalog runs end to end on a real local cluster (the shared one).

Each run must prove its fault landed (ledger evidence), end with nothing applied (every ledger
record undone), and reach the verdict its SLOs give. Then the negative controls — a harness that
cannot fail is worthless: each shipped SLO, unchanged, must fail on a real run where its property
is broken (the matrix is in probes/README.md):

- a link saturated far past the calibrated one fails the latency/throughput SLOs (the storm's
  tasks are spread, so half of them cross it);
- task retries off under a node loss fails the task-failure SLO, and a shuffle output lost
  (freed from the object store) fails the data SLO — one run, two broken properties, each
  caught by its own SLO;
- a head that is never restarted fails the run (exit 1, "did not recover"), not an error;
- a drained GPU node the "autoscaler" does not replace within the wait fails
  ``capacity_restored`` (exit 1), not an error: the drain itself landed.
"""

from __future__ import annotations

import json

import pytest

from ._experiments import (
    REPO,
    WARM,
    assert_healthy,
    method_args,
    module_cluster,
    raychaos_block,
    run_on_warm,
)

NAME = WARM
CATALOG = ["gpu-node-drain", "registry-throttle", "network-saturation", "head-kill-slow-registry",
           "shuffle-under-head-kill"]


@pytest.fixture(scope="module")
def cluster(warm_cluster):
    yield from module_cluster(warm_cluster)


def _run(name, cluster, tmp_path, slo=None, change=None):
    code, summary, _run_dir = run_on_warm(name, cluster, tmp_path, slo=slo, change=change)
    return code, summary


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_experiment(name, cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    target, _ = cluster
    code, summary = _run(name, cluster, tmp_path)
    assert_healthy(code, summary, json.dumps(
        {k: summary[k] for k in ("slos", "probes", "errors")}, indent=1)[:5000])
    assert summary["faults"], "a fault was applied"
    for fault in summary["faults"]:
        assert fault["state"] == "undone", fault
        assert fault["evidence"], f"{fault['fault']} returned no proof it landed"
    alive = [n for n in target.nodes() if n.state == "ALIVE"]
    assert len(alive) == 3 and sum(n.gpus for n in alive) == 1, "cluster shape restored"
    if name == "shuffle-under-head-kill":
        rows = {s["name"]: s for s in summary["slos"]}
        assert rows["no-data-lost-or-corrupted"]["value"] == 0


def _shipped(tmp_path, **picks):
    """A profile of shipped SLOs, unchanged: ``profile_file=[slo names]``."""
    import yaml

    slos = []
    for stem, names in picks.items():
        profile = yaml.safe_load((REPO / "probes" / f"{stem.replace('_', '-')}.yaml").read_text())
        slos += [x for x in profile["slos"] if x["name"] in names]
    path = tmp_path / "shipped.yaml"
    path.write_text(yaml.safe_dump({"name": "shipped", "slos": slos}))
    return str(path)


def _verdicts(summary):
    return {c["name"]: c["verdict"] for c in summary["checks"]}


def test_a_saturated_link_fails_the_latency_or_throughput_slo(cluster, tmp_path, monkeypatch,
                                                               capsys):
    monkeypatch.chdir(REPO)

    def harder(data):
        # 0.2 Mbit/s instead of the calibrated 50, flooded, behind a 5 s queue (bufferbloat):
        # with the shallow 100 ms queue a spread storm rode it out (p95 463 ms, 2026-12-04: the
        # scheduler leases less on the slow node), and behind 2 s it measured 1349 ms against a
        # bound since raised to 1100 — the test must say the SLO fails, not that Ray was lucky
        method_args(data, "saturate_network").update(bandwidth_mbit=0.2, queue_ms=5000)

    code, summary = _run("network-saturation", cluster, tmp_path, change=harder)
    verdicts = _verdicts(summary)
    assert code == 1 and summary["errors"] == [], json.dumps(summary["checks"], indent=1)
    # the link shows in the storm's latency or pace: during the fault, or in how long the
    # storm takes to get back once it is undone (a 5 s queue drains after the fault)
    broken = {n for n in ("storm-p95-during-chaos", "storm-throughput-during-chaos",
                          "storm-throughput-back") if verdicts.get(n) == "fail"}
    assert broken, verdicts
    out = capsys.readouterr().out
    assert all(name in out for name in broken)


def test_retries_off_under_a_node_loss_and_a_lost_shuffle_output_fail_their_slos(
        cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    slo = _shipped(tmp_path, slo_faults_local=["task-failures"],
                   slo_shuffle_local=["no-data-lost-or-corrupted"])

    def broken(data):
        block = raychaos_block(data)
        block["loads"] = [
            {"name": "task_storm", "kind": "ray_job", "script": "loads/task_storm.py",
             "args": ["--duration", "120", "--rate", "60", "--in-flight", "64",
                      "--task-ms", "1500", "--max-retries", "0"]},  # tasks on every node
            {"name": "shuffle", "kind": "ray_job", "script": "loads/shuffle.py",
             "args": ["--duration", "120", "--partitions", "3", "--block-mb", "1",
                      "--lose-one"]}]
        method_args(data, "drain_gpu_nodes").update(deadline_s=0)  # the node is gone at once

    code, summary = _run("gpu-node-drain", cluster, tmp_path, slo=slo, change=broken)
    verdicts = _verdicts(summary)
    assert code == 1 and summary["errors"] == [], json.dumps(summary["checks"], indent=1)
    assert verdicts["task-failures"] == "fail" and verdicts["no-data-lost-or-corrupted"] == "fail"
    storm = summary["loads"]["task_storm"]["run"]
    assert storm["failures"] > 0
    data = next(s for s in summary["slos"] if s["name"] == "no-data-lost-or-corrupted")
    assert data["value"] >= 1


def test_a_drained_node_not_replaced_in_time_fails_capacity_restored(cluster, tmp_path,
                                                                    monkeypatch):
    """The supervisor (the autoscaler's part) starts the replacement an hour after the stop;
    the drain waits 8 s for it. CI saw the same from a starved box: a fault error then."""
    from raychaos.targets.local import drain

    monkeypatch.chdir(REPO)
    monkeypatch.setattr(drain, "REPLACE_TIMEOUT_S", 8.0)
    target, _ = cluster

    def late(data):
        method_args(data, "drain_gpu_nodes").update(replace_delay_s=3600)

    code, summary = _run("gpu-node-drain", cluster, tmp_path, change=late)
    probes = {p["name"]: p for p in summary["probes"]}
    assert code == 1 and summary["errors"] == [], json.dumps(summary["checks"], indent=1)
    capacity = probes["capacity_restored"]
    assert capacity["verdict"] == "fail" and capacity["evidence"]["not_replaced"] == ["f1"]
    [row] = capacity["evidence"]["drains"]
    assert row["nodes"] == ["worker-1"] and "capacity not back within 8 s" in row["why_not"], row
    [fault] = summary["faults"]
    assert fault["state"] == "undone" and fault["evidence"]["states"]["worker-1"][-1] == "DEAD"
    alive = [n for n in target.nodes() if n.state == "ALIVE"]
    assert len(alive) == 3 and sum(n.gpus for n in alive) == 1, "the rollback brought it back"


def test_a_head_that_is_never_restarted_fails_the_run_and_does_not_error(cluster, tmp_path,
                                                                         monkeypatch):
    """The supervisor (KubeRay's part) does not restart the head within kill_head's bound; once
    the run has said so, it is allowed to again, so the rollback finds a healthy cluster."""
    import threading
    import time

    from raychaos.errors import TargetUnavailable
    from raychaos.results.store import read_timeline

    monkeypatch.chdir(REPO)
    target, _ = cluster

    def never(data):
        block = raychaos_block(data)
        # the run sets it on the warm cluster in place (targets/local/warm.LIVE)
        block["target"]["local"]["head_restart_delay_s"] = 600
        block["slo_profile"] = "probes/slo-local.yaml"
        block["loads"] = [x for x in block["loads"] if x["kind"] == "ray_job"]
        method_args(data, "kill_head").update(mode="head", wait_s=10)
        method_args(data, "gcs_recovery").update(timeout_s=5)
        method_args(data, "sentinel_preserved").update(timeout_s=5)
        method_args(data, "job_survival").update(timeout_s=5)

    def restore_when_said(stop: threading.Event) -> None:
        while not stop.wait(0.5):
            for tl in (tmp_path / "results").glob("*/timeline.jsonl"):
                if any(r.get("event") == "not_recovered" for r in read_timeline(tl)):
                    target.cluster.write({**target.cluster.desired(), "head_restart_delay_s": 1})
                    return

    stop = threading.Event()
    watcher = threading.Thread(target=restore_when_said, args=(stop,), daemon=True)
    watcher.start()
    try:
        code, summary = _run("head-kill", cluster, tmp_path, change=never)
    finally:
        stop.set()
        watcher.join(timeout=5)
        target.cluster.write({**target.cluster.desired(), "head_restart_delay_s": 1})
    run_check = next(c for c in summary["checks"] if c["name"] == "run")
    assert code == 1 and summary["verdict"] == "fail", json.dumps(summary["checks"], indent=1)
    assert run_check["verdict"] == "fail" and "did not recover" in run_check["message"]
    assert summary["errors"] == [], "what the dead head hid is part of the failure"
    assert _verdicts(summary)["gcs-recovers-fast"] == "fail"
    [fault] = summary["faults"]
    assert fault["not_recovered"] and fault["evidence"]["landed"]
    assert fault["state"] == "undone", "the rollback waited for the head to come back"
    deadline = time.monotonic() + 60
    while not target.gcs_alive(1.0) and time.monotonic() < deadline:
        time.sleep(1)
    # the run stopped its loads while the dashboard was still down (the head came back only
    # after the run said so) and LocalJobs.stop_job gives up silently then: stop what it could
    # not, so the module leaves the shared cluster clean (a warm run's restore would too)
    while time.monotonic() < deadline + 60:
        try:
            left = target.jobs.active_jobs()
        except TargetUnavailable:
            left = None
        if left == []:
            break
        for job in left or []:
            target.stop_job(job["job_id"])
        time.sleep(1)
