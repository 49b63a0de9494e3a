"""``raychaos run EXPERIMENT --target kubernetes --dry-run``: the catalog's own experiment files,
aimed at a KubeRay cluster (the world, simulated kubelets), print the exact mutating calls and
send none."""

from __future__ import annotations

from pathlib import Path

import pytest

from raychaos.cli import main
from tests.k8s.conftest import mutations

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("experiment,expected", [
    ("head-kill.yaml", "POST /api/v1/namespaces/ray/pods/demo-head"),
    ("gpu-node-drain.yaml", "/eviction"),
    ("rayservice-head-kill.yaml", "DELETE /api/v1/namespaces/ray/pods/demo-head"),
    ("rayjob-head-kill.yaml", "POST /api/v1/namespaces/ray/pods/demo-head"),
])
def test_dry_run_prints_calls_and_sends_no_mutation(sim, tmp_path, capsys, monkeypatch,
                                                    experiment, expected):
    monkeypatch.chdir(REPO)
    kubeconfig = sim.kubeconfig
    since = len(sim.server.requests)
    code = main(["run", f"experiments/{experiment}", "--dry-run", "--target", "kubernetes",
                 "--kubeconfig", kubeconfig, "--namespace", "ray", "--cluster", "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert expected in out, out
    assert "nothing that changes the cluster was sent" in out
    assert mutations(sim, since) == [], "a dry run sent a mutating request"


def test_dry_run_against_a_missing_raycluster_is_one_sentence(sim, tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.chdir(REPO)
    code = main(["run", "experiments/head-kill.yaml", "--dry-run", "--target", "kubernetes",
                 "--kubeconfig", sim.kubeconfig, "--namespace", "ray",
                 "--cluster", "nope"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and "nope" in err and len(err.strip().splitlines()) == 1
