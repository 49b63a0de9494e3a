"""The world's RayJob and RayService operators with real Ray behind the pods (one world per
test; run under ``flock /tmp/raychaos-cluster.lock``): a RayJob's job runs and its fate reads
the same from the RayJob, the Jobs API and the driver — until the head pod is deleted, when in
K8sJobMode the RayJob goes Failed (SubmissionFailed) while the job and its driver go on; a
RayService's application is deployed from serveConfigV2, promoted, and answers through
``<name>-serve-svc``. Teardown proves nothing is left."""

from __future__ import annotations

import os
import time
import urllib.request

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.probes.jobfate import api_fate, driver_fate, rayjob_fate
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests.k8s.world import World

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="real pods need root (netns)"),
    # not yet run on the shared box (the cluster lock was busy): opt in until it has passed once
    pytest.mark.skipif(os.environ.get("RAYCHAOS_WORLD_WORKLOADS") != "1",
                       reason="set RAYCHAOS_WORLD_WORKLOADS=1 (two real-Ray worlds, minutes)"),
]


def wait(pred, timeout: float, what: str):  # noqa: ANN001
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_rayjob_fate_three_ways_and_a_head_loss_in_k8sjobmode():
    w = World(name="t-rj", cluster="train", workload="rayjob",
              state_root="/tmp/raychaos-world-tests").start()
    try:
        w.wait_ready(timeout=600)
        t = KubernetesTarget(KubernetesSpec(kind="rayjob", name="train", namespace="ray",
                                            kubeconfig=w.kubeconfig), run_id="rj")
        t.connect()
        try:
            owner = wait(lambda: (o := t.owner()).get("job_status") == "RUNNING" and o, 240,
                         "the RayJob's job RUNNING")
            job_id = owner["job_id"]
            lines: list[str] = []
            wait(lambda: lines.extend(t.job_log_lines(job_id)) or any(
                "RAYCHAOS_PROGRESS" in x for x in lines), 120, "the driver's progress")
            assert rayjob_fate(owner) == api_fate(t.job_status(job_id)) == "running"
            assert driver_fate(lines, time.time(), time.time(), 20)[0] == "running"
            old = t.head_identity()
            t.kill_head("pod", {})
            t.wait_head_back(old, timeout=240)
            failed = wait(lambda: (o := t.owner()).get("job_deployment_status") == "Failed"
                          and o, 60, "the RayJob Failed with its submitter")
            assert failed["reason"] == "SubmissionFailed"
            wait(lambda: t.job_status(job_id) == "RUNNING", 180, "the job RUNNING again")
            lines.clear()
            time.sleep(5)
            lines.extend(t.job_log_lines(job_id))
            assert driver_fate(lines, time.time(), time.time(), 20)[0] == "running", lines[-3:]
        finally:
            t.close()
    finally:
        assert w.stop() == []


def test_rayservice_serves_through_its_serve_service():
    w = World(name="t-rs", cluster="chat", workload="rayservice",
              state_root="/tmp/raychaos-world-tests").start()
    try:
        w.wait_ready(timeout=600)
        rs = w.store.get("rayservices", "ray", "chat")
        assert rs["status"]["activeServiceStatus"]["rayClusterName"] == w.cluster
        t = KubernetesTarget(KubernetesSpec(kind="rayservice", name="chat", namespace="ray",
                                            kubeconfig=w.kubeconfig), run_id="rs")
        t.connect()
        try:
            owner = wait(lambda: (o := t.owner()).get("ready") and o, 240, "Ready")
            assert owner["num_serve_endpoints"] >= 1
            assert owner["applications"] == {"raychaos": "RUNNING"}
            url = t.serve_url()
            with urllib.request.urlopen(f"{url}/healthz", timeout=30) as reply:
                assert reply.status == 200
        finally:
            t.close()
    finally:
        assert w.stop() == []
