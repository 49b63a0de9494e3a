"""The resilience review of a live RayCluster in the KubeRay test world (simulated kubelets):
what the Kubernetes target's preflight reads (the RayCluster as stored, the namespace's PDBs,
the pods KubeRay made and where they landed), ``raychaos review --live`` on the same cluster,
and the dry run of a catalog experiment printing the review before its calls."""

from __future__ import annotations

import time

import pytest

from raychaos.cli import main
from raychaos.review import review
from raychaos.run.review import review_command
from tests.k8s.world import World
from tests.k8s.world import resources as R

pytestmark = pytest.mark.k8s


def _rayclusters(w: World) -> R.Res:
    res = w.api.resolve("ray.io", "v1", "rayclusters")
    assert res is not None
    return res


def _edit_raycluster(w: World, change) -> None:  # noqa: ANN001
    rc = w.store.get("rayclusters", "ray", "demo")
    change(rc)
    w.api.update(_rayclusters(w), "ray", "demo", rc)


def test_the_targets_review_objects_carry_the_pdbs_and_the_pods(sim, target):
    sim.api.create(R.BUILTIN["poddisruptionbudgets"], "ray", {
        "metadata": {"name": "ray-workers"},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"ray.io/cluster": "demo"}}}})

    def two_cpu_workers(rc: dict) -> None:  # cpu-0 is the only node of the cpu pool
        rc["spec"]["workerGroupSpecs"][1]["replicas"] = 2

    _edit_raycluster(sim, two_cpu_workers)
    sim.wait_ready(timeout=30, workers=3)
    deadline = time.monotonic() + 10
    while sum(p["spec"].get("nodeName") == "cpu-0" for p in sim.ray_pods()) < 2:
        assert time.monotonic() < deadline, "the second cpu worker was never bound to cpu-0"
        time.sleep(0.1)
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
    # the world's KubeRay mounted shared-mem sized like the 2Gi limit: the 150 MB store fits
    shm = [f for f in result.findings if f.rule == "dev-shm"]
    assert shm and all(f.severity == "info" and "2.0 GiB" in f.message for f in shm)
    assert ("head-num-cpus", "warning") not in found  # the head has num-cpus: "0"


def test_review_live_exits_1_on_an_error_and_names_the_experiment(sim, capsys):
    # the world's cluster turns GCS FT on by annotation with no Redis address: real KubeRay
    # needs one (the world plays rocksdb), so the review calls it an error
    assert review_command([], live="raycluster/demo", namespace="ray",
                          kubeconfig=sim.kubeconfig) == 1
    out = capsys.readouterr().out
    assert "gcs-ft" in out and "no Redis address" in out and "see experiments/head-kill.yaml" in out

    def on_redis(rc: dict) -> None:
        rc["metadata"]["annotations"] = {}
        rc["spec"]["gcsFaultToleranceOptions"] = {"redisAddress": "redis.ray.svc:6379"}

    _edit_raycluster(sim, on_redis)
    assert review_command([], live="raycluster", namespace="ray", kubeconfig=sim.kubeconfig,
                          verbose=True) == 0
    out = capsys.readouterr().out
    assert "GCS fault tolerance on Redis at redis.ray.svc" in out and "0 error(s)" in out


def test_a_dry_run_prints_the_review_before_its_calls(sim, capsys, monkeypatch):
    from tests.k8s.test_cli_dry_run import REPO

    monkeypatch.chdir(REPO)
    code = main(["run", "experiments/head-kill.yaml", "--dry-run", "--target", "kubernetes",
                 "--kubeconfig", sim.kubeconfig, "--namespace", "ray", "--cluster", "demo"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    [line] = [x for x in lines if x.startswith("review of RayCluster ray/demo")]
    assert "1 error(s)" in line and "gcs-ft" in line
    start = next(i for i, x in enumerate(lines) if x.startswith("dry run against"))
    assert lines.index(line) == start + 1, "the review comes before the calls"
