"""The Ray-native faults, the blackout and their probes against the in-process FakeTarget: what
each fault hands the target, its ledger record and undo, the timeline events, overlap windows,
and every new probe shown able to fail (its negative control) — no Ray, no API server."""

from __future__ import annotations

import json
import threading
import time

import pytest

from raychaos.config.settings import RaychaosSettings
from raychaos.context import Run, activate, deactivate
from raychaos.errors import ConfigError, FaultFailed
from raychaos.faults.blackout import blackout
from raychaos.faults.head import kill_head
from raychaos.faults.rollback import undo_all
from raychaos.faults.rpc import inject_rpc_failures, slow_gcs
from raychaos.observe.monitor import Monitor
from raychaos.observe.windows import fault_spans, windows
from raychaos.probes.consistency import (
    job_history_preserved,
    resources_restored,
    snapshot_job_history,
)
from raychaos.probes.latency import gcs_latency
from raychaos.probes.nodes import false_node_deaths
from raychaos.results.store import Clock, Ledger, Timeline, read_timeline
from tests.unit.fake_target import FakeTarget

pytestmark = pytest.mark.unit

LEASE = "NodeManagerService.grpc_client.RequestWorkerLease"


@pytest.fixture
def run(tmp_path):
    made: list = []

    def make(**fake):
        target = FakeTarget(**fake)
        clock = Clock()
        r = Run(run_id="r1", run_dir=tmp_path, settings=RaychaosSettings(), target=target,
                clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
                ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()))
        monitor = Monitor(target, r.timeline, clock, interval_s=0.05)
        monitor.start()
        activate(r)
        made.append((r, monitor))
        time.sleep(0.2)  # a baseline: the monitor has seen every node ALIVE
        return r

    yield make
    for r, monitor in made:
        monitor.stop()
        deactivate()
        r.timeline.close()


def _events(r: Run) -> list[str]:
    return [e["event"] for e in read_timeline(r.timeline.path) if e["kind"] == "event"]


def test_inject_rpc_failures_restarts_with_rays_json_and_counts_what_ray_injected(run):
    r = run()
    ev = inject_rpc_failures(spec={LEASE: {"num_failures": -1, "req_failure_prob": 0.2}},
                             nodes=["worker-2"], observe_s=0.1)
    [(_, call)] = [c for c in r.target.calls if c[0] == "restart_with_env"]
    assert call["nodes"] == ["worker-2"]
    assert json.loads(call["env"]["RAY_testing_rpc_failure"]) == {
        LEASE: {"num_failures": -1, "req_failure_prob": 20}}
    assert ev["env_seen"] == {"worker-2/raylet": call["env"]} and ev["injected_total"] > 0
    [record] = r.ledger.faults
    assert record["undo"] == {"kind": "node_env", "nodes": ["worker-2"],
                              "vars": ["RAY_testing_rpc_failure"]}
    assert undo_all()["undone"] == ["f1"] and r.target.env["worker-2"] == {}


def test_a_malformed_spec_never_reaches_the_target(run):
    r = run()
    with pytest.raises(ConfigError, match=r"spec\.NodeManagerService\.grpc_client\."
                                          r"RequestWorkerLease\.req_failure_prob: must be in"):
        inject_rpc_failures(spec={LEASE: {"num_failures": -1, "req_failure_prob": 2}})
    with pytest.raises(ConfigError, match="spec: is not valid JSON"):
        inject_rpc_failures(spec='{"oops"')
    assert not r.ledger.faults and not [c for c in r.target.calls if c[0] == "restart_with_env"]


def test_flags_that_change_nothing_fail_the_fault_and_are_still_undone(run):
    """The negative control of the faults' own evidence: a spec that matches no call Ray
    makes (no failure injected) and a delay on a handler the GCS never runs (the node table
    as fast as before) fail loudly — and the nodes are restarted without the flag anyway."""
    r = run()
    r.target.ray_log_counts = lambda nodes, needles: {n: dict.fromkeys(needles, 0)
                                                      for n in nodes}
    with pytest.raises(FaultFailed, match="Ray injected no failure on"):
        inject_rpc_failures(spec={LEASE: {"num_failures": -1, "req_failure_prob": 0.2}},
                            nodes=["worker-2"], observe_s=0.1)
    r.target.gcs_call_ms = lambda timeout=2.0: 1.0
    with pytest.raises(FaultFailed, match="the node table still answers in 1 ms"):
        slow_gcs(min_ms=200, max_ms=300)
    assert [f["state"] for f in r.ledger.faults] == ["failed", "failed"]
    undo_all()
    assert r.target.env["worker-2"] == {} and r.target.env["head"] == {}


