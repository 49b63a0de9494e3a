"""A harness that always passes is worthless: without GCS fault tolerance the same experiment
must fail (exit 1) and say what was lost. The run starts its own cluster and takes it down."""

from __future__ import annotations

import json

from raychaos.config.settings import LocalClusterSpec
from raychaos.run.runner import run_experiment_file
from raychaos.targets.local.target import LocalTarget

from ._experiments import NOTHING_LEFT, REPO, method_args, raychaos_block, variant

NAME = "itneg"


def test_head_kill_without_gcs_fault_tolerance_fails_and_says_what_was_lost(tmp_path,
                                                                          monkeypatch):
    monkeypatch.chdir(REPO)
    root = tmp_path / "state"

    def edit(data):
        block = raychaos_block(data)
        block["target"]["local"].update(name=NAME, gcs_storage="none", head_restart_delay_s=1)
        block["monitor"]["recovery_window_s"] = 1
        method_args(data, "gcs_recovery")["timeout_s"] = 25
        method_args(data, "kill_head")["mode"] = "head"

    exp = variant("experiments/head-kill.yaml", tmp_path / "exp.yaml", edit)
    try:
        code = run_experiment_file(exp, results_root=str(tmp_path / "results"),
                                   state_root=str(root), keep_cluster=False, quiet=True)
    finally:
        target = LocalTarget(LocalClusterSpec(name=NAME), state_root=root)
        target.down()
    [run_dir] = list((tmp_path / "results").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert code == 1, json.dumps(summary, indent=1)[:3000]
    assert summary["verdict"] == "fail" and summary["target"]["gcs_fault_tolerance"] is False
    probes = {p["name"]: p for p in summary["probes"]}
    assert probes["sentinel_preserved"]["verdict"] == "fail"
    assert probes["sentinel_preserved"]["evidence"]["found"] is False
    assert probes["job_survival"]["evidence"]["lost"] == ["task_storm"]
    assert probes["gcs_recovery"]["evidence"]["workers_lost"], "workers did not re-register"
    # known gone for good once the GCS was back (absent from the new GCS's table): the probe
    # ended then, not at its timeout
    recovery = probes["gcs_recovery"]["evidence"]
    assert set(recovery["workers_gone"]) == set(recovery["workers_before"]), recovery
    assert recovery["nodes_settled_s"] is not None, recovery
    failed = {s["name"] for s in summary["slos"] if s["verdict"] == "fail"}
    assert {"sentinel-actor-preserved", "load-jobs-survive", "workers-reregister"} <= failed
    assert target.leftovers() == NOTHING_LEFT
