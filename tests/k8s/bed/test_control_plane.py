"""The KubeRay catalog against the real control plane: ``raychaos testbed up --nodes`` (real
etcd, kube-apiserver, kube-controller-manager, kube-scheduler and KubeRay operator, built from
their Go modules; our virtual-kubelet provider runs the operator's pods as real Ray nodes), then
each experiment run as a user runs it — ``raychaos run EXPERIMENT --target kubernetes
--kubeconfig … --namespace ray --cluster demo`` in its own process.

One bed for the package (``tests/k8s/bed/conftest.py``), in the order a cluster can bear: on the
demo RayCluster (GCS fault tolerance in Redis) the head kill, the GPU drain, the registry
throttle and the saturated link (Chaos Mesh's own NetworkChaos CRD on the bed, applied by the
node agent); then the demo is deleted for a RayJob of the real operator on the demo's spec (its
head's container killed: the job and the RayJob go on; its head pod deleted: KubeRay v1.5.0
makes no new head for a provisioned RayJob cluster, a fail), and a RayCluster without GCS fault
tolerance for the negative control, which must fail (exit 1) and name what was lost. Between
runs: no object of a run left, no node cordoned, no qdisc in any pod or node.

The resource-shape experiments and the RayService head kill run on the same bed
(``test_resources.py``, ``test_rayservice.py``).
"""

from __future__ import annotations

import json
import os
import time

import pytest

from raychaos.results.store import Ev, read_timeline
from tests.k8s._bed import (
    FIGURES,
    NS,
    REPO,
    api,
    assert_clean,
    assert_healthy_run,
    bed_run,
    delete_and_wait,
    demo_spec,
    healthy_demo_run,
    leftovers,
    raycluster,
    variant,
)

pytestmark = [pytest.mark.k8s,
              pytest.mark.skipif(os.geteuid() != 0, reason="the bed's nodes need root (netns)")]


def _exe(pid: int) -> str:
    return os.path.basename(os.readlink(f"/proc/{pid}/exe"))


def test_the_head_kill_passes_with_the_real_apiserver_and_operator_running(bed, tmp_path):
    # the processes are the real ones, built from their modules, and alive through the run
    for part in ("kube-apiserver", "kube-controller-manager", "kube-scheduler",
                 "kuberay-operator", "etcd"):
        assert _exe(bed.pids[part]).startswith(part + "-v"), (part, _exe(bed.pids[part]))
    code, version = api(bed).call("GET", "/version")
    assert code == 200 and version["gitVersion"] == "v1.36.3", version
    summary = healthy_demo_run(bed, "head-kill", tmp_path)
    assert summary["target"]["gcs_fault_tolerance"] is True
    probes = {p["name"]: p for p in summary["probes"]}
    assert probes["sentinel_preserved"]["verdict"] == "pass"
    assert probes["gcs_recovery"]["evidence"]["workers_lost"] == []
    assert all(os.path.exists(f"/proc/{pid}") for pid in bed.pids.values()), bed.pids
    assert_clean(bed)


def test_a_gpu_node_drain_evicts_once_and_the_operator_replaces_the_worker(bed, tmp_path):
    """The drain's own account (one eviction, the node cordoned and given back) is checked
    against the API server's audit log of the run's requests."""
    since = time.time()
    summary = healthy_demo_run(bed, "gpu-node-drain", tmp_path)
    [drain] = [f["evidence"] for f in summary["faults"] if f["fault"] == "drain_gpu_nodes"]
    assert len(drain["evicted"]) == 1 and drain["eviction_attempts"] == 1, drain
    sent = bed.requests(since)
    evictions = [r for r in sent if r["verb"] == "create"
                 and r["uri"].split("?")[0].endswith("/eviction")]
    assert [r["code"] for r in evictions] == [201], evictions
    [node] = drain["nodes"]
    assert [r["verb"] for r in sent if r["uri"].split("?")[0] == f"/api/v1/nodes/{node}"
            and r["verb"] in ("patch", "update")] == ["patch", "patch"], "cordon, uncordon"
    # the figure: what the run asked while the drain landed (cordon to the worker's
    # replacement Ready, the run's monitor included), per pod evicted
    [timeline] = (tmp_path / "results").glob("*/timeline.jsonl")
    marks = {r["event"]: r["ts"] for r in read_timeline(timeline) if r.get("kind") == "event"
             and r.get("event") in (Ev.FAULT_START, Ev.FAULT_APPLIED)}
    during = [r for r in sent if marks[Ev.FAULT_START] <= r["t"] <= marks[Ev.FAULT_APPLIED]]
    FIGURES["drain: the run's API requests"] = len(sent)
    FIGURES["drain: API requests per drained pod (fault start to applied)"] = len(during)
    FIGURES["drain: seconds from fault start to applied"] = \
        marks[Ev.FAULT_APPLIED] - marks[Ev.FAULT_START]
    # KubeRay's `bash -lc` is the pod's PID 1 and ignores SIGTERM: the pod takes its grace
    [gone] = drain["gone_s"].values()
    assert gone >= 25, drain["gone_s"]
    [replacement] = drain["replacements"]
    assert replacement["node"] != drain["nodes"][0] and drain["replacements_ready"], drain
    assert drain["watch"]["lists"] == 1, drain["watch"]  # one list, then watches
    assert_clean(bed)