def test_slow_gcs_latency_probe_passes_before_and_fails_after(run):
    r = run()
    assert gcs_latency(samples=3, max_ms=50)["p95_ms"] < 50  # baseline: the probe passes
    ev = slow_gcs(min_ms=200, max_ms=300)
    assert ev["gcs_call_ms_before"] < 50 <= 200 <= ev["gcs_call_ms_after"]
    assert "HandleRequestImpl=200000:300000" in r.target.env["head"]["RAY_testing_asio_delay_us"]
    slowed = gcs_latency(samples=3, max_ms=50)  # the negative control: the probe fails
    assert r.probes[-1]["verdict"] == "fail" and slowed["ratio"] > 10
    undo_all()
    assert "RAY_testing_asio_delay_us" not in r.target.env["head"]


def test_a_blackout_cycles_and_a_false_death_fails_the_probe(run):
    r = run(blackout_kills=True)
    ev = blackout(nodes=["worker-1"], down_s=0.2, every_s=0.4, count=2)
    # each cycle down for (at least about) its down_s, restored before the next began: the
    # order, not an upper bound on a sleep (a loaded box overslept 0.2 s by 0.2 s once, in CI)
    cycles = ev["cycles"]
    assert ev["cycles_run"] == 2 and all(c["down_s"] >= 0.15 for c in cycles)
    assert all(c["down_at_t"] < c["up_at_t"] for c in cycles)
    assert cycles[0]["up_at_t"] <= cycles[1]["down_at_t"]
    assert _events(r).count("blackout_down") == 2 == _events(r).count("blackout_up")
    found = false_node_deaths(settle_s=0.3)
    assert found["false_deaths"] >= 1 and r.probes[-1]["verdict"] == "fail"
    assert found["false"][0]["node"] == "gone" and found["false"][0]["raylet_alive"] is True


def test_a_blackout_the_gcs_rides_out_passes_and_bad_periods_are_refused(run):
    r = run()
    blackout(nodes=["worker-1"], down_s=0.1, every_s=0.3, count=1)
    assert false_node_deaths(settle_s=0.2)["false_deaths"] == 0
    assert r.probes[-1]["verdict"] == "pass"
    with pytest.raises(ConfigError, match="down_s: is 5 s, not shorter than its period every_s"):
        blackout(down_s=5, every_s=5)
    with pytest.raises(ConfigError, match="count: must be at least 1, got 0"):
        blackout(count=0)


def test_a_stop_request_ends_a_background_blackout_at_once_and_gives_the_network_back(run):
    r = run()
    result: dict = {}
    thread = threading.Thread(target=lambda: result.update(
        blackout(nodes=["worker-1"], down_s=5, every_s=10, count=3)))
    t0 = time.monotonic()
    thread.start()
    time.sleep(0.3)
    r.stopping.set()
    thread.join(timeout=20)
    # at once, against the 25 s its three cycles take (a loose bound: the light lane runs at
    # nice 19); that it stopped early is the evidence's own word
    assert time.monotonic() - t0 < 15 and result["stopped_early"] and result["cycles_run"] == 1
    assert ("restore_network", None) in r.target.calls and not r.target.cut


def test_overlapping_faults_have_their_own_records_and_the_windows_know(run):
    r = run(outage_s=0.3)
    thread = threading.Thread(target=blackout, kwargs={"nodes": ["worker-1"], "down_s": 1.0,
                                                       "every_s": 2.0})
    thread.start()
    time.sleep(0.2)
    kill_head(mode="head", wait_s=5)
    thread.join(timeout=5)
    records = read_timeline(r.timeline.path)
    spans = {s["fault"]: s for s in fault_spans(records)}
    assert spans["blackout"]["overlapped"] == [spans["kill_head"]["id"]]
    assert spans["kill_head"]["overlapped"] == [spans["blackout"]["id"]]
    lo, hi = windows(records)["overlap"]
    assert spans["kill_head"]["start"] <= lo < hi <= spans["blackout"]["end"]
    assert sorted(f["fault"] for f in r.ledger.faults) == ["blackout", "kill_head"]
    assert sorted(undo_all()["undone"]) == ["f1", "f2"]


@pytest.mark.parametrize("leak", [False, True])
def test_resources_restored_names_a_leaked_gpu(run, leak):
    r = run(leak_gpu=leak)
    ev = resources_restored(timeout_s=0.5)
    assert ev["restored"] is not leak
    assert r.probes[-1]["verdict"] == ("fail" if leak else "pass")
    if leak:
        assert ev["held"] == {"worker-1": {"GPU": 1.0}}


@pytest.mark.parametrize("lose", [False, True])
def test_job_history_preserved_across_a_head_kill(run, lose):
    r = run(outage_s=0.2, lose_job_history=lose)
    r.target.submit_job("python task_storm.py --name storm")
    r.extras["job_history_before"] = snapshot_job_history(r.target)
    kill_head(mode="head", wait_s=5)
    ev = job_history_preserved(timeout_s=1)
    assert ev["before"] == 1 and ev["preserved"] is not lose
    assert r.probes[-1]["verdict"] == ("fail" if lose else "pass")
    assert [j["job_id"] for j in ev["lost"]] == (["fakejob_1"] if lose else [])
