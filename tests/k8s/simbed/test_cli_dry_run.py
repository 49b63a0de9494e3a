"""``raychaos run EXPERIMENT --target kubernetes --dry-run``: the catalog's own experiment files,
aimed at a KubeRay cluster (the real API server and operator, simulated nodes), print the exact
mutating calls and send none — as the API server's audit log of the run's user says."""

from __future__ import annotations

import time

import pytest

from raychaos.cli import main
from tests.k8s.simbed.conftest import MUTATING, REPO


@pytest.mark.parametrize("experiment,expected", [
    ("head-kill.yaml", "POST /api/v1/namespaces/ray/pods/demo-head"),
    ("gpu-node-drain.yaml", "/eviction"),
    ("rayservice-head-kill.yaml", "DELETE /api/v1/namespaces/ray/pods/demo-head"),
    ("rayjob-head-kill.yaml", "POST /api/v1/namespaces/ray/pods/demo-head"),
])
def test_dry_run_prints_calls_and_sends_no_mutation(simbed, tmp_path, capsys, monkeypatch,
                                                    experiment, expected):
    monkeypatch.chdir(REPO)
    kubeconfig = str(simbed.kubeconfig)
    since = time.time()
    code = main(["run", f"experiments/{experiment}", "--dry-run", "--target", "kubernetes",
                 "--kubeconfig", kubeconfig, "--namespace", "ray", "--cluster", "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert expected in out, out
    assert "nothing that changes the cluster was sent" in out
    sent = simbed.requests(since)
    assert sent, "the audit log saw none of the run's requests"
    assert [r for r in sent if r["verb"] in MUTATING] == [], "a dry run sent a mutating request"


def test_dry_run_against_a_missing_raycluster_is_one_sentence(simbed, tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.chdir(REPO)
    code = main(["run", "experiments/head-kill.yaml", "--dry-run", "--target", "kubernetes",
                 "--kubeconfig", str(simbed.kubeconfig), "--namespace", "ray",
                 "--cluster", "nope"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ") and "nope" in err and len(err.strip().splitlines()) == 1
