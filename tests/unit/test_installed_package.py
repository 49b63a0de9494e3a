"""An installed raychaos (a wheel, not the source checkout) has everything a run needs: the load
scripts, the catalog and the SLO profiles as package data, and no path that only resolves in a
checkout. The wheel is built from this tree, installed into a folder of its own and run from
another folder, against the fake cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    wheels = root / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--wheel-dir", str(wheels), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    [wheel] = list(wheels.glob("raychaos-*.whl"))
    site = root / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(wheel)], check=True, capture_output=True,
                   timeout=300)
    return site


def test_package_data_is_in_the_wheel(installed):
    catalog = installed / "raychaos" / "catalog"
    for rel in ("loads/task_storm.py", "loads/_stats.py", "loads/sentinel.py",
                "loads/serve_deploy.py", "experiments/head-kill.yaml",
                "experiments/gamedays/weekly.yaml", "probes/slo-local-serve.yaml"):
        assert (catalog / rel).is_file(), rel
        assert not (catalog / rel).is_symlink()


def test_the_installed_copy_runs_the_catalog_from_another_folder(installed, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=f"{installed}{os.pathsep}{REPO}",  # REPO: only for tests.unit.fake_target
               RAYCHAOS_TARGET_FACTORY="tests.unit.fake_target:from_spec",
               RAYCHAOS_FAKE=json.dumps({"outage_s": 0.3}))
    work = tmp_path / "elsewhere"
    work.mkdir()
    proc = subprocess.run([sys.executable, "-c", "import raychaos, sys; print(raychaos.__file__)"],
                          cwd=work, env=env, capture_output=True, text=True)
    assert proc.stdout.startswith(str(installed)), "the installed copy, not the checkout"
    proc = subprocess.run([sys.executable, "-m", "raychaos.cli", "run",
                           "experiments/head-kill.yaml", "--dry-run"], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "loads: task_storm (ray_job: loads/task_storm.py)" in proc.stdout
    assert "probes/slo-local-serve.yaml" in proc.stdout
