"""The pytest plugin, run with pytester and a fake runner: no cluster, one run per file.

The fake runner (``--raychaos-runner fake_runner:run``) returns the summary in
``fake_summary.json`` and appends each call to ``calls.jsonl``, so the tests can check that
an experiment runs exactly once however many items it has, and what it was called with.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PLUGIN = ("-p", "no:locust", "-p", "raychaos.pytest_plugin")
FAKE = ("--raychaos-runner", "fake_runner:run")

FAKE_RUNNER = '''
import json
from pathlib import Path

HERE = Path(__file__).parent

def run(path, **kwargs):
    with open(HERE / "calls.jsonl", "a") as f:
        f.write(json.dumps({"path": path, **{k: str(v) for k, v in kwargs.items()}}) + "\\n")
    return json.loads((HERE / "fake_summary.json").read_text())
'''

SLOS = ["gcs-recovers-fast", "workers-reregister", "sentinel-actor-preserved",
        "load-jobs-survive", "task-failures", "storm-throughput-during-chaos",
        "storm-throughput-back", "serve-errors", "serve-p95-after-recovery"]
PROBES = ["gcs_recovery", "sentinel_preserved", "job_survival"]


def summary(failing: str | None = None, na: str | None = None, **extra: Any) -> dict[str, Any]:
    def verdict(name: str) -> str:
        return "fail" if name == failing else "n/a" if name == na else "pass"

    slos = [{"name": n, "metric": "gcs_recovery_s", "window": "chaos", "load": None,
             "value": None if n == na else 42.0 if n == failing else 1.5, "op": "<=",
             "threshold": 10.0, "verdict": verdict(n), "evidence": {}} for n in SLOS]
    probes = [{"name": n, "verdict": verdict(n), "evidence": {"recovered": n != failing}}
              for n in PROBES]
    return {"experiment": "head kill", "status": "completed", "verdict": "pass",
            "exit_code": 0, "slos": slos, "probes": probes, "errors": [],
            "hypothesis": {"deviated": False}, "run_dir": "results/fake-run", **extra}


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    """A copy of the catalog's head-kill experiment, its SLO profile and load script, the
    weekly game-day plan (not an experiment), and the fake runner."""
    for rel in ("experiments/head-kill.yaml", "probes/slo-local.yaml", "loads/task_storm.py",
                "probes/slo-local-serve.yaml", "loads/serve_users.py",
                "probes/slo-faults-local.yaml",
                "experiments/gamedays/weekly.yaml", "experiments/gpu-node-drain.yaml",
                "probes/slo-faults-local.yaml"):
        (pytester.path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, pytester.path / rel)
    pytester.makepyfile(fake_runner=FAKE_RUNNER)
    pytester.syspathinsert()
    (pytester.path / "fake_summary.json").write_text(json.dumps(summary()))
    return pytester


def calls(p: pytest.Pytester) -> list[dict[str, Any]]:
    path = p.path / "calls.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_nothing_is_collected_unless_asked(project: pytest.Pytester) -> None:
    project.makepyfile(test_plain="def test_ok():\n    pass\n")
    result = project.runpytest(*PLUGIN, *FAKE)
    result.assert_outcomes(passed=1)
    assert calls(project) == []


def test_one_run_per_file_and_one_item_per_slo_and_probe(project: pytest.Pytester) -> None:
    (project.path / "experiments/gpu-node-drain.yaml").unlink()
    result = project.runpytest(*PLUGIN, *FAKE, "--raychaos", "experiments/", "-v",
                               "--raychaos-results", "out", "--raychaos-state-root", "st")
    result.assert_outcomes(passed=1 + len(SLOS) + len(PROBES))
    result.stdout.fnmatch_lines(["*head-kill.yaml::run PASSED*",
                                 "*head-kill.yaml::slo?gcs-recovers-fast? PASSED*",
                                 "*head-kill.yaml::probe?job_survival? PASSED*"])
    [call] = calls(project)  # the game-day plan is not an experiment
    assert call["path"].endswith("head-kill.yaml")
    assert (call["results_root"], call["state_root"], call["target"]) == ("out", "st", "None")


def test_a_failing_slo_fails_pytest_with_value_and_threshold(project: pytest.Pytester) -> None:
    (project.path / "fake_summary.json").write_text(json.dumps(
        summary(failing="gcs-recovers-fast", na="load-jobs-survive", verdict="fail")))
    xml = project.path / "junit.xml"
    result = project.runpytest(*PLUGIN, *FAKE, "--raychaos", "experiments/head-kill.yaml",
                               f"--junitxml={xml}")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=len(SLOS) + len(PROBES) - 1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*gcs-recovers-fast: gcs_recovery_s over chaos measured 42, "
                                 "required <= 10.0*"])
    cases = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    failed = cases["slo[gcs-recovers-fast]"]
    assert failed.find("failure") is not None
    props = {p.get("name"): p.get("value") for p in failed.iter("property")}
    assert props == {"run_dir": "results/fake-run", "value": "42.0", "threshold": "10.0",
                     "verdict": "fail"}
    assert cases["slo[load-jobs-survive]"].find("skipped") is not None


def test_an_errored_run_errors_every_item_and_exits_2(project: pytest.Pytester) -> None:
    (project.path / "fake_summary.json").write_text(json.dumps(
        {"status": "errored", "verdict": "error", "errors": ["cluster unreachable"]}))
    result = project.runpytest(*PLUGIN, *FAKE, "--raychaos", "experiments/head-kill.yaml")
    result.assert_outcomes(errors=1 + len(SLOS) + len(PROBES))
    assert result.ret == 2, "as raychaos run: an error is 2, not a failure's 1"
    result.stdout.fnmatch_lines(["*the run errored: cluster unreachable*"])
    assert len(calls(project)) == 1


def _checks(**verdicts: str) -> list[dict[str, Any]]:
    """The checks of a summary: every item passes unless named (``probe_gcs_recovery=``)."""
    out = [{"kind": "run", "name": "run", "verdict": verdicts.get("run", "pass"),
            "message": verdicts.get("run_message", "the run completed")}]
    out += [{"kind": "slo", "name": n, "verdict": verdicts.get(f"slo_{n}", "pass"),
             "message": f"{n}: measured"} for n in SLOS]
    out += [{"kind": "probe", "name": n, "verdict": verdicts.get(f"probe_{n}", "pass"),
             "message": f"probe {n}: {verdicts.get(f'probe_{n}', 'pass')}"} for n in PROBES]
    return out


def test_a_probe_that_raised_is_an_error_of_its_item_and_exit_2(
        project: pytest.Pytester) -> None:
    (project.path / "fake_summary.json").write_text(json.dumps(summary(
        verdict="error", exit_code=2, checks=_checks(probe_gcs_recovery="error"))))
    xml = project.path / "junit.xml"
    result = project.runpytest(*PLUGIN, *FAKE, "--raychaos", "experiments/head-kill.yaml",
                               f"--junitxml={xml}")
    result.assert_outcomes(passed=len(SLOS) + len(PROBES), errors=1)
    assert result.ret == 2
    case = {c.get("name"): c for c in ET.parse(xml).getroot().iter("testcase")}
    assert case["probe[gcs_recovery]"].find("error") is not None


def test_a_system_that_did_not_recover_fails_the_run_item_and_exits_1(
        project: pytest.Pytester) -> None:
    why = "fault f1 kill_head: the system did not recover: the head did not come back"
    (project.path / "fake_summary.json").write_text(json.dumps(summary(
        verdict="fail", exit_code=1, checks=_checks(run="fail", run_message=why))))
    result = project.runpytest(*PLUGIN, *FAKE, "--raychaos", "experiments/head-kill.yaml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.assert_outcomes(passed=len(SLOS) + len(PROBES), failed=1)
    result.stdout.fnmatch_lines([f"*{why}*"])


def test_ini_option_collects_without_the_flag_and_target_is_passed(
        project: pytest.Pytester) -> None:
    project.makeini("[pytest]\nraychaos_experiments =\n    experiments/head-*.yaml\n")
    result = project.runpytest(*PLUGIN, *FAKE, "experiments/",
                               "--raychaos-target", "{kind: local, local: {name: plx}}")
    result.assert_outcomes(passed=1 + len(SLOS) + len(PROBES))
    [call] = calls(project)  # gpu-node-drain.yaml does not match the pattern
    assert "name='plx'" in call["target"]


def test_bad_experiment_and_bad_target_are_one_sentence_each(project: pytest.Pytester) -> None:
    exp = project.path / "experiments/head-kill.yaml"
    exp.write_text(exp.read_text().replace("mode: head", "mode: brain"))
    result = project.runpytest(*PLUGIN, *FAKE, "--raychaos", "experiments/head-kill.yaml")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error
    result.stdout.fnmatch_lines(["*error: experiments/head-kill.yaml: method[[]0[]].provider."
                                 "arguments.mode: expected one of 'head', 'pod', 'gcs', "
                                 "got 'brain'*"])
    assert calls(project) == []
    exp.write_text(exp.read_text().replace("mode: brain", "mode: head"))
    result = project.runpytest(*PLUGIN, *FAKE, "--raychaos", "experiments/head-kill.yaml",
                               "--raychaos-target", "{kind: moon}")
    result.stderr.fnmatch_lines(["*--raychaos-target: kind: expected one of*"])


def test_entry_point_is_named_after_its_module() -> None:
    """So ``-p raychaos.pytest_plugin`` on an installed copy is a no-op, not a second
    registration (pluggy refuses one module under two names)."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {
        "raychaos.pytest_plugin": "raychaos.pytest_plugin"}


def test_refuses_to_run_experiments_next_to_locusts_plugin(project: pytest.Pytester) -> None:
    import importlib.util

    if importlib.util.find_spec("locust") is None:  # never import it here: gevent patching
        pytest.skip("locust is not installed")
    result = project.runpytest_subprocess("-p", "raychaos.pytest_plugin", *FAKE, "--raychaos",
                               "experiments/head-kill.yaml")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "add `-p no:locust`" in "\n".join(result.errlines)
