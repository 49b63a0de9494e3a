"""The resource experiments on one real local cluster: each shows its effect, and each has an SLO
that passes on the good setting and fails on the bad one — in the same run, over its windows
(the working set fits, then it does not; the object stores are in /dev/shm, then one is not),
or side by side (two GPU fractions at once). The cluster: a head, two GPU workers with two
logical GPUs each, a CPU worker; 100 MB object stores; spill directories on loop devices
throttled to 20 MB/s."""

from __future__ import annotations

import json

import pytest

from raychaos.config.settings import LocalClusterSpec, SpillDiskSpec
from raychaos.run.runner import run_experiment_file

from ._experiments import NOTHING_LEFT, REPO, raychaos_block, variant

pytestmark = pytest.mark.integration

NAME = "itres"
LOCAL = {"name": NAME, "workers": 3, "gpu_workers": 2, "gpus_per_gpu_worker": 2,
         "object_store_mb": 100, "head_restart_delay_s": 1,
         "spill_disk": {"size_mb": 1024, "write_mbps": 20, "read_mbps": 20, "cold_cache": True}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    from raychaos.targets.local.target import LocalTarget

    root = tmp_path_factory.mktemp("state")
    spec = LocalClusterSpec(**{**LOCAL, "spill_disk": SpillDiskSpec(**LOCAL["spill_disk"])})
    target = LocalTarget(spec, state_root=root)
    try:
        target.up()
        yield target, root
    finally:
        target.down()
        assert target.leftovers() == NOTHING_LEFT


def _run(name, cluster, tmp_path, edit=None):
    _target, root = cluster

    def change(data):
        block = raychaos_block(data)
        block["target"] = {"kind": "local", "local": LOCAL}
        block["monitor"] = {**block.get("monitor", {}), "settle_s": 3, "recovery_window_s": 2}
        if edit:
            edit(data)

    exp = variant(f"experiments/{name}.yaml", tmp_path / f"{name}.yaml", change)
    code = run_experiment_file(exp, results_root=str(tmp_path / "results"),
                               state_root=str(root), quiet=True)
    [run_dir] = list((tmp_path / "results").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert not summary["errors"], summary["errors"]
    return code, summary, run_dir


def _rows(summary):
    return {s["name"]: s for s in summary["slos"]}


def _show(summary):
    return json.dumps({s["name"]: [s["value"], s["verdict"]] for s in summary["slos"]})


def test_a_working_set_that_stops_fitting_spills_restores_and_starves_the_gpus(
        cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    code, summary, run_dir = _run("object-store-spill", cluster, tmp_path)
    [fault] = summary["faults"]
    assert fault["state"] == "undone" and fault["evidence"]["held_mb"] == 72
    rows = _rows(summary)
    # good setting (baseline: the working set fits): nothing spills or restores
    assert rows["spill-rate-while-it-fits"]["verdict"] == "pass", _show(summary)
    assert rows["restore-rate-while-it-fits"]["verdict"] == "pass", _show(summary)
    # bad setting (a neighbour holds 72 of the 100 MB): the store spills and thrashes
    assert rows["spill-rate-under-pressure"]["verdict"] == "fail", _show(summary)
    assert rows["restore-rate-under-pressure"]["verdict"] == "fail", _show(summary)
    # what thrashing costs in blocks/s is the disk's and the CPU's: 0.68 of the baseline on
    # one loaded box, 0.92 on another whose baseline the other lane had slowed; judged, not
    # judged here (its failing run is the head kill's throughput control)
    assert rows["throughput-vs-fitting-working-set"]["value"] is not None, _show(summary)
    assert rows["gpu-tasks-not-starved"]["verdict"] == "fail", _show(summary)
    assert code == 1 and summary["verdict"] == "fail"
    assert (run_dir / "resources.png").stat().st_size > 10_000  # the sawtooth, drawn


def test_the_fraction_that_does_not_pack_strands_capacity(cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)

    def shorter(data):
        data["method"][0]["pauses"] = {"before": 14}

    code, summary, _ = _run("gpu-fragmentation", cluster, tmp_path, shorter)
    rows = _rows(summary)
    assert rows["half-gpu-strands-little"]["verdict"] == "pass", _show(summary)
    assert rows["half-gpu-demand-not-pending-beside-free-gpus"]["verdict"] == "pass"
    assert rows["sixty-gpu-strands-little"]["verdict"] == "fail", _show(summary)
    assert rows["sixty-gpu-demand-not-pending-beside-free-gpus"]["verdict"] == "fail"
    assert 0.3 <= rows["sixty-gpu-strands-little"]["value"] <= 0.5  # 0.8 of every 2 GPUs
    [probe] = [p for p in summary["probes"] if p["name"] == "gpu_stranding"]
    assert probe["evidence"]["worst"] == "gpu-sixty"
    assert code == 1


def test_a_dev_shm_smaller_than_the_object_store_moves_it_to_disk(cluster, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(REPO)
    target, _ = cluster
    code, summary, _ = _run("dev-shm-trap", cluster, tmp_path)
    rows = _rows(summary)
    assert rows["object-stores-in-shared-memory-before"]["verdict"] == "pass", _show(summary)
    assert rows["object-stores-in-shared-memory-after"]["verdict"] == "fail", _show(summary)
    [fault] = summary["faults"]
    worker = fault["evidence"]["nodes"]["worker-2"]
    assert worker["before"]["on_shm"] is True and worker["after"]["on_shm"] is False
    assert "(disk)" in worker["ray_did"] and worker["after"]["shm_mb"] == 64
    [probe] = [p for p in summary["probes"] if p["name"] == "dev_shm_check"]
    assert probe["evidence"]["trapped"] == ["worker-2"]
    assert probe["evidence"]["bench"]["worker-2"]["mb_per_s"] > 0
    assert any(f["rule"] == "dev-shm" for f in summary["review"]["findings"])
    back = {f["node"]: f for f in target.node_storage()}
    assert back["worker-2"]["on_shm"] and back["worker-2"]["shm_mb"] > 64  # rolled back
    assert code == 1


def test_a_ramp_finds_the_knee_and_records_the_head_along_the_way(cluster, tmp_path,
                                                                   monkeypatch):
    """The ramp warms up first (RampSpec.warmup_s): a cold first step carried the workers'
    start-up in CI (p95 1349 ms at 200 tasks/s, then 51 ms at 500) and 'broke' there."""
    monkeypatch.chdir(REPO)

    def short_and_clean(data):  # the catalog ramp is minutes long; here 6 steps of 4 s
        data["method"] = [a for a in data["method"] if a["provider"]["func"] == "ramp_knee"]
        load = raychaos_block(data)["loads"][0]
        load["ramp"].update(start=50, step=300, step_s=4, steps=6)

    code, summary, _ = _run("head-breaking-point", cluster, tmp_path, short_and_clean)
    [probe] = [p for p in summary["probes"] if p["name"] == "ramp_knee"]
    ev = probe["evidence"]
    print("RAMP", json.dumps({k: ev[k] for k in ("knee", "broke_at", "reason")}),
          json.dumps([{k: s[k] for k in ("offered", "achieved", "p95_ms", "head_cpu_pct",
                                          "gcs_rss_mb")} for s in ev["table"]]))
    # how far it climbs is the machine's (CI with the other lane: 500/s already broke, 445/s
    # achieved; a busy box once broke at 200/s, the first step): the first step is one any
    # box keeps (50/s), so a knee always exists; that it stops at the first step that broke,
    # and says why, is the probe's
    assert len(ev["table"]) >= 2 and ev["table"][0]["achieved"] > 40
    if ev["broke_at"] is not None:
        assert ev["table"][-1]["offered"] == ev["broke_at"] and ev["reason"], ev
    assert any(s["gcs_rss_mb"] for s in ev["table"]), "the GCS's memory along the way"
    assert ev["knee"] is not None and ev["knee"] >= 50
    rows = _rows(summary)
    assert rows["knee-at-least"]["value"] == ev["knee"]
