"""One lifecycle, whichever entrance: ``chaos run`` and ``raychaos run`` write the same results,
judge the same way and exit non-zero on anything but a pass; ``abort_if`` stops either.

Whole experiments run in subprocesses against the in-process fake cluster of ``fake_target.py``
(``RAYCHAOS_TARGET_FACTORY``), so what is tested is the real control, session, faults, probes,
monitor and verdict code — only the cluster is simulated.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
EXP = HERE / "experiments" / "fake-head-kill.yaml"
FILES = {"summary.json", "journal.json", "timeline.jsonl", "ledger.json", "junit.xml",
         "report.html", "timeline.png"}


def _env(**fake: object) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(PYTHONPATH=f"{REPO / 'src'}{os.pathsep}{REPO}",
               RAYCHAOS_TARGET_FACTORY="tests.unit.fake_target:from_spec",
               RAYCHAOS_FAKE=json.dumps(fake))
    return env


def _run(entrance: str, exp: Path, tmp: Path, **fake: object) -> tuple[int, Path, str]:
    tmp.mkdir(parents=True, exist_ok=True)
    results = tmp / f"results-{entrance}"
    if entrance == "chaos":  # results go where the experiment says: point it at tmp
        data = yaml.safe_load(exp.read_text())
        data["extensions"][0]["results_dir"] = str(results)
        copy = tmp / exp.name
        copy.write_text(yaml.safe_dump(data, sort_keys=False))
        for side in exp.parent.glob("slo-*.yaml"):
            (tmp / side.name).write_text(side.read_text())
        cmd = [str(Path(sys.executable).with_name("chaos")), "--no-log-file", "run",
               "--journal-path", str(tmp / "chaos-journal.json"), str(copy)]
    else:
        cmd = [sys.executable, "-m", "raychaos.cli", "run", str(exp), "--results", str(results)]
    proc = subprocess.run(cmd, cwd=REPO, env=_env(**fake), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    dirs = sorted(d for d in results.iterdir() if d.is_dir()) if results.exists() else []
    assert len(dirs) == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    return proc.returncode, dirs[0], proc.stdout + proc.stderr


@pytest.mark.parametrize("entrance", ["raychaos", "chaos"])
def test_pass_writes_every_file_and_exits_0(entrance, tmp_path):
    code, run_dir, out = _run(entrance, EXP, tmp_path, outage_s=0.6)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["verdict"] == "pass", (summary["errors"], out[-3000:])
    assert code == 0
    assert FILES <= {p.name for p in run_dir.iterdir()}
    events = [json.loads(x) for x in (run_dir / "timeline.jsonl").read_text().splitlines()]
    names = {e.get("event") for e in events if e["kind"] == "event"}
    assert {"activity_start", "activity_end", "fault_start", "fault_end", "head_killed",
            "rollback_end", "probe"} <= names, "the same events under either entrance"
    journal = json.loads((run_dir / "journal.json").read_text())
    assert journal["raychaos"]["verdict"] == "pass" and journal["status"] == "completed"


def test_both_entrances_agree_on_keys_and_on_a_failure(tmp_path):
    slo = HERE / "experiments" / "slo-impossible.yaml"
    failing = tmp_path / "failing.yaml"
    data = yaml.safe_load(EXP.read_text())
    data["extensions"][0]["slo_profile"] = str(slo)
    failing.write_text(yaml.safe_dump(data, sort_keys=False))
    summaries = {}
    for entrance in ("raychaos", "chaos"):
        code, run_dir, out = _run(entrance, failing, tmp_path / entrance, outage_s=0.6)
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["verdict"] == "fail", (entrance, summary["errors"], out[-2000:])
        assert code == 1, out[-2000:]
        journal = json.loads((run_dir / "journal.json").read_text())
        assert journal["status"] == "failed", "the journal says it: chaos run exits non-zero"
        summaries[entrance] = summary
    assert summaries["raychaos"].keys() == summaries["chaos"].keys()
    assert [s["name"] for s in summaries["raychaos"]["slos"]] == \
        [s["name"] for s in summaries["chaos"]["slos"]]


@pytest.mark.parametrize("entrance", ["raychaos", "chaos"])
def test_abort_if_stops_the_run_under_either_entrance(entrance, tmp_path):
    aborting = tmp_path / "aborting.yaml"
    data = yaml.safe_load(EXP.read_text())
    data["extensions"][0]["abort_if"] = [{"metric": "gcs_down_s", "above": 0.5}]
    aborting.write_text(yaml.safe_dump(data, sort_keys=False))
    for side in EXP.parent.glob("slo-*.yaml"):
        (tmp_path / side.name).write_text(side.read_text())
    code, run_dir, out = _run(entrance, aborting, tmp_path, outage_s=6)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "aborted" and summary["verdict"] == "error", out[-3000:]
    assert "gcs_down_s" in summary["reason"]
    assert code == (2 if entrance == "raychaos" else 1)
    ledger = json.loads((run_dir / "ledger.json").read_text())
    assert all(f["state"] == "undone" for f in ledger["faults"]), "rolled back"
