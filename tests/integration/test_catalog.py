"""Every experiment of the catalog runs end to end on a real local cluster (the shared one).

Each run must prove its fault landed (ledger evidence), end with nothing applied (every ledger
record undone), and reach the verdict its SLOs give; one run gets an impossible SLO and must exit 1
naming it — a harness that cannot fail is worthless.
"""

from __future__ import annotations

import json

import pytest

from raychaos.run.runner import run_experiment_file

from ._experiments import REPO, WARM, module_cluster, raychaos_block, variant

NAME = WARM
CATALOG = ["gpu-node-drain", "registry-throttle", "network-saturation", "head-kill-slow-registry",
           "shuffle-under-head-kill"]


@pytest.fixture(scope="module")
def cluster(warm_cluster):
    yield from module_cluster(warm_cluster)


def _run(name, cluster, tmp_path, slo=None):
    target, root = cluster

    def edit(data):
        block = raychaos_block(data)
        block["target"] = {"kind": "local", "local": {"name": NAME, "head_restart_delay_s": 1}}
        block["monitor"] = {"interval_s": 0.2, "settle_s": 3, "recovery_window_s": 10}

    exp = variant(f"experiments/{name}.yaml", tmp_path / f"{name}.yaml", edit)
    code = run_experiment_file(exp, slo=slo, results_root=str(tmp_path / "results"),
                               state_root=str(root), quiet=True)
    [run_dir] = list((tmp_path / "results").iterdir())
    return code, json.loads((run_dir / "summary.json").read_text())


@pytest.mark.parametrize("name", CATALOG)
def test_catalog_experiment(name, cluster, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    target, _ = cluster
    code, summary = _run(name, cluster, tmp_path)
    assert code == 0, json.dumps({k: summary[k] for k in ("slos", "probes", "errors")},
                                 indent=1)[:5000]
    assert summary["faults"], "a fault was applied"
    for fault in summary["faults"]:
        assert fault["state"] == "undone", fault
        assert fault["evidence"], f"{fault['fault']} returned no proof it landed"
    alive = [n for n in target.nodes() if n.state == "ALIVE"]
    assert len(alive) == 3 and sum(n.gpus for n in alive) == 1, "cluster shape restored"
    if name == "shuffle-under-head-kill":
        rows = {s["name"]: s for s in summary["slos"]}
        assert rows["no-data-lost-or-corrupted"]["value"] == 0


def test_an_impossible_slo_fails_the_run_and_is_named(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    slo = tmp_path / "impossible.yaml"
    slo.write_text("name: impossible\nslos:\n  - name: tasks-faster-than-light\n"
                   "    metric: throughput_ratio\n    window: chaos\n    op: '>='\n"
                   "    threshold: 100\n")
    code, summary = _run("network-saturation", cluster, tmp_path, slo=str(slo))
    assert code == 1
    [row] = summary["slos"]
    assert row["name"] == "tasks-faster-than-light" and row["verdict"] == "fail"
    assert "tasks-faster-than-light" in capsys.readouterr().out