def test_a_throttled_registry_lands_on_every_node_and_is_undone(bed, tmp_path):
    healthy_demo_run(bed, "registry-throttle", tmp_path)
    assert_clean(bed)


def test_a_saturated_link_through_chaos_meshs_own_crd_slows_the_pod_and_is_undone(bed,
                                                                                   tmp_path):
    """The bed has Chaos Mesh's real NetworkChaos CRD (its schema validates the object the
    target writes; ours applies it in the pod's namespace)."""
    summary = healthy_demo_run(bed, "network-saturation", tmp_path)
    [sat] = [f["evidence"] for f in summary["faults"] if f["fault"] == "saturate_network"]
    assert sat["networkchaos"]["conditions"]["AllInjected"] == "True", sat["networkchaos"]
    assert sat["networkchaos"]["records"] == [f"{NS}/{sat['victims'][0]}"], sat
    assert_clean(bed)


def _rayjob(b, name: str) -> dict:  # noqa: ANN001
    code, rj = api(b).call("GET", f"/apis/ray.io/v1/namespaces/{NS}/rayjobs/{name}")
    assert code == 200, rj
    return rj.get("status") or {}


def _wait_rayjob(b, name: str, pred, what: str, timeout: float = 420) -> dict:  # noqa: ANN001
    t0, st = time.monotonic(), {}
    while time.monotonic() - t0 < timeout:
        st = _rayjob(b, name)
        if pred(st):
            return st
        time.sleep(3)
    raise AssertionError(f"RayJob {name}: not {what} in {timeout:.0f} s: {json.dumps(st)[:800]}")


