"""``raychaos calibrate``: thresholds proposed from the distribution of known-good runs, with the
stated margin; invariants kept exact and flagged when a known-good run broke them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from _runs import make_run

from raychaos.cli import main
from raychaos.run.calibrate import calibrate, propose
from raychaos.run.runner import RunOutcome

pytestmark = pytest.mark.unit

EXP = Path(__file__).resolve().parent / "experiments" / "fake-head-kill.yaml"


def test_rules_by_direction_and_unit():
    assert propose("gcs_recovery_s", "<=", [4.2, 5.0, 6.1], 0.5)["threshold"] == 11.0
    low = propose("task_failure_ratio", "<=", [0.0, 0.0, 0.0], 0.5)
    assert low["threshold"] == 0.005, "zero in every good run: one step of slack, not 0"
    high = propose("throughput_ratio", ">=", [0.91, 0.87, 0.95], 0.5)
    assert (high["op"], high["threshold"]) == (">=", 0.43)
    p95 = propose("p95_latency_ms", "<=", [120.0, 180.0], 0.5)
    assert p95["threshold"] == 280.0 and p95["rule"] == "max x 1.5 + 10 ms"
    inv = propose("sentinel_preserved", "==", [1.0, 1.0], 0.5)
    assert (inv["rule"], inv["threshold"], inv["held"], inv["flag"]) == (
        "invariant", 1.0, "2/2", None)
    broken = propose("blocks_lost_or_corrupted", "==", [0.0, 2.0], 0.5)
    assert broken["held"] == "1/2" and broken["flag"]
    assert propose("gcs_recovery_s", "<=", [], 0.5)["flag"] == "no known-good run measured it"


def _fake_runs(values: list[float]) -> Any:
    made = iter(values)

    def run(path: Any, *, results_root: Path, **_kw: Any) -> RunOutcome:
        value = next(made)
        slos = [{"name": "gcs-recovers", "metric": "gcs_recovery_s", "window": "run",
                 "load": None, "value": value, "op": "<=", "threshold": 30.0,
                 "verdict": "pass", "evidence": {}},
                {"name": "jobs-survive", "metric": "job_survival_ratio", "window": "run",
                 "load": None, "value": 1.0, "op": ">=", "threshold": 1.0, "verdict": "pass",
                 "evidence": {}},
                {"name": "sentinel-kept", "metric": "sentinel_preserved", "window": "run",
                 "load": None, "value": 1.0, "op": "==", "threshold": 1.0, "verdict": "pass",
                 "evidence": {}}]
        run_dir = make_run(Path(results_root), f"run-{value}", slos=slos, probes=[],
                           verdict="pass")
        return RunOutcome(0, run_dir, json.loads((run_dir / "summary.json").read_text()))

    return run


def test_calibrate_writes_the_distribution_and_a_proposed_profile(tmp_path):
    lines: list[str] = []
    code, folder = calibrate(EXP, 3, results_root=tmp_path, run=_fake_runs([4.2, 5.0, 6.1]),
                             say=lines.append)
    assert code == 0 and folder is not None
    result = json.loads((folder / "calibration.json").read_text())
    row = result["slos"]["gcs-recovers"]
    assert row["values"] == [4.2, 5.0, 6.1] and (row["min"], row["max"]) == (4.2, 6.1)
    assert (row["op"], row["threshold"]) == ("<=", 11.0)
    assert row["shipped"] == {"op": "<=", "threshold": 30.0}
    profile = yaml.safe_load((folder / "slo-proposed.yaml").read_text())
    by = {s["name"]: s for s in profile["slos"]}
    assert by["gcs-recovers"]["threshold"] == 11.0
    assert "known-good 4.2..6.1 (p50 5) over 3 runs" in by["gcs-recovers"]["description"]
    assert by["sentinel-kept"]["threshold"] == 1.0 and by["sentinel-kept"]["op"] == "=="
    text = "\n".join(lines)
    assert "gcs-recovers" in text and "<= 11" in text


def test_the_cli_has_the_command(capsys):
    with pytest.raises(SystemExit):
        main(["calibrate", "--help"])
    assert "--trials" in capsys.readouterr().out
