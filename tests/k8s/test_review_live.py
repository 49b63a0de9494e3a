"""The resilience review of a live RayCluster, read through the Kubernetes API (the fake server):
the target's preflight objects and ``raychaos review --live`` see the same cluster — its PDBs
and where its pods landed included."""

from __future__ import annotations

import pytest

from raychaos.review import review
from raychaos.run.review import review_command

pytestmark = pytest.mark.k8s


def test_the_targets_review_objects_carry_the_pdbs_and_the_pods(fake, target):
    with fake.lock:
        fake.put("poddisruptionbudgets", {"metadata": {"name": "ray-workers", "namespace": "ray"},
                                          "spec": {"maxUnavailable": 1, "selector": {
                                              "matchLabels": {"ray.io/cluster": "demo"}}}})
    objects = target.review_objects()
    kinds = [o["kind"] for o in objects]
    assert kinds[0] == "RayCluster" and "PodDisruptionBudget" in kinds and "Pod" in kinds
    result = review(objects, live=True)
    rules = {(f.rule, f.severity) for f in result.findings}
    assert ("pdb", "error") in rules  # maxUnavailable over KubeRay pods (#2662)
    crowded = [f for f in result.findings if f.rule == "pods-per-node"]
    assert [f.severity for f in crowded] == ["warning"]  # two workers on each GPU node
    assert crowded[0].message.startswith("2 Ray pods")  # the DaemonSet pod is not one
    assert ("gcs-ft", "info") in rules  # the seeded cluster has GCS FT on Redis


def test_review_live_exits_1_on_an_error_and_names_the_experiment(fake, tmp_path, capsys):
    kubeconfig = fake.kubeconfig(str(tmp_path / "kubeconfig"))
    assert review_command([], live="raycluster/demo", namespace="ray",
                          kubeconfig=kubeconfig) == 0  # warnings only
    rc = fake.get("rayclusters", "ray", "demo")
    del rc["spec"]["gcsFaultToleranceOptions"]
    with fake.lock:
        fake.put("rayclusters", rc)
    assert review_command([], live="raycluster", namespace="ray", kubeconfig=kubeconfig) == 1
    out = capsys.readouterr().out
    assert "gcs-ft" in out and "see experiments/head-kill.yaml" in out
