"""Overlapping faults through the whole lifecycle, both entrances (``raychaos run`` and
``chaos run``), against the fake cluster: a background blackout and a head kill inside it each
get their own ledger record and undo, the summary's fault spans say they overlapped, the
``overlap`` window is judged — and the same run fails, naming the probe, when the fake GCS
declares the dark worker dead while its raylet runs (a false death) or leaks a GPU."""

from __future__ import annotations

import json

import pytest

from tests.unit.test_lifecycle import HERE, _run

pytestmark = pytest.mark.unit

EXP = HERE / "experiments" / "fake-overlap.yaml"


@pytest.mark.parametrize("entrance", ["raychaos", "chaos"])
def test_overlapping_faults_pass_with_their_own_records(entrance, tmp_path):
    code, run_dir, out = _run(entrance, EXP, tmp_path, outage_s=1.5)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert code == 0, out[-3000:]
    assert sorted(f["fault"] for f in summary["faults"]) == ["blackout", "kill_head"]
    assert all(f["state"] == "undone" for f in summary["faults"])
    spans = {s["fault"]: s for s in summary["fault_spans"]}
    assert spans["blackout"]["overlapped"] == [spans["kill_head"]["id"]]
    assert "overlap" in summary["windows"]
    rows = {s["name"]: s for s in summary["slos"]}
    assert rows["no-death-while-both-ran"]["window"] == "overlap"
    assert all(s["verdict"] == "pass" for s in summary["slos"]), summary["slos"]
    assert (run_dir / "timeline.png").stat().st_size > 10_000


@pytest.mark.parametrize("fake,failed", [
    ({"blackout_kills": True}, ["no-false-node-deaths"]),
    ({"leak_gpu": True, "lose_job_history": True},
     ["job-history-preserved", "resources-restored"])])
def test_the_run_fails_naming_what_the_failover_lost(tmp_path, fake, failed):
    code, run_dir, out = _run("raychaos", EXP, tmp_path, outage_s=1.5, **fake)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert code == 1, out[-3000:]
    assert [s["name"] for s in summary["slos"] if s["verdict"] == "fail"] == failed
    assert all(name in out for name in failed)
