"""compare_runs / summarize_trials: regressions are flagged, noise within tolerance is not."""

from __future__ import annotations

from pathlib import Path

import pytest
from _runs import make_run, slo

from raychaos.results.compare import (
    compare_runs,
    format_comparison,
    format_trials,
    recovery_figures,
    summarize_trials,
)
from raychaos.results.report import load_run

pytestmark = pytest.mark.unit


def pair(tmp_path: Path, slos_a: list, slos_b: list, **b_kwargs) -> tuple[Path, Path]:
    a = make_run(tmp_path, "a", slos=slos_a, verdict="pass")
    b = make_run(tmp_path, "b", slos=slos_b, verdict=b_kwargs.pop("verdict", "pass"), **b_kwargs)
    return a, b


def test_planted_regression_is_flagged(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [slo("gcs", 5.0)], [slo("gcs", 6.5)])  # +30 % on a "<=" SLO
    result = compare_runs(a, b, tolerance=0.2)
    assert result["regressions"] == [
        "SLO gcs: worse by 30% (tolerance 20%) (A 5, B 6.5)"]
    row = result["slos"][0]
    assert row["regression"] and row["worse_by"] == pytest.approx(0.3)
    assert "!!  SLO gcs" in format_comparison(result)


def test_change_within_tolerance_is_not_a_regression(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [slo("gcs", 5.0), slo("tput", 1.0, op=">=", threshold=0.8)],
                [slo("gcs", 5.9), slo("tput", 0.85, op=">=", threshold=0.8)])
    result = compare_runs(a, b, tolerance=0.2)
    assert result["regressions"] == []
    assert "no regression beyond 20%" in format_comparison(result)


def test_direction_follows_the_op(tmp_path: Path) -> None:
    # ">=": smaller is worse; "<=": a big drop is an improvement.
    a, b = pair(tmp_path, [slo("tput", 1.0, op=">=", threshold=0.5), slo("gcs", 8.0)],
                [slo("tput", 0.6, op=">=", threshold=0.5), slo("gcs", 2.0)])
    rows = {r["name"]: r for r in compare_runs(a, b)["slos"]}
    assert rows["tput"]["regression"] and rows["tput"]["worse_by"] == pytest.approx(0.4)
    assert not rows["gcs"]["regression"] and rows["gcs"]["worse_by"] == pytest.approx(-0.75)


def test_pass_to_fail_is_a_regression_even_within_tolerance(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [slo("gcs", 9.9)], [slo("gcs", 10.1)], verdict="fail")
    result = compare_runs(a, b, tolerance=0.2)
    assert result["regressions"] == [
        "run verdict pass -> fail",
        "SLO gcs: verdict pass -> fail (A 9.9, B 10.1)"]


def test_recovery_figures_from_the_timeline(tmp_path: Path) -> None:
    records = load_run(make_run(tmp_path, gcs_down=(20.0, 26.0), nodes_back_at=34.0)).records
    assert recovery_figures(records) == {
        "gcs_down_s": 6.0, "gcs_first_answer_s": 6.0, "gcs_recovery_s": 6.0, "gcs_flaps": 0,
        "gcs_flaps_after_recovery": 0, "gcs_flap_spans": [], "nodes_recovery_s": 14.0,
        "gpus_back_s": 14.0,
        "reregistration": None, "nodes_alive_s": None, "reregistered_s": {},
        "workers_before_unknown": False, "workers_gone": {}, "nodes_settled_s": None,
        "outage_max_gap_s": 0.5, "outage_samples_per_s": 2.0}


def test_never_recovered_is_a_regression(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [], [], nodes_back_at=999.0)
    result = compare_runs(a, b)
    assert "recovery nodes_recovery_s: B never recovered (A 14, B -)" in result["regressions"]


def test_missing_slos_are_noted_not_flagged(tmp_path: Path) -> None:
    a, b = pair(tmp_path, [slo("old", 1.0)], [slo("new", 1.0)])
    result = compare_runs(a, b)
    assert result["regressions"] == []
    assert result["notes"] == ["SLO 'old' is only in A", "SLO 'new' is only in B"]


def test_summarize_trials(tmp_path: Path) -> None:
    runs = [make_run(tmp_path, f"t{i}", slos=[slo("gcs", v)], verdict=verdict)
            for i, (v, verdict) in enumerate([(4.0, "pass"), (6.0, "pass"), (12.0, "fail"),
                                              (5.0, "pass")])]
    runs.append(make_run(tmp_path, "t4", slos=[slo("gcs", None)], verdict="error"))
    summary = summarize_trials(runs)
    assert summary["trials"] == 5 and summary["passed"] == 3
    assert summary["pass_rate"] == pytest.approx(0.6)
    assert summary["verdicts"] == {"pass": 3, "fail": 1, "error": 1}
    gcs = summary["slos"]["gcs"]
    assert gcs["n"] == 4 and gcs["max"] == 12.0 and gcs["min"] == 4.0
    assert gcs["p50"] == 5.0 and gcs["p95"] == 12.0  # nearest rank, the one definition
    assert gcs["pass_rate"] == pytest.approx(0.75)
    assert summary["recovery"]["gcs_down_s"]["p50"] == pytest.approx(6.0)
    text = format_trials(summary)
    assert "5 trials, 3 passed (60%)" in text and "gcs" in text
