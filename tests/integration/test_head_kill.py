"""The head-kill experiment end to end on a real local Ray cluster, both kill modes.

The integration tier's shared cluster (Ray nodes are slow to start on 2 cores), proven clean
before and after the module; the second run reuses the Serve application the first deployed.
"""

from __future__ import annotations

import json
import os

import pytest

from raychaos.run.runner import run_experiment_file

from ._experiments import REPO, WARM, method_args, module_cluster, raychaos_block, variant

NAME = WARM


@pytest.fixture(scope="module")
def cluster(warm_cluster):
    yield from module_cluster(warm_cluster, keep_serve=True)


def test_cluster_is_pods_with_a_gpu_worker(cluster):
    target, _ = cluster
    nodes = target.nodes()
    assert sorted(n.state for n in nodes) == ["ALIVE"] * 3
    if target.mode == "netns":
        assert len({n.address for n in nodes}) == 3, "each node is a pod with its own address"
    gpu = [n for n in nodes if n.gpus > 0]
    assert len(gpu) == 1 and gpu[0].labels.get("raychaos.io/node-group") == "gpu"
    head = next(n for n in nodes if n.is_head)
    assert head.cpus == 0.0, "no work is scheduled on the head"


@pytest.mark.parametrize("mode", ["gcs", "head"])
def test_head_kill_experiment(cluster, tmp_path, monkeypatch, mode):
    target, root = cluster
    monkeypatch.chdir(REPO)

    def edit(data):
        block = raychaos_block(data)
        block["target"]["local"]["name"] = NAME
        block["monitor"]["recovery_window_s"] = 3
        method_args(data, "kill_head")["mode"] = mode

    exp = variant("experiments/head-kill.yaml", tmp_path / "exp.yaml", edit)
    before = target.head_identity()
    code = run_experiment_file(exp, results_root=str(tmp_path / "results"), state_root=str(root),
                               quiet=True)
    [run_dir] = list((tmp_path / "results").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert code == 0, json.dumps(summary, indent=1)[:4000]
    # proof the chaos happened: the head (or its GCS) was really killed and replaced
    [fault] = summary["faults"]
    ev = fault["evidence"]
    assert fault["state"] == "undone" and ev["landed"] and ev["signal"] == "SIGKILL"
    assert ev["old"]["pid"] == before["pid"]
    if mode == "gcs":
        assert ev["killed_pids"] == [before["gcs_pid"]]
    assert ev["head_back"]["new"]["pid"] != before["pid"]
    probes = {p["name"]: p for p in summary["probes"]}
    gcs = probes["gcs_recovery"]["evidence"]
    assert gcs["recovered"] and gcs["gcs_down_samples"] > 0
    assert 0 < gcs["gcs_recovery_s"] <= gcs["nodes_recovery_s"] < 120
    assert gcs["workers_lost"] == [] and len(gcs["workers_before"]) == 2
    sentinel = probes["sentinel_preserved"]["evidence"]
    assert sentinel["same_pid"] and sentinel["state_preserved"] and sentinel["after"]["count"] == 3
    assert probes["job_survival"]["evidence"]["ratio"] == 1.0
    assert {s["verdict"] for s in summary["slos"]} == {"pass"}
    for name in ("journal.json", "timeline.jsonl", "ledger.json", "junit.xml", "report.html"):
        assert (run_dir / name).exists(), name
    lines = (run_dir / "timeline.jsonl").read_text().splitlines()
    samples = [json.loads(x) for x in lines if '"kind": "sample"' in x]
    gaps = [b["t"] - a["t"] for a, b in zip(samples, samples[1:], strict=False)
            if a["gcs_up"] and b["gcs_up"]]
    assert sorted(gaps)[len(gaps) // 2] <= 0.5, "the monitor samples at about 200 ms"
    assert any(json.loads(x).get("kind") == "load" for x in lines)
    assert os.path.isdir(root / NAME), "the run reused the module's cluster and left it up"
