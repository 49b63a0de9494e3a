"""junit.xml: probes and SLOs as test cases CI can show."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from _runs import make_run, slo

from raychaos.results.junit import slo_message, write_junit

pytestmark = pytest.mark.unit


def cases(root: ET.Element) -> dict[str, ET.Element]:
    return {c.get("name", ""): c for c in root.iter("testcase")}


def test_counts_failures_errors_and_skips(tmp_path: Path) -> None:
    out = write_junit(make_run(tmp_path))
    assert out.name == "junit.xml"
    root = ET.parse(out).getroot()
    suites = root.findall("testsuite")
    assert len(suites) == 1
    suite = suites[0]
    assert suite.get("name") == "Kill the head under load"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"),
            suite.get("skipped")) == ("7", "1", "1", "1")
    by_name = cases(root)
    assert len(by_name) == 7 and list(by_name["run"]) == [], "the run itself: a passed case"
    failure = by_name["storm-p99"].find("failure")
    assert failure is not None
    assert failure.get("message") == (
        "storm-p99: p99_latency_ms over chaos (load task_storm) measured 40, required <= 25.0")
    assert json.loads(failure.text or "") == {"samples": 10}
    assert by_name["gcs-recovery"].find("error") is not None
    skipped = by_name["jobs-survive"].find("skipped")
    assert skipped is not None and skipped.get("message") == (
        "not applicable: jobs-survive: job_survival_ratio over recovery not measured, "
        "required >= 1.0 (no jobs submitted)")
    assert list(by_name["gcs-recovers-fast"]) == []  # passed: no child element


def test_crashed_run_is_an_error_not_green(tmp_path: Path) -> None:
    root = ET.parse(write_junit(make_run(tmp_path, summary=False, torn=True))).getroot()
    suite = root.find("testsuite")
    assert suite is not None and suite.get("errors") == "1" and suite.get("tests") == "1"
    error = cases(root)["run"].find("error")
    assert error is not None and "summary.json is missing" in (error.get("message") or "")


def test_aborted_run_adds_run_error(tmp_path: Path) -> None:
    run = make_run(tmp_path, status="aborted", verdict="error", errors=["abort: GPUs gone"],
                   slos=[slo("gcs", 3.0)], probes=[])
    root = ET.parse(write_junit(run)).getroot()
    assert sorted(cases(root)) == ["gcs", "run"]
    assert root.get("errors") == "1" and root.get("failures") == "0"
    assert "abort: GPUs gone" in (root.findtext("testsuite/system-err") or "")


def test_awkward_text_is_escaped_and_xml_stays_valid(tmp_path: Path) -> None:
    nasty = 'p99 <"quoted"> & \x1b[31mred\x1b[0m \x00'
    run = make_run(tmp_path, title=nasty, errors=[nasty],
                   slos=[slo(nasty, 12.0, threshold=10.0)], probes=[])
    root = ET.parse(write_junit(run)).getroot()  # parses: nothing illegal was written
    case = root.find("testsuite/testcase")
    assert case is not None
    assert case.get("name", "").startswith('p99 <"quoted"> & ')
    assert "\x1b" not in case.get("name", "")
    failure = case.find("failure")
    assert failure is not None and "measured 12, required <= 10.0" in failure.get("message", "")


def test_slo_message_for_unmeasured_value() -> None:
    assert slo_message(slo("g", None, verdict="fail")) == (
        "g: gcs_recovery_s over chaos not measured, required <= 10.0")
