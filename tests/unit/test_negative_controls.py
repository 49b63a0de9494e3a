"""The negative-control matrix, arithmetic half: for every metric in the registry, a timeline (or
probe evidence) in which its property is broken, and the SLO (or ``abort_if``) on it fails; for
every probe, a fake cluster on which it fails. ``probes/README.md`` lists the matrix with the
real-run controls next to these; a test keeps that table complete.

A metric added to the registry without a control here fails ``test_every_metric_has_a_control``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from raychaos.config.metrics import LIVE_METRICS, METRICS, SLO_METRICS
from raychaos.config.settings import AbortSpec, RaychaosSettings, SloProfile, SloSpec
from raychaos.context import Run, activate, deactivate
from raychaos.faults.head import kill_head
from raychaos.observe.abort import AbortWatch
from raychaos.observe.monitor import Monitor
from raychaos.observe.recovery import recovery_figures
from raychaos.observe.slo import evaluate
from raychaos.probes.actors import create_sentinel, sentinel_preserved
from raychaos.probes.gcs import gcs_recovery
from raychaos.probes.jobs import job_survival
from raychaos.results.store import Clock, Ledger, Timeline, read_timeline
from tests.unit.fake_target import FakeTarget

pytestmark = pytest.mark.unit

README = Path(__file__).resolve().parents[2] / "probes" / "README.md"
Records = list[dict[str, Any]]


def _loads(hurt: Callable[[int], dict[str, Any]], name: str = "storm") -> Records:
    """30 s of one load (a line per second) with a kill at 10 that is over at 20; ``hurt(s)``
    overrides the fields of the lines inside the chaos window."""
    recs: Records = []
    for s in range(1, 31):
        line = {"t": float(s), "kind": "load", "load": name, "count": 100, "failures": 0,
                "p50_ms": 2.0, "p95_ms": 4.0, "p99_ms": 8.0, "checksum_errors": 0,
                "lost_outputs": 0, "gpu_stranded_frac": 0.05}
        if 10 < s <= 20:
            line.update(hurt(s))
        recs.append(line)
    recs += [{"t": 10.0, "kind": "event", "event": "fault_start", "name": "kill_head"},
             {"t": 20.0, "kind": "event", "event": "fault_end", "name": "kill_head"}]
    return sorted(recs, key=lambda r: r["t"])


def _samples(ups: list[bool], every: float = 0.2, **fields: Any) -> Records:
    recs: Records = [{"t": 1.0, "kind": "event", "event": "head_killed", "name": "head",
                      "detail": {"workers_before": ["w1"]}}]
    recs += [{"t": round(i * every, 3), "kind": "sample", "gcs_up": up,
              **({"alive_ids": ["w1"], "nodes_alive": 2, "nodes_total": 2, **fields}
                 if up else {})} for i, up in enumerate(ups)]
    return sorted(recs, key=lambda r: r["t"])


def _judge(metric: str, op: str, threshold: float, records: Records,
           probes: list[dict[str, Any]] | None = None, window: str = "chaos",
           load: str | None = "storm") -> dict[str, Any]:
    producer = METRICS[metric].producer
    spec = SloSpec(name=f"control-{metric}", metric=metric, op=op, threshold=threshold,
                   window=window, load=load if producer == "loads" else None)
    [row], _ = evaluate(SloProfile(name="controls", slos=[spec]), records, probes or [])
    return row


def _chaos(inside: Records) -> Records:
    """A fault from 10 to 20 s with ``inside`` spread over it."""
    recs: Records = [{"t": 10.0, "kind": "event", "event": "fault_start", "name": "f"}]
    recs += [{**r, "t": 10.5 + i * 9.0 / max(len(inside), 1)} for i, r in enumerate(inside)]
    return [*recs, {"t": 20.0, "kind": "event", "event": "fault_end", "name": "f"}]


def _gcs_probe(records: Records) -> list[dict[str, Any]]:
    figures = recovery_figures(records)
    evidence = {**figures, "gcs_flaps_after_first_answer": figures["gcs_flaps"]}
    return [{"name": "gcs_recovery", "verdict": "pass", "evidence": evidence}]


CRASH_LOOP = [True] * 4 + ([False] * 4 + [True] * 3) * 8  # answers 0.6 s at a time, forever
FLAPPED = [True] * 4 + [False] * 6 + [True] * 30 + [False] * 2 + [True] * 10

# metric -> (what breaks it, how the SLO on it is judged)
CONTROLS: dict[str, tuple[str, Callable[[], dict[str, Any]]]] = {
    "gcs_recovery_s": ("a GCS that answers once and crash-loops never has 5 s up", lambda: _judge(
        "gcs_recovery_s", "<=", 60, [], _gcs_probe(_samples(CRASH_LOOP)))),
    "nodes_recovery_s": ("workers listed ALIVE by the restored GCS but never reporting to it",
                         lambda: _judge("nodes_recovery_s", "<=", 90, [], _gcs_probe(_samples(
                             [True] * 4 + [False] * 5 + [True] * 40, reported_ids=[],
                             gcs_incarnation=2)))),
    "gcs_flaps": ("the GCS goes away again after it recovered", lambda: _judge(
        "gcs_flaps", "<=", 0, [], _gcs_probe(_samples(FLAPPED)))),
    "job_survival_ratio": ("a load job lost in the fault", lambda: _judge(
        "job_survival_ratio", ">=", 1.0, [], [{"name": "job_survival", "verdict": "fail",
                                                "evidence": {"ratio": 0.5}}])),
    "sentinel_preserved": ("the detached actor restarted (new PID)", lambda: _judge(
        "sentinel_preserved", "==", 1, [], [{"name": "sentinel_preserved", "verdict": "fail",
                                             "evidence": {"preserved": False}}])),
    "task_failure_ratio": ("tasks fail while the fault is on", lambda: _judge(
        "task_failure_ratio", "<=", 0.01, _loads(lambda s: {"count": 90, "failures": 10}))),
    "throughput_ratio": ("the load stalls and writes no line (zero lines count)", lambda: _judge(
        "throughput_ratio", ">=", 0.5, [r for r in _loads(lambda s: {})
                                        if not (r.get("kind") == "load" and 10 < r["t"] <= 20)])),
    "p95_latency_ms": ("completions slow down", lambda: _judge(
        "p95_latency_ms", "<=", 100, _loads(lambda s: {"p95_ms": 900.0}))),
    "p99_latency_ms": ("completions slow down", lambda: _judge(
        "p99_latency_ms", "<=", 100, _loads(lambda s: {"p99_ms": 1500.0}))),
    "throughput_recovery_s": ("throughput never comes back to 90 % after chaos", lambda: _judge(
        "throughput_recovery_s", "<=", 5, [  # 10 s watched after chaos: past the bound
            {**r, "count": 50} if r.get("kind") == "load" and r["t"] > 10 else r
            for r in _loads(lambda s: {})])),
    "checksum_errors": ("a block corrupted in transfer", lambda: _judge(
        "checksum_errors", "==", 0, _loads(lambda s: {"checksum_errors": int(s == 15)}),
        window="run")),
    "blocks_lost_or_corrupted": ("a shuffle output lost (not corrupted)", lambda: _judge(
        "blocks_lost_or_corrupted", "==", 0, _loads(lambda s: {"lost_outputs": int(s == 15)}),
        window="run")),
    "gpu_stranded_frac": ("GPUs held but idle", lambda: _judge(
        "gpu_stranded_frac", "<=", 0.3, _loads(lambda s: {"gpu_stranded_frac": 0.8}))),
    "spilled_mb": ("the object store spills", lambda: _judge(
        "spilled_mb", "<=", 100, [{"t": 10.0, "kind": "event", "event": "fault_start"},
                                  {"t": 15.0, "kind": "sample", "gcs_up": True,
                                   "spilled_mb": 230.0},
                                  {"t": 20.0, "kind": "event", "event": "fault_end"}])),
    "false_node_deaths": ("a node marked DEAD while its raylet ran", lambda: _judge(
        "false_node_deaths", "==", 0, [], [{"name": "false_node_deaths", "verdict": "fail",
                                            "evidence": {"false_deaths": 1}}])),
    "resources_restored": ("a GPU lease leaked across the failover", lambda: _judge(
        "resources_restored", "==", 1, [], [{"name": "resources_restored", "verdict": "fail",
                                             "evidence": {"restored": False}}])),
    "job_history_preserved": ("the GCS forgot a job it knew", lambda: _judge(
        "job_history_preserved", "==", 1, [], [{"name": "job_history_preserved",
                                                "verdict": "fail",
                                                "evidence": {"preserved": False}}])),
    "gcs_latency_p95_ms": ("the GCS answers late: every sample past the sampler's deadline "
                           "(a lower bound, still above the bound)", lambda: _judge(
        "gcs_latency_p95_ms", "<=", 100, _chaos([
            {"kind": "sample", "gcs_up": False, "gcs_late": True, "latency_ms": 160.0}
            for _ in range(20)]))),
    "node_deaths": ("a node turned DEAD in the chaos window", lambda: _judge(
        "node_deaths", "==", 0, _chaos([{"kind": "event", "event": "node_dead",
                                         "name": "worker-1"}]))),
    "health_check_failures": ("the GCS's health checks of a raylet fail", lambda: _judge(
        "health_check_failures", "<=", 0, [
            {"t": 5.0, "kind": "signals", "health_check_failures": 2}, *_chaos([
                {"kind": "signals", "health_check_failures": 5}]),
            {"t": 25.0, "kind": "signals", "health_check_failures": 5}])),
    "spill_mb_per_s": ("the working set no longer fits: the store spills 50 MB/s", lambda: _judge(
        "spill_mb_per_s", "<=", 10, _counters("spill_total_mb", 50.0))),
    "restore_mb_per_s": ("spilled objects are read back 40 MB/s (thrash)", lambda: _judge(
        "restore_mb_per_s", "<=", 10, _counters("restore_total_mb", 40.0))),
    "gpu_stranded_capacity_frac": ("0.6-GPU tasks leave 0.4 of every card free while demand "
                                   "pends", lambda: _judge(
                                       "gpu_stranded_capacity_frac", "<=", 0.2, _gpu(
                                           stranded=0.8, fragmented=True))),
    "gpu_pending_demand_s": ("GPU demand pends beside free fragments for 10 s", lambda: _judge(
        "gpu_pending_demand_s", "<=", 2, _gpu(stranded=0.8, fragmented=True))),
    "gpu_task_idle_frac": ("GPU tasks hold their GPUs while they wait on restored inputs",
                           lambda: _judge("gpu_task_idle_frac", "<=", 0.3, _gpu(
                               stranded=1.6, idle_held=1.6))),
    "shm_backed_ratio": ("/dev/shm smaller than the object store: Ray put it on disk",
                         lambda: _judge("shm_backed_ratio", ">=", 1.0, [
                             *_loads(lambda s: {}),
                             {"t": 15.0, "kind": "storage", "shm_backed_ratio": 0.5, "nodes": {
                                 "head": {"on_shm": True}, "worker-1": {"on_shm": False}}}])),
    "ramp_knee": ("the head breaks at a lower offered load", lambda: _judge(
        "ramp_knee", ">=", 400, [], [{"name": "ramp_knee", "verdict": "pass",
                                      "evidence": {"knee": 100.0, "broke_at": 200.0}}])),
}


def _counters(key: str, mb_per_s: float) -> Records:
    """Samples whose cumulative ``key`` grows ``mb_per_s`` while the fault is on."""
    return sorted(_loads(lambda s: {}) + [
        {"t": t + 0.5, "kind": "sample", "gcs_up": True, "spill_total_mb": 0.0,
         "restore_total_mb": 0.0, key: mb_per_s * min(10.0, max(0.0, t - 10))}
        for t in range(30)], key=lambda r: r["t"])


def _gpu(stranded: float, fragmented: bool = False, idle_held: float = 0.0) -> Records:
    """One ``gpu`` record a second: 2 GPUs, 1.6 held by the storm, ``stranded`` of them lost
    while the fault is on."""
    def rec(t: float, hurt: bool) -> dict[str, Any]:
        load = {"held": 1.6, "idle_held": idle_held if hurt else 0.0, "capacity": 2.0,
                "stranded": stranded if hurt else 0.0, "fragmented": fragmented and hurt}
        return {"t": t, "kind": "gpu", "gpus_total": 2.0, "loads": {"storm": load}}
    return sorted(_loads(lambda s: {}) + [rec(t + 0.5, 10 <= t < 20) for t in range(30)],
                  key=lambda r: r["t"])


def _abort(metric: str, above: float, records: Records, now: float) -> str | None:
    watch = AbortWatch([AbortSpec(metric=metric, above=above)], Path("unused"))
    return watch.check(records, now)


LIVE_CONTROLS: dict[str, tuple[str, Callable[[], str | None]]] = {
    "error_ratio": ("half the operations fail right now", lambda: _abort(
        "error_ratio", 0.2, [{"t": 9.5, "kind": "load", "count": 10, "failures": 10}], 10.0)),
    "gcs_down_s": ("the GCS has not answered for 30 s", lambda: _abort(
        "gcs_down_s", 20, _samples([True] * 5 + [False] * 10), 31.0)),
    "nodes_dead": ("one node of three is dead", lambda: _abort(
        "nodes_dead", 0, [{"t": 1.0, "kind": "sample", "nodes_total": 3, "nodes_alive": 2}],
        1.0)),
}


def test_every_metric_has_a_control():
    assert set(CONTROLS) == set(SLO_METRICS)
    assert set(LIVE_CONTROLS) == set(LIVE_METRICS)


@pytest.mark.parametrize("metric", sorted(CONTROLS))
def test_the_slo_fails_when_its_property_is_broken(metric):
    _what, judge = CONTROLS[metric]
    row = judge()
    assert row["verdict"] == "fail", row


@pytest.mark.parametrize("metric", sorted(LIVE_CONTROLS))
def test_abort_if_stops_the_run_when_its_property_is_broken(metric):
    _what, watch = LIVE_CONTROLS[metric]
    reason = watch()
    assert reason and metric in reason


# --- the probes, on the fake cluster --------------------------------------------------------
@pytest.fixture
def fake_run(tmp_path):
    made: list[tuple[Run, Monitor]] = []

    def make(**fake: Any) -> Run:
        target = FakeTarget(**fake)
        clock = Clock()
        run = Run(run_id="r1", run_dir=tmp_path, settings=RaychaosSettings(), target=target,
                  clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
                  ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()))
        monitor = Monitor(target, run.timeline, clock, interval_s=0.05,
                          jobs=lambda: dict(run.jobs))
        monitor.job_every_s = 0.2
        monitor.start()
        activate(run)
        made.append((run, monitor))
        return run

    yield make
    for run, monitor in made:
        monitor.stop()
        deactivate()
        run.timeline.close()


def test_job_survival_fails_for_a_dead_job_that_still_reads_running(fake_run):
    import time

    run = fake_run(outage_s=0.5, zombie_jobs=True)
    run.jobs["task_storm"] = run.target.submit_job("python task_storm.py --name task_storm")
    time.sleep(2.5)  # baseline lines (with completions) reach the timeline
    kill_head(mode="head", wait_s=5)
    evidence = job_survival(timeout_s=2)
    assert evidence["jobs"]["task_storm"]["status"] == "RUNNING"
    assert evidence["lost"] == ["task_storm"] and evidence["ratio"] == 0.0
    assert run.probes[-1]["verdict"] == "fail"


def test_sentinel_preserved_fails_when_the_actor_is_lost(fake_run):
    run = fake_run(outage_s=0.3, lose_workers=True)
    run.extras["sentinel"] = create_sentinel(run.target)
    kill_head(mode="head", wait_s=5)
    evidence = sentinel_preserved(timeout_s=5)
    assert evidence["preserved"] is False and run.probes[-1]["verdict"] == "fail"


def test_gcs_recovery_fails_when_the_workers_are_lost(fake_run):
    run = fake_run(outage_s=0.3, lose_workers=True)
    kill_head(mode="head", wait_s=5)
    evidence = gcs_recovery(timeout_s=2, stable_s=0.3)
    assert evidence["workers_lost"] and run.probes[-1]["verdict"] == "fail"


def _drained(tmp_path: Path, *evidence: dict[str, Any], replace: bool = True
             ) -> tuple[Run, dict[str, Any]]:
    """Judge ``capacity_restored`` after drains that left ``evidence`` in the ledger."""
    from raychaos.errors import ProbeFailed
    from raychaos.probes.nodes import capacity_restored

    tmp_path.mkdir()
    clock = Clock()
    run = Run(run_id="r1", run_dir=tmp_path, settings=RaychaosSettings(), target=FakeTarget(),
              clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
              ledger=Ledger(tmp_path / "ledger.json", "r1", {}))
    for ev in evidence:
        record = run.ledger.begin("drain_gpu_nodes", {"count": 1, "replace": replace})
        run.ledger.update(record, state="applied", evidence=ev)
    activate(run)
    try:
        return run, capacity_restored()
    except ProbeFailed as exc:
        return run, {"raised": str(exc)}
    finally:
        deactivate()
        run.timeline.close()


LOCAL_BACK = {"nodes": ["worker-1"], "replaced": True, "stop_to_replacement_s": 8.1}
KUBE_BACK = {"nodes": ["gpu-node"], "evicted": ["demo-gpu-x"], "replacements_ready": True,
             "drain_to_replacement_ready_s": 31.0}


def test_capacity_restored_fails_when_a_drained_node_is_not_replaced(tmp_path):
    """Seen in CI: a retries-off storm starved the box and the replacement's ``ray start``
    gave up; the drain had landed (its node DEAD), the capacity never came back in 120 s."""
    late = {"nodes": ["worker-1"], "replaced": False,
            "replacement_note": "['worker-1']: capacity not back within 120 s (...)"}
    run, ev = _drained(tmp_path / "local", LOCAL_BACK, late)
    assert run.probes[-1]["verdict"] == "fail" and ev["not_replaced"] == ["f2"], ev
    assert ev["drains"][1]["why_not"].startswith("['worker-1']: capacity not back"), ev
    kube_late = {"nodes": ["gpu-node"], "replacements_ready": False,
                 "replacements_note": "demo-gpu-y not Ready after 240 s (Unschedulable)"}
    run, ev = _drained(tmp_path / "kube", kube_late)
    assert run.probes[-1]["verdict"] == "fail" and "Unschedulable" in ev["drains"][0]["why_not"]


def test_capacity_restored_passes_on_either_target_and_needs_a_drain(tmp_path):
    run, ev = _drained(tmp_path / "both", LOCAL_BACK, KUBE_BACK)
    assert run.probes[-1]["verdict"] == "pass", ev
    assert [d["seconds"] for d in ev["drains"]] == [8.1, 31.0]
    run, ev = _drained(tmp_path / "none")
    assert "no drain with replace: true" in ev["raised"] and run.probes == []
    run, ev = _drained(tmp_path / "kept", {"nodes": ["worker-1"]}, replace=False)
    assert "raised" in ev, "a drain without replace has nothing to come back"


def test_the_readme_lists_every_metric_and_probe():
    text = README.read_text()
    table = text[text.index("## Negative controls"):]
    named = set(re.findall(r"^\| `([a-z_0-9]+)`", table, flags=re.M))
    assert set(METRICS) | {"gcs_recovery", "job_survival", "sentinel_preserved",
                           "capacity_restored"} <= named


def test_a_busy_gcs_that_answers_late_is_not_a_flap_but_one_silent_for_5_s_is_down():
    def samples(pattern: str) -> Records:
        """``u`` answered, ``l`` late (no answer, no refusal), ``d`` refused; every 0.2 s."""
        recs: Records = [{"t": 1.0, "kind": "event", "event": "head_killed", "name": "head",
                          "detail": {"workers_before": ["w1"]}}]
        for i, c in enumerate(pattern):
            recs.append({"t": round(i * 0.2, 3), "kind": "sample", "gcs_up": c == "u",
                         **({"gcs_late": True} if c == "l" else {}),
                         **({"alive_ids": ["w1"]} if c == "u" else {})})
        return recs

    busy = "uuuuu" + "d" * 10 + "u" * 5 + "lll" + "u" * 5 + "llllll" + "u" * 30
    figures = recovery_figures(samples(busy))
    assert figures["gcs_first_answer_s"] == 2.0 and figures["gcs_recovery_s"] == 2.0
    assert figures["gcs_flaps"] == 0 and figures["gcs_down_s"] == 2.0
    slow = "uuuuu" + "d" * 10 + "u" * 30 + "l" * 11 + "u" * 30  # 2.2 s late: seen on a busy box
    assert recovery_figures(samples(slow))["gcs_flaps_after_recovery"] == 0
    silent = "uuuuu" + "d" * 10 + "u" * 30 + "l" * 27 + "u" * 30  # 5.4 s without an answer
    assert recovery_figures(samples(silent))["gcs_flaps_after_recovery"] == 1
    starting = "uuuuu" + "d" * 5 + "l" * 5 + "u" * 30  # late after refusals: still starting
    assert recovery_figures(samples(starting))["gcs_first_answer_s"] == 2.0
    # the outage's resolution is what the monitor saw: a late sample asked and heard nothing,
    # a blind one (its asker still stuck on an earlier question) asked nothing at all
    assert recovery_figures(samples(starting))["outage_max_gap_s"] == 0.2
    stuck = samples(starting)
    for r in stuck[-34:-30]:  # the last four late samples: one question stuck for 0.8 s
        r["gcs_blind"] = True
    assert [r.get("gcs_late") for r in stuck[-35:-30]] == [True] * 5
    figures = recovery_figures(stuck)
    assert figures["outage_max_gap_s"] == 1.0 and figures["gcs_first_answer_s"] == 2.0, figures


def test_an_outage_seen_only_as_missed_deadlines_is_down_after_a_kill_or_before_a_new_gcs():
    """A head pod deleted behind a port-forward is never refused: the monitor's questions hang
    until gRPC gives up (~3 s, seen on the KubeRay world). Counted as a busy GCS (late < 5 s),
    the run recovered "at once" and its workers never "re-registered" (CI, head-kill-pod)."""
    def samples(pattern: str, incarnations: str = "") -> Records:
        """``u`` answered, ``l`` late; ``incarnations``: the GCS incarnation of each sample."""
        recs: Records = [{"t": 1.0, "kind": "event", "event": "head_killed", "name": "pod",
                          "detail": {"workers_before": ["w1"]}}]
        for i, c in enumerate(pattern):
            inc = {"gcs_incarnation": int(incarnations[i])} if incarnations else {}
            recs.append({"t": round(i * 0.2, 3), "kind": "sample", "gcs_up": c == "u",
                         **({"gcs_late": True} if c == "l" else {}), **inc,
                         **({"alive_ids": ["w1"], "reported_ids": ["w1"]} if c == "u" else {})})
        return recs

    # the kill at t=1.0, then 2.8 s of missed deadlines and no answer: an outage
    silent = "uuuuu" + "l" * 14 + "u" * 30
    figures = recovery_figures(samples(silent, "1" * 5 + "1" * 14 + "2" * 30))
    assert figures["gcs_first_answer_s"] == 2.8 and figures["gcs_down_s"] == 2.8
    assert figures["gcs_recovery_s"] == 2.8 and figures["nodes_recovery_s"] == 2.8
    # the old GCS still answered twice after the kill, then silence, then a new process
    # (the probe told it by its new head only 0.4 s after the first answer): an outage too
    late_new = "u" * 7 + "l" * 10 + "u" * 30
    figures = recovery_figures(samples(late_new, "1" * 7 + "1" * 10 + "11" + "2" * 28))
    assert figures["gcs_first_answer_s"] == 2.4 and figures["gcs_down_s"] == 2.0
    # the same silence followed by the same GCS is a busy GCS (no outage, no flap)
    busy = recovery_figures(samples(late_new, "1" * 47))
    assert busy["gcs_down_s"] == 0.0 and busy["gcs_flaps"] == 0
    # the same, the silence ended by the keepalive's refusal before the new GCS answers (the
    # world's head-kill-slow-registry: gcs_down_s read 0.2 s of a 3 s outage)
    refused = "u" * 7 + "l" * 10 + "d" + "u" * 29
    figures = recovery_figures(samples(refused, "1" * 18 + "2" * 29))
    assert figures["gcs_first_answer_s"] == 2.6 and figures["gcs_down_s"] == 2.2
    # without incarnations (the dashboard path) a silence after the kill is still an outage
    assert recovery_figures(samples(silent))["gcs_first_answer_s"] == 2.8


def test_a_worker_gone_for_good_settles_the_fail_and_one_back_does_not_need_to_be_gone():
    """Two workers before the kill; after it the GCS is back (incarnation 2) from t=2.0. ``w1``
    re-registers at once; ``w2`` is missing from the new GCS's table, then listed DEAD."""
    recs: Records = [{"t": 1.0, "kind": "event", "event": "head_killed", "name": "pod",
                      "detail": {"workers_before": ["w1", "w2"]}}]
    for i in range(60):
        t = round(i * 0.2, 3)
        if t < 1.0:
            row = {"gcs_up": True, "gcs_incarnation": 1, "alive_ids": ["w1", "w2"],
                   "reported_ids": ["w1", "w2"]}
        elif t < 2.0:
            row = {"gcs_up": False}
        else:
            row = {"gcs_up": True, "gcs_incarnation": 2, "alive_ids": ["w1", "x9"],
                   "reported_ids": ["w1", "x9"], **({"dead_ids": ["w2"]} if t >= 9.0 else {})}
        recs.append({"t": t, "kind": "sample", **row})
    figures = recovery_figures(recs)
    assert figures["gcs_recovery_s"] == 1.0 and figures["nodes_recovery_s"] is None
    # judged only once the GCS has recovered (a stretch of 5 s from t=2.0)
    assert figures["workers_gone"] == {
        "w2": {"s": 1.0, "how": "not in the table of the GCS that came back"}}
    assert figures["nodes_settled_s"] == 1.0
    # the same GCS (no new incarnation) lacking w2: not known gone until it lists it DEAD
    same = [dict(r, gcs_incarnation=1) if r.get("gcs_incarnation") == 2 else r for r in recs]
    figures = recovery_figures(same)
    assert figures["workers_gone"] == {"w2": {"s": 8.0, "how": "DEAD in the GCS's table"}}
    assert figures["nodes_settled_s"] is None, "w1 never re-registered with a new GCS"
    # every worker back: nothing gone, nothing settled early (the pass is nodes_recovery_s)
    back = [dict(r, alive_ids=["w1", "w2"], reported_ids=["w1", "w2"], dead_ids=[])
            if r.get("gcs_incarnation") == 2 else r for r in recs]
    figures = recovery_figures(back)
    assert figures["workers_gone"] == {} and figures["nodes_settled_s"] is None
    assert figures["nodes_recovery_s"] == 1.0


def test_beats_while_a_question_is_stuck_are_written_blind_and_the_one_asked_only_late(tmp_path):
    """The monitor writes every beat on time; the beat whose question missed its deadline asked
    and heard nothing (late), the beats while the asker is still stuck on it asked nothing
    (late and blind) — and only those are holes in the outage's resolution."""
    target = FakeTarget()
    target.observe_delay_s = 0.5  # one question hangs well past its 40 ms deadline
    clock = Clock()
    monitor = Monitor(target, Timeline(tmp_path / "timeline.jsonl", clock), clock,
                      interval_s=0.05)
    monitor.start()
    try:
        time.sleep(0.3)
    finally:
        monitor.stop()
    samples = [r for r in read_timeline(tmp_path / "timeline.jsonl") if r["kind"] == "sample"]
    assert len(samples) >= 3, samples
    first, rest = samples[0], samples[1:]
    assert first["gcs_late"] and "gcs_blind" not in first, first
    assert all(r["gcs_late"] and r["gcs_blind"] for r in rest[:3]), rest
