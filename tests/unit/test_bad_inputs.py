"""The bad-input corpus: every malformed file is refused with ONE sentence naming file, key and
value, and nothing is started — no state folder, no results folder, no network namespace.

Files and their expected message fragments live in ``tests/unit/bad_inputs/`` (see its
``expected.yaml``); adding a case is adding a file and a line.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from raychaos.config.gameday import load_gameday
from raychaos.errors import ConfigError
from raychaos.run.runner import run_experiment_file

HERE = Path(__file__).resolve().parent / "bad_inputs"
EXPECTED: dict[str, str] = yaml.safe_load((HERE / "expected.yaml").read_text())
REPO = HERE.parents[2]


def test_corpus_is_large_and_every_file_is_listed():
    files = {p.name for p in HERE.glob("*.yaml")} - {"expected.yaml", "_good-base.yaml"}
    assert len(EXPECTED) >= 30
    assert files == set(EXPECTED) - {"exp-does-not-exist.yaml"}


def _netns() -> str:
    try:
        return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                              timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_input_is_rejected_with_one_message_and_nothing_starts(name, tmp_path, capsys,
                                                                   monkeypatch):
    monkeypatch.chdir(REPO)  # relative load scripts resolve as for a user in the repository
    path = HERE / name
    fragment = EXPECTED[name]
    if name.startswith("gd-"):
        with pytest.raises(ConfigError) as err:
            load_gameday(path)
        problems = err.value.problems
    else:
        state, results = tmp_path / "state", tmp_path / "results"
        exp, slo = (HERE / "_good-base.yaml", path) if name.startswith("slo-") else (path, None)
        code = run_experiment_file(exp, slo=str(slo) if slo else None,
                                   results_root=str(results), state_root=str(state), quiet=True)
        err_text = capsys.readouterr().err
        assert code == 2
        problems = [line[len("error: "):] for line in err_text.splitlines()
                    if line.startswith("error: ")]
        assert err_text.rstrip().endswith("nothing was started.")
        assert not state.exists() or not any(state.iterdir()), "a state folder was made"
        assert not results.exists(), "a results folder was made"
        assert "hdbad" not in _netns(), "a network namespace was made"
    assert len(problems) == 1, problems
    [problem] = problems
    assert problem.startswith(f"{path}: "), problem
    assert fragment in problem, problem


def test_good_base_is_valid():
    from raychaos.config.experiment import load_experiment

    assert load_experiment(HERE / "_good-base.yaml").title == "a bad input"
