"""The resilience review of a live RayCluster made by the real KubeRay operator (the bed with
simulated nodes): what the Kubernetes target's preflight reads (the RayCluster as stored, the
namespace's PDBs, the pods KubeRay made and where they landed), ``raychaos review --live`` on
the same cluster, and the dry run of a catalog experiment printing the review before its
calls."""

from __future__ import annotations

import time

import pytest

from raychaos.cli import main
from raychaos.review import review
from raychaos.run.review import review_command
from tests.k8s.simbed.conftest import REPO, admin, get

pytestmark = pytest.mark.k8s

RC = "/apis/ray.io/v1/namespaces/ray/rayclusters"
PDB = "/apis/policy/v1/namespaces/ray/poddisruptionbudgets"


def _demo_pods(b) -> list[dict]:  # noqa: ANN001
    pods = get(b, "/api/v1/namespaces/ray/pods?labelSelector=ray.io/cluster=demo") or {}
    return [p for p in pods.get("items", []) if not p["metadata"].get("deletionTimestamp")]


def _cpu_workers(b, n: int) -> None:  # noqa: ANN001
    code, body = admin(b).call("PATCH", f"{RC}/demo", [
        {"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas", "value": n}],
        content_type="application/json-patch+json")
    assert code == 200, body


def test_the_targets_review_objects_carry_the_pdbs_and_the_pods(simbed, target):
    code, body = admin(simbed).call("POST", PDB, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "ray-workers"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"ray.io/cluster": "demo"}}}})
    assert code == 201, body
    _cpu_workers(simbed, 2)  # cpu-0 is the only node of the cpu pool
    try:
        deadline = time.monotonic() + 60
        while sum(p["spec"].get("nodeName") == "cpu-0" for p in _demo_pods(simbed)) < 2:
            assert time.monotonic() < deadline, "the second cpu worker was never bound to cpu-0"
            time.sleep(0.5)
        objects = target.review_objects()
        kinds = [o["kind"] for o in objects]
        assert kinds[0] == "RayCluster" and "PodDisruptionBudget" in kinds
        assert kinds.count("Pod") == 4  # the head, the GPU worker, two CPU workers
        result = review(objects, live=True)
        found = {(f.rule, f.severity) for f in result.findings}
        assert ("pdb", "error") in found  # maxUnavailable over KubeRay pods (#2662)
        [crowded] = [f for f in result.findings if f.rule == "pods-per-node"]
        assert crowded.severity == "warning" and crowded.message.startswith("2 Ray pods")
        assert "cpu-0" in crowded.message
        # the real operator mounts shared-mem sized like the 2Gi limit: the 150 MB store fits
        shm = [f for f in result.findings if f.rule == "dev-shm"]
        assert shm and all(f.severity == "info" and "2.0 GiB" in f.message for f in shm), shm
    finally:
        admin(simbed).call("DELETE", f"{PDB}/ray-workers")
        _cpu_workers(simbed, 1)


def test_review_live_exits_1_on_an_error_and_names_the_experiment(simbed, capsys):
    # GCS FT by the annotation alone, with no Redis address: KubeRay needs one
    rc = get(simbed, f"{RC}/demo")
    assert rc is not None
    spec = rc["spec"]
    spec.pop("gcsFaultToleranceOptions", None)
    spec["workerGroupSpecs"] = []
    code, body = admin(simbed).call("POST", RC, {
        "apiVersion": "ray.io/v1", "kind": "RayCluster",
        "metadata": {"name": "noredis", "annotations": {"ray.io/ft-enabled": "true"}},
        "spec": spec})
    assert code == 201, body
    try:
        assert review_command([], live="raycluster/noredis", namespace="ray",
                              kubeconfig=str(simbed.kubeconfig)) == 1
        out = capsys.readouterr().out
        assert "gcs-ft" in out and "no Redis address" in out
        assert "see experiments/head-kill.yaml" in out
        # the demo keeps its GCS in Redis (gcsFaultToleranceOptions)
        assert review_command([], live="raycluster/demo", namespace="ray",
                              kubeconfig=str(simbed.kubeconfig), verbose=True) == 0
        out = capsys.readouterr().out
        assert "GCS fault tolerance on Redis at" in out and "0 error(s)" in out
    finally:
        admin(simbed).call("DELETE", f"{RC}/noredis")


def test_a_dry_run_prints_the_review_before_its_calls(simbed, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    code = main(["run", "experiments/head-kill.yaml", "--dry-run", "--target", "kubernetes",
                 "--kubeconfig", str(simbed.kubeconfig), "--namespace", "ray",
                 "--cluster", "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    [line] = [x for x in lines if x.startswith("review of RayCluster ray/demo")]
    assert "0 error(s)" in line, line
    start = next(i for i, x in enumerate(lines) if x.startswith("dry run against"))
    assert lines.index(line) == start + 1, "the review comes before the calls"
