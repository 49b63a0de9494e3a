"""The catalog's RayService and RayJob experiments on the local target (the shared cluster): a
local Serve app plays the RayService and a load job the RayJob, as their docs say. Each passes
as shipped; and the lost-requests SLO fails on a run whose clients reach Serve through the
head's own proxy, which dies with the head (the 502s KubeRay users report while the head
recovers, kuberay#1153) — the same SLO, unchanged.
"""

from __future__ import annotations

import json

import pytest

from ._experiments import (
    REPO,
    assert_healthy,
    module_cluster,
    raychaos_block,
    run_on_warm,
    why_failed,
)


@pytest.fixture(scope="module")
def cluster(warm_cluster):
    yield from module_cluster(warm_cluster)


def _run(name, cluster, tmp_path, change=None):  # noqa: ANN001, ANN202
    return run_on_warm(name, cluster, tmp_path, change=change, recovery_window_s=8)


def _passes(code, summary, run_dir):  # noqa: ANN001, ANN202
    assert_healthy(code, summary, json.dumps(
        {k: summary[k] for k in ("slos", "probes", "errors")}, indent=1)[:5000])
    for fault in summary["faults"]:
        assert fault["state"] == "undone" and fault["evidence"], fault


@pytest.mark.parametrize("name", ["rayservice-head-kill", "rayjob-head-kill"])
def test_the_workload_experiment_passes_locally(name, cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    target, _ = cluster
    code, summary, run_dir = _run(name, cluster, tmp_path)
    _passes(code, summary, run_dir)
    assert summary["faults"] and all(f["fault"] == "kill_head" for f in summary["faults"])
    if name == "rayjob-head-kill":
        probes = {p["name"]: p["verdict"] for p in summary["probes"]}
        assert probes["job_status_consistent"] == "pass", probes
    alive = [n for n in target.nodes() if n.state == "ALIVE"]
    assert len(alive) == 3, "cluster shape restored"


def test_clients_of_the_heads_own_proxy_lose_requests_and_the_slo_says_so(cluster, tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(REPO)
    target, _ = cluster
    [head] = [p for p in target.cluster.plans() if p.role == "head"]

    def through_the_head(data):  # noqa: ANN001, ANN202
        [users] = raychaos_block(data)["loads"]
        users["host"] = f"http://{head.ip}:8000"  # the head's Serve proxy: it dies with it

    code, summary, _run_dir = _run("rayservice-head-kill", cluster, tmp_path,
                                   change=through_the_head)
    rows = {s["name"]: s for s in summary["slos"]}
    lost = rows["serve-requests-lost-during-chaos"]
    assert code == 1 and summary["errors"] == [], why_failed(code, summary)
    assert lost["verdict"] == "fail" and lost["value"] > lost["threshold"], lost
    assert rows["gcs-recovers-fast"]["verdict"] in ("pass", "inconclusive"), \
        "the GCS came back: only requests lost"
    assert all(f["state"] == "undone" for f in summary["faults"]), summary["faults"]
