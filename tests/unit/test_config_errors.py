"""Bad input is rejected before anything starts, with one sentence naming file, key and value."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from raychaos.config.experiment import load_experiment
from raychaos.config.settings import load_slo_profile
from raychaos.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
GOOD = (REPO / "experiments" / "head-kill.yaml").read_text()


def write(tmp_path: Path, text: str, name: str = "exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def problems_of(path: Path, **kw) -> list[str]:
    with pytest.raises(ConfigError) as err:
        load_experiment(path, **kw)
    return err.value.problems


def test_every_catalog_experiment_is_valid(monkeypatch):
    monkeypatch.chdir(REPO)
    for path in sorted((REPO / "experiments").glob("*.yaml")):
        exp = load_experiment(path.relative_to(REPO))
        assert exp.title and exp.data["method"]


def test_unknown_fault_mode_names_file_key_and_value(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    path = write(tmp_path, GOOD.replace("mode: head", "mode: brain"))
    assert problems_of(path) == [
        f"{path}: method[0].provider.arguments.mode: expected one of 'head', 'pod', 'gcs', "
        "got 'brain'"]


def test_all_problems_are_reported_at_once(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    text = (GOOD.replace("mode: head", "mode: brain")
            .replace("wait_s: 180", "wait_s: soon")
            .replace("workers: 2", "workers: 2\n        color: blue")
            .replace("timeout_s: 30", "timeout_s: 30\n          bogus: 1"))
    found = problems_of(write(tmp_path, text))
    joined = "\n".join(found)
    assert len(found) == 4, joined
    assert "method[0].provider.arguments.mode: expected one of" in joined
    assert "method[0].provider.arguments.wait_s: expected a number, got 'soon'" in joined
    assert "extensions[0].target.local.color: unknown key" in joined
    assert "steady-state-hypothesis.probes[0].provider.arguments.bogus: unknown argument" in joined


@pytest.mark.parametrize("old,new,expected", [
    ("workers: 2", "workers: two", "extensions[0].target.local.workers: expected a whole number, "
                                   "got 'two'"),
    ("workers: 2", "workers: -1", "extensions[0].target.local.workers: must be at least 1, got -1"),
    ("gpu_workers: 1", "gpu_workers: 5",
     "extensions[0].target.local: gpu_workers (5) cannot exceed workers (2)"),
    ("gcs_storage: rocksdb", "gcs_storage: etcd",
     "extensions[0].target.local.gcs_storage: expected one of 'rocksdb', 'redis', 'none', "
     "got 'etcd'"),
    ("script: loads/task_storm.py", "script: loads/nope.py",
     "extensions.raychaos.loads[0].script: no such file 'loads/nope.py'"),
    ("interval_s: 0.2", "interval_s: 5", "extensions[0].monitor.interval_s: must be at most 0.2"),
    ("func: kill_head", "func: kill_everything",
     "method[0].provider.func: raychaos.faults.head has no function 'kill_everything'"),
    ("slo_profile: probes/slo-local-serve.yaml", "slo_profile: probes/missing.yaml",
     "extensions.raychaos.slo_profile: SLO profile 'probes/missing.yaml' not found"),
])
def test_single_problems(tmp_path, monkeypatch, old, new, expected):
    monkeypatch.chdir(REPO)
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    found = problems_of(path)
    assert any(p.startswith(f"{path}: {expected}") for p in found), found


def test_yaml_syntax_error_names_line(tmp_path):
    path = write(tmp_path, "title: x\nmethod: [\n")
    [problem] = problems_of(path)
    assert problem.startswith(f"{path}: not valid YAML (line ")


def test_yaml_cannot_construct_objects(tmp_path):
    path = write(tmp_path, "title: !!python/object/apply:os.system ['echo pwned']\n")
    [problem] = problems_of(path)
    assert "not valid YAML" in problem


def test_missing_file(tmp_path):
    assert problems_of(tmp_path / "nope.yaml") == [f"{tmp_path / 'nope.yaml'}: experiment file "
                                                   "not found"]


def test_missing_control_and_unknown_top_level_key(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    text = GOOD.replace("module: raychaos.control", "module: somewhere.else") + "\nfoo: 1\n"
    found = "\n".join(problems_of(write(tmp_path, text)))
    assert "controls: the raychaos control is missing" in found
    assert f"{tmp_path / 'exp.yaml'}: foo: unknown key" in found


def test_slo_profile_errors(tmp_path):
    path = write(tmp_path, """
        name: p
        slos:
          - name: a
            metric: gcs_recovery_seconds
          - name: a
            metric: gcs_recovery_s
            op: "~"
            threshold: fast
        """, "slo.yaml")
    with pytest.raises(ConfigError) as err:
        load_slo_profile(path)
    found = "\n".join(err.value.problems)
    assert f"{path}: slos[0]: metric: unknown metric 'gcs_recovery_seconds'" in found
    assert f"{path}: slos[1].op: expected one of" in found
    assert f"{path}: slos[1].threshold: expected a number, got 'fast'" in found


def test_slo_needing_a_probe_the_experiment_does_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    text = GOOD.replace("""  - type: probe
    name: load-job-survived
    provider:
      type: python
      module: raychaos.probes.jobs
      func: job_survival
""", "")
    found = problems_of(write(tmp_path, text))
    assert any("'job_survival_ratio' needs the job_survival probe" in p for p in found), found


def test_every_slo_profile_loads():
    for path in sorted((REPO / "probes").glob("*.yaml")):
        profile = load_slo_profile(path)
        assert profile.slos, path
