"""Game days and trials: order, cooldowns, stop/continue, worst-of exit codes, one folder.

The function that runs one experiment is replaced by one that writes a synthetic results
folder (``_runs.make_run``), so no cluster starts and cooldowns are recorded, not slept.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from _runs import make_run, slo
from kubernetes.client import ApiClient

from raychaos import cli
from raychaos.config.gameday import load_gameday
from raychaos.run.runner import RunOutcome
from raychaos.run.schedule import render_yaml, schedule_manifests
from raychaos.run.series import run_gameday, run_trials, worst_exit

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


class FakeRunner:
    """Stands in for ``run_experiment``: one synthetic run per call, verdicts in order."""

    def __init__(self, verdicts: list[str], status: str = "completed"):
        self.verdicts = list(verdicts)
        self.status = status
        self.calls: list[dict[str, Any]] = []

    def __call__(self, path: str | Path, **kwargs: Any) -> RunOutcome:
        self.calls.append({"path": str(path), **kwargs})
        verdict = self.verdicts.pop(0)
        value = 5.0 + len(self.calls)
        run = make_run(Path(kwargs["results_root"]), f"run-{len(self.calls)}", verdict=verdict,
                       status=self.status, slos=[slo("gcs", value)])
        (run / "report.html").write_text("<html></html>", encoding="utf-8")  # as a real run has
        summary = json.loads((run / "summary.json").read_text())
        return RunOutcome(summary["exit_code"], run, summary)


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    for name in ("a.yaml", "b.yaml", "c.yaml"):
        (tmp_path / name).write_text("title: x\n", encoding="utf-8")
    path = tmp_path / "plan.yaml"
    path.write_text("name: Weekly\ncooldown_s: 7\non_failure: stop\nexperiments:\n"
                    "  - path: a.yaml\n  - {path: b.yaml, cooldown_s: 3}\n  - path: c.yaml\n",
                    encoding="utf-8")
    return path


def test_gameday_runs_in_order_with_cooldowns_into_one_folder(plan: Path, tmp_path: Path) -> None:
    fake, pauses = FakeRunner(["pass", "pass", "pass"]), []
    code, folder = run_gameday(plan, results_root=tmp_path / "results", run=fake,
                               sleep=pauses.append, say=lambda _m: None)
    assert code == 0
    assert [Path(c["path"]).name for c in fake.calls] == ["a.yaml", "b.yaml", "c.yaml"]
    assert all(c["results_root"] == folder for c in fake.calls)
    assert pauses == [7.0, 3.0], "a cooldown between runs, none after the last"
    assert folder.parent == tmp_path / "results" and folder.name.endswith("-gameday-weekly")
    assert sorted(p.name for p in folder.iterdir()) == [
        "gameday.json", "index.html", "run-1", "run-2", "run-3"]
    index = (folder / "index.html").read_text(encoding="utf-8")
    assert 'href="run-1/report.html"' in index and "3 run(s): 3 passed" in index


def test_gameday_stops_at_the_first_failure(plan: Path, tmp_path: Path) -> None:
    fake, pauses = FakeRunner(["pass", "fail", "pass"]), []
    code, folder = run_gameday(plan, results_root=tmp_path, run=fake, sleep=pauses.append,
                               say=lambda _m: None)
    assert code == 1 and len(fake.calls) == 2 and pauses == [7.0]
    record = json.loads((folder / "gameday.json").read_text())
    assert record["stopped"].startswith("stopped after b.yaml")
    assert [Path(p).name for p in record["skipped"]] == ["c.yaml"]


def test_gameday_continue_runs_everything_and_a_failure_decides(plan: Path,
                                                                tmp_path: Path) -> None:
    plan.write_text(plan.read_text().replace("on_failure: stop", "on_failure: continue"))
    fake = FakeRunner(["error", "fail", "pass"])
    code, folder = run_gameday(plan, results_root=tmp_path, run=fake, sleep=lambda _s: None,
                               say=lambda _m: None)
    assert code == 1 and len(fake.calls) == 3  # the system fell short once: that is the answer
    assert "3 run(s): 1 passed, 1 failed" in (folder / "index.html").read_text()


def test_an_interrupted_run_ends_the_game_day_even_with_continue(plan: Path,
                                                                 tmp_path: Path) -> None:
    plan.write_text(plan.read_text().replace("on_failure: stop", "on_failure: continue"))
    fake = FakeRunner(["error"] * 3, status="interrupted")
    code, _ = run_gameday(plan, results_root=tmp_path, run=fake, sleep=lambda _s: None,
                          say=lambda _m: None)
    assert code == 2 and len(fake.calls) == 1


def test_trials_write_the_distribution_next_to_the_runs(tmp_path: Path) -> None:
    fake, lines = FakeRunner(["pass", "fail", "pass"]), []
    code, folder = run_trials(REPO / "experiments/head-kill.yaml", 3, results_root=tmp_path,
                              run=fake, say=lines.append)
    assert code == 1 and folder is not None and folder.name.endswith("-head-kill-trials")
    summary = json.loads((folder / "trials.json").read_text())
    assert summary["trials"] == 3 and summary["passed"] == 2
    assert summary["slos"]["gcs"]["max"] == 8.0
    assert any("3 trials, 2 passed" in line for line in lines)
    assert "3 trial(s), 2 passed" in (folder / "trials.html").read_text()


def test_cli_run_trials_and_gameday_exit_worst(monkeypatch: pytest.MonkeyPatch,
                                               plan: Path, tmp_path: Path) -> None:
    fake = FakeRunner(["pass", "error"])
    monkeypatch.setattr("raychaos.run.series._default_run", lambda: fake)
    assert cli.main(["run", "x.yaml", "--trials", "2", "--results", str(tmp_path)]) == 2
    plan.write_text(plan.read_text().replace("cooldown_s: 7", "cooldown_s: 0")
                    .replace("cooldown_s: 3", "cooldown_s: 0"))
    fake.verdicts = ["pass", "pass", "fail"]
    assert cli.main(["gameday", str(plan), "--results", str(tmp_path), "--quiet"]) == 1
    assert fake.calls[-1]["quiet"] is True


def test_cli_rejects_zero_trials(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["run", "x.yaml", "--trials", "0"])
    assert "expected a whole number >= 1, got '0'" in capsys.readouterr().err


def test_cli_gameday_with_a_bad_plan_names_the_problem(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nexperiments: [{path: nope.yaml}]\n", encoding="utf-8")
    assert cli.main(["gameday", str(bad), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert f"error: {bad}: experiments[0].path: no such experiment file 'nope.yaml'" in err
    assert not (tmp_path / "r").exists(), "nothing was started"


def test_weekly_plan_loads_and_its_manifests_deserialize(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    plan = load_gameday("experiments/gamedays/weekly.yaml")
    assert [Path(e.path).name for e in plan.experiments] == ["head-kill.yaml",
                                                             "gpu-node-drain.yaml"]
    assert plan.cooldown_after(0) > 0 and plan.on_failure == "stop"
    out = tmp_path / "weekly-k8s.yaml"
    assert cli.main(["schedule", "experiments/gamedays/weekly.yaml", "--cron", "0 3 * * 1",
                     "--namespace", "ml", "--image", "reg.example/raychaos:0.1",
                     "-o", str(out)]) == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    assert docs == schedule_manifests("experiments/gamedays/weekly.yaml", "0 3 * * 1", "ml",
                                      "reg.example/raychaos:0.1")
    kinds = {"ServiceAccount": "V1ServiceAccount", "Role": "V1Role",
             "RoleBinding": "V1RoleBinding", "CronJob": "V1CronJob",
             "ClusterRole": "V1ClusterRole", "ClusterRoleBinding": "V1ClusterRoleBinding"}
    api = ApiClient()
    try:  # as if the API server had answered with them; required fields are checked
        for doc in docs:
            obj = api.deserialize(json.dumps(doc), kinds[doc["kind"]], "application/json")
            assert obj.metadata.namespace == (None if doc["kind"].startswith("Cluster")
                                              else "ml")
    finally:
        api.close()
    cron = docs[-1]["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert cron["args"] == ["gameday", "experiments/gamedays/weekly.yaml"]
    assert render_yaml(docs).count("---") == len(docs) - 1


def test_a_series_combines_fail_then_error_then_all_pass_else_inconclusive() -> None:
    assert worst_exit([0, 2, 1]) == 1 and worst_exit([0, 2]) == 2 and worst_exit([]) == 0
    assert worst_exit([0, 3, 0]) == 3 and worst_exit([0, 0]) == 0
