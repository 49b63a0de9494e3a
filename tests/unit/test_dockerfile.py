"""The Dockerfile cannot be built here (no docker), so what can drift is checked: its pip
requirements are exactly pyproject.toml's dependencies, Ray is pinned to 2.60.0, the project is
installed, the user is not root, and the entrypoint is ``raychaos``."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]


def _instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (REPO / "Dockerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _pip_requirements() -> list[str]:
    reqs: list[str] = []
    for op, rest in _instructions():
        if op != "RUN":
            continue
        for command in rest.split("&&"):
            words = shlex.split(command)
            if words[:2] == ["pip", "install"]:
                reqs += [w for w in words[2:] if not w.startswith("-") and w != "."]
    return reqs


def test_pip_requirements_match_pyproject():
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert sorted(_pip_requirements()) == sorted(deps)
    assert "ray[default,serve]==2.60.0" in _pip_requirements()


def test_the_project_is_installed_and_runs_as_a_non_root_raychaos_entrypoint():
    ins = _instructions()
    runs = " ".join(rest for op, rest in ins if op == "RUN")
    assert "pip install --no-deps ." in runs
    copied = {rest.split()[0] for op, rest in ins if op == "COPY"}
    assert {"src", "loads", "experiments", "probes"} <= copied
    user = [rest for op, rest in ins if op == "USER"]
    assert user and user[-1].split(":")[0] not in ("root", "0")
    assert [rest for op, rest in ins if op == "ENTRYPOINT"] == ['["raychaos"]']
    assert next(rest for op, rest in ins if op == "FROM").startswith("python:3.11")
