"""The pipeline path end to end: the real head-kill experiment run once through the pytest
plugin against a local Ray cluster, read back as per-SLO JUnit test cases, then compared
with a copy of itself carrying a planted regression.

pytest runs in a subprocess (as in CI: ``pytest -p raychaos.pytest_plugin --raychaos ...``)
and reuses the shared cluster through ``--raychaos-state-root``.
"""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET

import pytest

from raychaos import cli

from ._experiments import (
    REPO,
    WARM,
    assert_healthy,
    module_cluster,
    raychaos_block,
    variant,
)

NAME = WARM
SLOS = ["gcs-recovers-fast", "workers-reregister", "sentinel-actor-preserved",
        "load-jobs-survive", "task-failures", "storm-throughput-during-chaos",
        "storm-throughput-back", "serve-errors", "serve-p95-after-recovery"]
PROBES = ["gcs_recovery", "sentinel_preserved", "job_survival"]


@pytest.fixture(scope="module")
def cluster(warm_cluster):
    yield from module_cluster(warm_cluster, keep_serve=True)


def test_head_kill_through_the_plugin_then_compare(cluster, pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    target, root = cluster

    def edit(data):
        block = raychaos_block(data)
        block["target"]["local"]["name"] = NAME
        block["monitor"]["recovery_window_s"] = 3
        block["slo_profile"] = str(REPO / block["slo_profile"])
        for load in block["loads"]:
            load["script"] = str(REPO / load["script"])

    exp = variant("experiments/head-kill.yaml", pytester.path / "head-kill.yaml", edit)
    results, xml = pytester.path / "results", pytester.path / "junit.xml"
    for key in [k for k in os.environ if k.startswith("RAY_")]:
        monkeypatch.delenv(key)  # a Ray driver earlier in this process leaves its own behind
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(REPO / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]))
    before = target.head_identity()
    result = pytester.runpytest_subprocess(
        # Locust's own pytest plugin imports locust (gevent monkey-patching) into the process
        # that runs the experiment and imports Ray: it can kill that process outright
        "-p", "no:locust", "-p", "raychaos.pytest_plugin", "--raychaos", str(exp), "-v",
        "--raychaos-results", str(results), "--raychaos-state-root", str(root),
        f"--junitxml={xml}", timeout=800)
    out = "\n".join(result.outlines[-60:])
    runs = list(results.iterdir()) if results.exists() else []
    assert len(runs) == 1, out
    [run_dir] = runs
    summary = json.loads((run_dir / "summary.json").read_text())
    # a healthy cluster passes, or (the other lane loading these cores) is inconclusive for
    # a reason about the data: those checks' items are skipped, none fails. The summary is
    # read first: a failed assertion then names each check's evidence, not only pytest's exit
    assert_healthy({"pass": 0, "inconclusive": 3}.get(summary["verdict"], 1), summary, out)
    assert result.ret == 0, out  # passed and skipped items only
    late = {f"slo[{s['name']}]" for s in summary["slos"] if s["verdict"] != "pass"}
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("errors", 0) == 0, out
    assert outcomes.get("passed", 0) + outcomes.get("skipped", 0) == 1 + len(SLOS) + len(PROBES)
    # the run's own item passes (it completed, its hypothesis held): only the checks the data
    # could not decide are skipped
    assert outcomes.get("skipped", 0) == len(late), out
    # proof the chaos happened: the head was killed and a new one took its place
    [fault] = summary["faults"]
    assert fault["evidence"]["landed"] and fault["evidence"]["old"]["pid"] == before["pid"]
    assert target.head_identity()["pid"] != before["pid"]

    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    expected = {"run", *(f"slo[{n}]" for n in SLOS), *(f"probe[{n}]" for n in PROBES)}
    assert set(cases) == expected, sorted(cases)
    for name, case in cases.items():
        if name in late:
            assert case.find("skipped") is not None, name  # inconclusive: skipped, why
            continue
        assert case.find("failure") is None and case.find("error") is None, name
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["run_dir"] == str(run_dir), name
    measured = {s["name"]: s["value"] for s in summary["slos"]}
    props = {p.get("name"): p.get("value") for p in cases["slo[gcs-recovers-fast]"].iter(
        "property")}
    assert float(props["value"]) == measured["gcs-recovers-fast"]

    # the same run against itself: no regression; against a slower copy: exit 1
    assert cli.main(["compare", str(run_dir), str(run_dir)]) == 0
    slower = pytester.path / "slower"
    shutil.copytree(run_dir, slower)
    planted = json.loads((slower / "summary.json").read_text())
    for s in planted["slos"]:
        if s["name"] == "gcs-recovers-fast":
            s["value"] = s["value"] * 3 + 1.0  # far beyond the 20 % tolerance
    (slower / "summary.json").write_text(json.dumps(planted))
    capsys.readouterr()
    assert cli.main(["compare", str(run_dir), str(slower)]) == 1
    report = capsys.readouterr().out
    assert "gcs-recovers-fast" in report and "regression" in report.lower(), report
    # the run stopped its loads and read that back (loads_ended): none is left on the cluster
    assert target.jobs.active_jobs() == [], "a load job outlived the run"
