"""The world's RayJob and RayService operators with real Ray behind the pods, and the catalog's
two workload experiments run on them as a user runs them (one world per test; run under
``flock /tmp/raychaos-cluster.lock``): a RayJob's job runs and its fate reads the same from
the RayJob, the Jobs API and the driver — until ``rayjob-head-kill.yaml`` deletes the head pod,
when in K8sJobMode the RayJob goes Failed (SubmissionFailed) while the job and its driver go
on (the run passes: it expects exactly that); a RayService's application is deployed from
serveConfigV2, promoted, answers through ``<name>-serve-svc``, and rides out
``rayservice-head-kill.yaml`` (gcs_server killed, then the head pod deleted, under Locust
users) with the user's application left in place. Teardown proves nothing is left."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from raychaos.config.settings import KubernetesSpec
from raychaos.probes.jobfate import api_fate, driver_fate, rayjob_fate
from raychaos.targets.kubernetes.target import KubernetesTarget
from tests._cli import run_gracefully
from tests.integration._experiments import assert_healthy
from tests.k8s.world import World

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="real pods need root (netns)")]
REPO = Path(__file__).resolve().parents[2]


def raychaos_run(w: World, experiment: str, flag: str, results: Path) -> tuple[int, dict, str]:
    """``raychaos run experiments/EXPERIMENT --target kubernetes --rayjob|--rayservice NAME``
    as a user runs it, in its own process: (exit code, summary, output)."""
    cmd = [sys.executable, "-m", "raychaos.cli", "run", f"experiments/{experiment}", "--target",
           "kubernetes", "--kubeconfig", w.kubeconfig, "--namespace", w.namespace, flag,
           str(w.workload_name), "--results", str(results)]
    env = dict(os.environ, PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}")
    proc = run_gracefully(cmd, timeout=900, cwd=REPO, env=env)
    out = proc.stdout + proc.stderr
    runs = [d for d in results.iterdir() if (d / "summary.json").exists()] \
        if results.exists() else []
    assert len(runs) == 1, f"exit {proc.returncode}, no single summary:\n{out[-4000:]}"
    return proc.returncode, json.loads((runs[0] / "summary.json").read_text()), out


def brief(summary: dict) -> str:
    return json.dumps({k: summary.get(k) for k in ("verdict", "checks", "errors", "faults")},
                      indent=1, default=str)[:5000]


def wait(pred, timeout: float, what: str):  # noqa: ANN001
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        got = pred()
        if got:
            return got
        time.sleep(1.0)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_rayjob_fate_three_ways_and_a_head_loss_in_k8sjobmode(tmp_path):
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
            # the catalog's experiment, as a user runs it: the head pod deleted under the
            # RayJob, and the job's fate read three ways by job_status_consistent
            code, summary, out = raychaos_run(w, "rayjob-head-kill.yaml", "--rayjob",
                                              tmp_path / "results")
            assert_healthy(code, summary, f"{brief(summary)}\n--- output ---\n{out[-3000:]}")
            probes = {p["name"]: p for p in summary["probes"]}
            assert probes["job_status_consistent"]["verdict"] == "pass", probes
            [fault] = summary["faults"]
            assert fault["fault"] == "kill_head" and fault["state"] == "undone", fault
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


def test_rayservice_serves_through_its_serve_service_and_rides_out_a_head_kill(tmp_path):
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
            # the catalog's experiment: gcs_server killed, then the head pod deleted, under
            # Locust users through <name>-serve-svc; the user's application is left alone
            code, summary, out = raychaos_run(w, "rayservice-head-kill.yaml", "--rayservice",
                                              tmp_path / "results")
            assert_healthy(code, summary, f"{brief(summary)}\n--- output ---\n{out[-3000:]}")
            assert [f["state"] for f in summary["faults"]] == ["undone", "undone"]
            # after a new head pod Serve deploys the application again (DEPLOYING, then
            # RUNNING): it is still there, the user's, not removed by the harness
            assert "raychaos" in t.owner()["applications"], "the harness removed the user's app"
            wait(lambda: t.owner().get("applications") == {"raychaos": "RUNNING"}, 240,
                 "the application RUNNING again")
        finally:
            t.close()
    finally:
        assert w.stop() == []