def test_a_rayjob_rides_out_its_head_container_dying_and_reads_the_same_three_ways(bed,
                                                                                  tmp_path):
    """The real operator's RayJob (K8sJobMode, its default) on the demo's spec, a training-like
    driver on the CPU worker: ``rayjob-head-kill`` kills the head's container, which restarts
    in place; the GCS comes back from Redis, the job goes on, and the RayJob, the Jobs API and
    the driver all read "running". The submitter Job's first pod failed with the head (its
    ``ray job logs --follow`` lost the dashboard) and its retry follows the same job: the
    RayJob stays Running. Then the head *pod* deleted: KubeRay v1.5.0 creates no new head for a
    provisioned RayJob cluster, the GCS never comes back and the run fails (exit 1)."""
    delete_and_wait(bed, "rayclusters", "demo")  # one Ray cluster at a time on 2 cores
    body = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "train"},
            "spec": {"rayClusterSpec": demo_spec(),
                     "entrypoint": f"python {REPO}/loads/train_steps.py --steps 900 --step-s 1",
                     "entrypointResources": json.dumps({"raychaos_driver": 0.01}),
                     "shutdownAfterJobFinishes": False, "backoffLimit": 0}}
    code, made = api(bed).call("POST", f"/apis/ray.io/v1/namespaces/{NS}/rayjobs", body)
    assert code == 201, made
    try:
        _wait_rayjob(bed, "train", lambda st: st.get("jobStatus") == "RUNNING", "RUNNING")
        exp = variant("rayjob-head-kill", tmp_path / "rayjob-head-kill.yaml")
        code, summary, out = bed_run(bed, exp, tmp_path / "results", "--rayjob", "train")
        assert_healthy_run(code, summary, out)
        probes = {p["name"]: p for p in summary["probes"]}
        assert probes["job_status_consistent"]["verdict"] == "pass", probes
        [kill] = [f["evidence"] for f in summary["faults"]]
        assert kill["mode"] == "head" and kill["head_back"]["new"]["pod"] == kill["old"]["pod"]
        assert kill["head_back"]["new"]["restart_count"] == kill["old"]["restart_count"] + 1
        code, job = api(bed).call("GET", f"/apis/batch/v1/namespaces/{NS}/jobs/train")
        assert code == 200 and job["status"].get("failed", 0) >= 1, job.get("status")
        st = _rayjob(bed, "train")
        assert (st.get("jobDeploymentStatus"), st.get("jobStatus")) == ("Running", "RUNNING"), st
        assert leftovers(bed) == []

        def pod_and_short(data: dict) -> None:  # the head pod deleted; no need to wait long
            for act in data["method"]:
                args = act["provider"].setdefault("arguments", {})
                if act["provider"]["func"] == "kill_head":
                    args.update(mode="pod", wait_s=45)
                if act["provider"]["func"] == "gcs_recovery":
                    args["timeout_s"] = 30
                if act["provider"]["func"] == "job_status_consistent":
                    args["timeout_s"] = 10

        exp = variant("rayjob-head-kill", tmp_path / "rayjob-pod-delete.yaml", edit=pod_and_short)
        code, summary, out = bed_run(bed, exp, tmp_path / "results-pod", "--rayjob", "train")
        assert code == 1 and summary["verdict"] == "fail", out[-4000:]
        checks = {(c["kind"], c["name"]): c for c in summary["checks"]}
        assert "the head did not come back" in checks[("run", "run")]["message"], checks
        assert checks[("probe", "gcs_recovery")]["verdict"] == "fail", checks
        assert checks[("slo", "gcs-recovers-fast")]["verdict"] == "fail", checks
        code, heads = api(bed).call("GET", f"/api/v1/namespaces/{NS}/pods?labelSelector="
                                           "ray.io/node-type=head")
        assert [p for p in heads["items"] if not p["metadata"].get("deletionTimestamp")] == [], \
            "KubeRay made a new head for a provisioned RayJob cluster"
        assert leftovers(bed) == []
    finally:
        delete_and_wait(bed, "rayjobs", "train")


def test_a_head_kill_without_gcs_ft_fails_and_names_what_was_lost(bed, tmp_path):
    delete_and_wait(bed, "rayclusters", "demo")  # one Ray cluster at a time on 2 cores
    spec = demo_spec()
    spec.pop("gcsFaultToleranceOptions")
    with raycluster(bed, "noft", spec):
        assert_clean(bed, "noft")

        def shorter(data: dict) -> None:  # the world's and the local control's windows
            block = next(e for e in data["extensions"] if e.get("name") == "raychaos")
            block["monitor"]["recovery_window_s"] = 1
            for act in data["method"]:
                if act["provider"]["func"] == "gcs_recovery":
                    # 90 s, not 30: the new (empty) cluster must be up before the run ends, for
                    # the harness to remove its Serve application through the Jobs API (once,
                    # with 30, it was not: exit 2, "removing the Serve application")
                    act["provider"]["arguments"]["timeout_s"] = 90

        exp = variant("head-kill", tmp_path / "head-kill-no-gcs-ft.yaml", "pod", edit=shorter)
        code, summary, out = bed_run(bed, exp, tmp_path / "results", "--cluster", "noft")
        assert code == 1, out[-4000:]
        assert summary["verdict"] == "fail" and summary["target"]["gcs_fault_tolerance"] is False
        probes = {p["name"]: p for p in summary["probes"]}
        assert probes["sentinel_preserved"]["verdict"] == "fail"
        assert probes["job_survival"]["evidence"]["lost"] == ["task_storm"]
        assert probes["gcs_recovery"]["evidence"]["workers_lost"], "workers kept their IDs?"
        # known gone for good once the GCS was back (absent from the new GCS's table): the probe
        # ended then, not at its timeout
        recovery = probes["gcs_recovery"]["evidence"]
        assert set(recovery["workers_gone"]) == set(recovery["workers_before"]), recovery
        assert recovery["nodes_settled_s"] is not None, recovery
        failed = {s["name"] for s in summary["slos"] if s["verdict"] == "fail"}
        assert {"sentinel-actor-preserved", "load-jobs-survive", "workers-reregister"} <= failed
        assert leftovers(bed) == []
