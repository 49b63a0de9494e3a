"""Ledger, timeline and SLO window arithmetic on synthetic timelines with hand-computed values."""

from __future__ import annotations

import json

from raychaos.config.settings import SloProfile, SloSpec
from raychaos.observe.loadstats import aggregate
from raychaos.observe.slo import evaluate, weighted_percentile, windows
from raychaos.results.store import Clock, Ledger, Timeline, read_timeline


def test_ledger_is_written_before_the_fault_acts(tmp_path):
    ledger = Ledger(tmp_path / "ledger.json", "run-1", {"kind": "local"})
    record = ledger.begin("kill_head", {"mode": "gcs"})
    on_disk = json.loads((tmp_path / "ledger.json").read_text())
    assert on_disk["faults"][0]["state"] == "pending"
    assert on_disk["faults"][0]["args"] == {"mode": "gcs"}
    ledger.update(record, state="applied")
    reopened = Ledger.open_existing(tmp_path / "ledger.json")
    assert [r["id"] for r in reopened.outstanding()] == ["f1"]
    reopened.update(reopened.faults[0], state="undone", undone_at=1.0)
    assert Ledger.open_existing(tmp_path / "ledger.json").outstanding() == []


def test_timeline_survives_a_torn_last_line(tmp_path):
    tl = Timeline(tmp_path / "timeline.jsonl", Clock())
    tl.write("sample", gcs_up=True)
    tl.event("fault_start", "kill_head")
    tl.close()
    with open(tmp_path / "timeline.jsonl", "a") as fh:
        fh.write('{"t": 3.0, "kind": "sam')  # a crash mid-write
    records = read_timeline(tmp_path / "timeline.jsonl")
    assert [r["kind"] for r in records] == ["sample", "event"]


def synthetic() -> list[dict]:
    """10 s baseline at 100/s, a 5 s outage at 20/s with 10 failures/s, recovery at 100/s."""
    recs = []
    for s in range(25):
        if 10 <= s < 15:
            recs.append({"t": s + 0.5, "kind": "load", "load": "storm", "count": 20,
                         "failures": 10, "p95_ms": 500.0, "p99_ms": 900.0, "p50_ms": 100.0})
        else:
            recs.append({"t": s + 0.5, "kind": "load", "load": "storm", "count": 100,
                         "failures": 0, "p95_ms": 10.0, "p99_ms": 20.0, "p50_ms": 5.0})
    recs.append({"t": 10.0, "kind": "event", "event": "fault_start", "name": "kill_head"})
    recs.append({"t": 15.0, "kind": "event", "event": "fault_applied", "name": "kill_head",
                 "detail": {"lasting": False}})
    recs.append({"t": 20.0, "kind": "event", "event": "rollback_end", "name": "kill_head",
                 "detail": {"lasting": False}})
    return sorted(recs, key=lambda r: r["t"])


def test_windows_end_chaos_when_a_non_lasting_fault_is_over():
    w = windows(synthetic())
    assert w["baseline"] == (0.5, 10.0)
    assert w["chaos"] == (10.0, 15.0)
    assert w["recovery"] == (15.0, 24.5)


def test_load_metrics_per_window_by_hand():
    recs = synthetic()
    w = windows(recs)
    chaos, _ = aggregate(recs, w, "chaos", None)
    assert chaos["count"] == 100 and chaos["failures"] == 50 and chaos["seconds"] == 5
    assert chaos["error_ratio"] == round(50 / 150, 6)
    assert chaos["throughput"] == 20.0
    base, _ = aggregate(recs, w, "baseline", None)  # the first (partial) second is left out
    assert base["throughput"] == 100.0 and base["error_ratio"] == 0.0 and base["seconds"] == 9
    assert chaos["p95_ms"] == 500.0


def test_weighted_percentile():
    assert weighted_percentile([(1.0, 1), (2.0, 1), (3.0, 2)], 50) == 2.0
    assert weighted_percentile([(10.0, 90), (100.0, 10)], 95) == 100.0
    assert weighted_percentile([(10.0, 90), (100.0, 10)], 90) == 10.0
    assert weighted_percentile([], 50) is None


def test_evaluate_judges_each_slo_and_flags_unmeasured():
    profile = SloProfile(name="p", slos=[
        SloSpec(name="failures", metric="task_failure_ratio", window="chaos", threshold=0.5),
        SloSpec(name="dip", metric="throughput_ratio", window="chaos", op=">=", threshold=0.5),
        SloSpec(name="back", metric="throughput_recovery_s", op="<=", threshold=5),
        SloSpec(name="gcs", metric="gcs_recovery_s", threshold=30),
    ])
    probes = [{"name": "gcs_recovery", "verdict": "pass", "evidence": {"gcs_recovery_s": 4.2}}]
    rows, wins = evaluate(profile, synthetic(), probes)
    by = {r["name"]: r for r in rows}
    assert by["failures"]["verdict"] == "pass" and by["failures"]["value"] == round(50 / 150, 4)
    assert by["dip"]["verdict"] == "fail" and by["dip"]["value"] == 0.2
    assert by["back"]["verdict"] == "pass" and by["back"]["value"] == 0.0
    assert by["gcs"]["value"] == 4.2 and by["gcs"]["verdict"] == "pass"
    rows, _ = evaluate(profile, synthetic(), [])  # the probe recorded nothing: not observed
    assert {r["name"]: r["verdict"] for r in rows}["gcs"] == "error"
    assert wins["chaos"] == [10.0, 15.0]
