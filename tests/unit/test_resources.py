"""The resource figures without a cluster: GPU stranding from state-API snapshots, spill and
restore rates from Ray's counters, a ramp's steps and knee, the local cluster described as a
RayCluster for the review, and the ramp command's variants."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from raychaos.config.settings import LocalClusterSpec, RampSpec
from raychaos.observe.gpu import gpu_metrics, stranding
from raychaos.observe.ramp import knee, ramp_bounds, ramp_steps
from raychaos.observe.resources import spill_rates
from raychaos.review import review
from raychaos.run.ramp import run_ramp, without_faults
from raychaos.run.runner import RunOutcome

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def _node(nid, gpus, name):
    return {"node_id": nid, "state": "ALIVE", "resources_total": {"GPU": gpus, "CPU": 1},
            "labels": {"raychaos.io/node": name}}


def _task(job, state, gpu, node=None, selector=None):
    return {"job_id": job, "state": state, "required_resources": {"GPU": gpu},
            "node_id": node, "label_selector": selector or {}}


def test_a_fraction_that_does_not_pack_strands_the_rest_of_each_card():
    nodes = [_node("n1", 2, "worker-1"), _node("n2", 2, "worker-2")]
    half = [_task("01", "RUNNING", 0.5, "n1") for _ in range(4)] + [
        _task("01", "PENDING_NODE_ASSIGNMENT", 0.5, selector={"raychaos.io/node": "worker-1"})]
    sixty = [_task("02", "RUNNING", 0.6, "n2") for _ in range(2)] + [
        _task("02", "PENDING_NODE_ASSIGNMENT", 0.6, selector={"raychaos.io/node": "worker-2"})
        for _ in range(4)]
    rec = stranding(nodes, half + sixty, [], {"01": "half", "02": "sixty"})
    assert rec["loads"]["half"]["stranded"] == 0 and not rec["loads"]["half"]["fragmented"]
    s = rec["loads"]["sixty"]
    assert s["held"] == 1.2 and s["free"] == 0.8 and s["stranded"] == 0.8 and s["fragmented"]
    assert s["capacity"] == 2.0 and s["pending_tasks"] == 4 and s["min_request"] == 0.6
    assert rec["gpus_total"] == 4 and rec["gpus_free"] == 0.8


def test_free_capacity_the_pending_request_fits_is_lag_not_stranding():
    """A half-GPU task just finished and its successor is not placed yet (or the load's workers
    are still starting): 0.5 free beside 0.5 pending fits, so nothing is stranded; the same
    snapshot for 0.6-GPU tasks strands the 0.4 left on each card."""
    nodes = [_node("n1", 2, "worker-1")]
    lag = [_task("01", "RUNNING", 0.5, "n1") for _ in range(3)] + [
        _task("01", "PENDING_NODE_ASSIGNMENT", 0.5, selector={"raychaos.io/node": "worker-1"})]
    rec = stranding(nodes, lag, [], {"01": "half"})["loads"]["half"]
    assert rec["free"] == 0.5 and rec["stranded"] == 0 and not rec["fragmented"]
    starting = [_task("01", "PENDING_NODE_ASSIGNMENT", 0.5,
                      selector={"raychaos.io/node": "worker-1"}) for _ in range(6)]
    rec = stranding(nodes, starting, [], {"01": "half"})["loads"]["half"]
    assert rec["free"] == 2.0 and rec["stranded"] == 0 and not rec["fragmented"]
    one = [_task("02", "RUNNING", 0.6, "n1"), _task(
        "02", "PENDING_NODE_ASSIGNMENT", 0.6, selector={"raychaos.io/node": "worker-1"})]
    rec = stranding(nodes, one, [], {"02": "sixty"})["loads"]["sixty"]
    assert rec["free"] == 1.4 and rec["stranded"] == pytest.approx(0.8) and rec["fragmented"]


def test_a_gpu_task_waiting_on_its_input_holds_its_gpu_idle():
    nodes = [_node("n1", 1, "worker-1")]
    tasks = [_task("01", "RUNNING_IN_RAY_GET", 0.25, "n1"), _task("01", "RUNNING", 0.25, "n1")]
    actors = [{"job_id": "01", "state": "ALIVE", "actor_id": "a1", "node_id": "n1",
               "required_resources": {"GPU": 0.5}}]
    rec = stranding(nodes, tasks, actors, {"01": "ws"})
    assert rec["loads"]["ws"]["held"] == 1.0
    assert rec["loads"]["ws"]["idle_held"] == 0.75  # the waiting task and the idle actor
    assert rec["loads"]["ws"]["stranded"] == 0.75


def test_gpu_metrics_integrate_over_the_window_per_load():
    recs = [{"kind": "gpu", "t": float(t), "gpus_total": 4.0, "loads": {
        "half": {"held": 2.0, "idle_held": 0.0, "stranded": 0.0, "capacity": 2.0,
                 "fragmented": False},
        "sixty": {"held": 1.2, "idle_held": 0.0, "stranded": 0.8, "capacity": 2.0,
                  "fragmented": True}}} for t in range(10)]
    assert gpu_metrics(recs, (0, 100), "sixty")["gpu_stranded_capacity_frac"] == 0.4
    assert gpu_metrics(recs, (0, 100), "sixty")["gpu_pending_demand_s"] == 10
    assert gpu_metrics(recs, (0, 100), "half")["gpu_stranded_capacity_frac"] == 0.0
    assert gpu_metrics(recs, (0, 100), "half")["gpu_pending_demand_s"] == 0
    assert gpu_metrics(recs, (0, 100))["gpu_stranded_capacity_frac"] == 0.2
    assert gpu_metrics(recs, (50, 100))["gpu_stranded_capacity_frac"] is None


def test_spill_and_restore_rates_from_the_cumulative_counters():
    recs = [{"kind": "sample", "t": float(t), "spill_total_mb": 10.0 * t,
             "restore_total_mb": 0.0 if t < 5 else 4.0 * (t - 5)} for t in range(11)]
    rates = spill_rates(recs, (0, 10))
    assert rates["spill_mb_per_s"] == 10.0 and rates["restore_mb_per_s"] == 2.0
    restarted = recs[:6] + [{**r, "spill_total_mb": 5.0} for r in recs[6:]]  # a raylet restart
    assert spill_rates(restarted, (0, 10))["spill_mb_per_s"] == 5.0


def _ramp_records(rates, achieved, p95):
    out, t = [], 0.0
    for rate, got, lat in zip(rates, achieved, p95, strict=True):
        for _ in range(5):
            t += 1
            out.append({"kind": "load", "load": "storm", "t": t, "offered": rate,
                        "count": got, "failures": 0, "p95_ms": lat})
            out.append({"kind": "sample", "t": t - 0.5, "gcs_cpu_pct": rate / 10,
                        "gcs_rss_mb": 100 + rate / 100})
    return out


def test_the_warm_up_is_no_step_of_the_ramp():
    """A cold ramp's first seconds (Ray starting the task workers: p95 1349 ms in CI) are the
    warm-up, marked by the load; the first step is judged on what came after."""
    warm = [{"kind": "load", "load": "storm", "t": t / 2, "offered": 100, "warmup": True,
             "count": 20, "failures": 0, "p95_ms": 1349} for t in range(1, 9)]
    recs = warm + [{**r, "t": r["t"] + 4} for r in
                   _ramp_records([100, 200, 300], [100, 200, 300], [5, 8, 9])]
    steps = ramp_steps(recs, "storm")
    assert [s["offered"] for s in steps] == [100, 200, 300]
    assert steps[0]["p95_ms"] == 5 and steps[0]["seconds"] == 4
    assert knee(steps, ramp_bounds(RampSpec(p95_ms=250), None))["knee"] == 300


def test_the_knee_is_the_last_step_before_one_breaks():
    recs = _ramp_records([100, 200, 300, 400], [100, 199, 240, 250], [5, 8, 40, 900])
    steps = ramp_steps(recs, "storm")
    assert [s["offered"] for s in steps] == [100, 200, 300, 400]
    assert steps[0]["seconds"] == 4 and steps[1]["head_cpu_pct"] == 20.0
    bounds = ramp_bounds(RampSpec(p95_ms=250), None)
    result = knee(steps, bounds)
    assert result["knee"] == 200 and result["broke_at"] == 300
    assert "achieved 240/s of 300/s" in result["reason"]
    assert knee(steps[:2], bounds)["broke_at"] is None


def test_ramp_bounds_come_from_the_slo_profile_when_the_ramp_sets_none():
    from raychaos.config.settings import SloProfile, SloSpec

    profile = SloProfile(name="p", slos=[SloSpec(name="lat", metric="p95_latency_ms",
                                                 threshold=80)])
    assert ramp_bounds(RampSpec(), profile)["p95_ms"] == 80
    assert ramp_bounds(RampSpec(), None)["p95_ms"] == 250


def test_the_local_cluster_reviews_as_the_raycluster_kuberay_would_run():
    from raychaos.targets.local.manifest import as_raycluster
    from raychaos.targets.local.network.pods import PodNetwork
    from raychaos.targets.local.plan import plan_nodes

    spec = LocalClusterSpec(name="rv", gcs_storage="none", shm_mb=64)
    plans = plan_nodes(spec, Path("/tmp/rv-state"), PodNetwork("rv", "198.18"), "netns")
    result = review([as_raycluster(spec, plans, None)])
    rules = {(f.rule, f.severity) for f in result.findings}
    assert ("gcs-ft", "error") in rules and ("dev-shm", "error") in rules
    hardened = LocalClusterSpec(name="rv")
    plans = plan_nodes(hardened, Path("/tmp/rv-state"), PodNetwork("rv", "198.18"), "netns")
    result = review([as_raycluster(hardened, plans, None)])
    assert result.errors == [] and result.warnings == []
    assert any("rocksdb" in f.message for f in result.findings)


def test_ramp_without_faults_keeps_the_probes(tmp_path):
    data = yaml.safe_load((REPO / "experiments/head-breaking-point.yaml").read_text())
    clean = without_faults(data)
    assert [a["provider"]["func"] for a in clean["method"]] == ["ramp_knee"]
    assert without_faults(clean) is None


def test_ramp_runs_both_variants_per_trial_and_reports_the_spread(tmp_path):
    calls = []

    def fake_run(path, results_root, **_kw):
        calls.append(Path(path).name)
        run_dir = Path(results_root) / f"run{len(calls)}"
        run_dir.mkdir()
        knee = 300 if "without" in Path(path).name else 200
        (run_dir / "summary.json").write_text(json.dumps({"verdict": "pass", "probes": [
            {"name": "ramp_knee", "evidence": {"knee": knee + len(calls), "table": [
                {"offered": 100, "achieved": 100, "p95_ms": 5}]}}]}))
        return RunOutcome(0, run_dir, {})

    code, folder = run_ramp(REPO / "experiments/head-breaking-point.yaml", 3,
                            results_root=tmp_path, run=fake_run, say=lambda _m: None)
    assert code == 0 and len(calls) == 6
    result = json.loads((folder / "ramp.json").read_text())
    assert result["variants"]["with faults"]["knee"]["n"] == 3
    assert result["variants"]["without faults"]["knee"]["p50"] == 304
    assert result["knee_shift"] == 203 - 304
    assert (folder / "ramp.png").stat().st_size > 1000


def test_every_run_records_the_preflight_review_in_its_summary(tmp_path):
    from tests.unit.test_lifecycle import EXP, _run

    code, run_dir, out = _run("raychaos", EXP, tmp_path, outage_s=0.3)
    review = json.loads((run_dir / "summary.json").read_text())["review"]
    assert review["subjects"] == ["RayCluster fake/fake"]
    assert review["errors"] == 1  # the fake's RayCluster has no GCS fault tolerance
    assert "review of RayCluster fake/fake: 1 error(s)" in out
    assert "gcs-ft" in (run_dir / "report.html").read_text()


def test_the_interactive_timeline_shows_the_spill_sawtooth_and_stranded_gpus():
    from raychaos.results.interactive import timeline_figure

    recs = [{"kind": "sample", "t": float(t), "gcs_up": True, "object_store_used_mb": 90.0,
             "spilled_mb": 40.0, "spill_total_mb": 10.0 * t,
             "restore_total_mb": 0.0 if t < 10 else 6.0 * (t - 10)} for t in range(20)]
    recs += [{"kind": "gpu", "t": float(t), "gpus_total": 2.0,
              "loads": {"sixty": {"held": 1.2, "stranded": 0.8}}} for t in range(20)]
    traces = {d["name"]: d for d in timeline_figure(recs, {})["data"]}
    assert set(traces["spill MB/s"]["y"]) == {10.0}  # one sample per 2 s: no 0/20 alternation
    assert traces["restore MB/s"]["y"][-1] == 6.0
    assert traces["sixty stranded"]["y"][0] == 0.8 and traces["sixty held"]["y"][0] == 1.2
    assert "spill MB/s" not in {d["name"] for d in timeline_figure(recs[:1], {})["data"]}
