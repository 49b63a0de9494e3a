"""The head-kill experiment end to end on a real local Ray cluster, both kill modes (``head``
through the CLI, as a person runs it).

The integration tier's shared cluster (Ray nodes are slow to start on 2 cores), proven clean
before and after the module; the second run reuses the Serve application the first deployed.
During each run an independent observer (``_gcs_observer.py``: its own process, a fresh gRPC
channel every 50 ms) polls the GCS: the harness's first answer after the kill must agree with it
within 0.3 s plus the monitor's own resolution during the outage (the longest hole in its
samples, which the summary reports, or a stall of its timer the host-noise sensor saw), and
the monitor must never go blind for seconds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys

import pytest

from raychaos.run.runner import run_experiment_file
from tests._cli import run_gracefully

from ._experiments import (
    REPO,
    WARM,
    assert_healthy,
    method_args,
    module_cluster,
    raychaos_block,
    variant,
)

NAME = WARM


@pytest.fixture(scope="module")
def cluster(warm_cluster):
    yield from module_cluster(warm_cluster, keep_serve=True)


def test_cluster_is_pods_with_a_gpu_worker(cluster):
    target, _ = cluster
    nodes = [n for n in target.nodes() if n.state == "ALIVE"]  # the shared cluster's table
    assert len(nodes) == 3  # also lists the heads earlier modules killed, DEAD
    if target.mode == "netns":
        assert len({n.address for n in nodes}) == 3, "each node is a pod with its own address"
    gpu = [n for n in nodes if n.gpus > 0]
    assert len(gpu) == 1 and gpu[0].labels.get("raychaos.io/node-group") == "gpu"
    head = next(n for n in nodes if n.is_head)
    assert head.cpus == 0.0, "no work is scheduled on the head"


#: ``head`` (the shipped mode) runs through the CLI below, with the same observer
@pytest.mark.parametrize("mode", ["gcs"])
def test_head_kill_experiment(cluster, tmp_path, monkeypatch, mode):
    target, root = cluster
    monkeypatch.chdir(REPO)

    def edit(data):
        block = raychaos_block(data)
        block["target"]["local"]["name"] = NAME
        # the shipped bound (40 s) stands: the window ends once the loads are back and the
        # Serve check has its 60 requests after the backlog — at 3 s it was never judged
        method_args(data, "kill_head")["mode"] = mode

    exp = variant("experiments/head-kill.yaml", tmp_path / "exp.yaml", edit)
    before = target.head_identity()
    seen = tmp_path / "observer.jsonl"
    observer = _observer(target, seen)
    try:
        code = run_experiment_file(exp, results_root=str(tmp_path / "results"),
                                   state_root=str(root), quiet=True)
    finally:
        observer.send_signal(signal.SIGTERM)
        observer.wait(timeout=10)
    [run_dir] = list((tmp_path / "results").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert_healthy(code, summary, json.dumps(summary, indent=1)[:4000])
    # proof the chaos happened: the head (or its GCS) was really killed and replaced
    [fault] = summary["faults"]
    ev = fault["evidence"]
    assert fault["state"] == "undone" and ev["landed"] and ev["signal"] == "SIGKILL"
    assert ev["old"]["pid"] == before["pid"]
    if mode == "gcs":
        assert ev["killed_pids"] == [before["gcs_pid"]]
    assert ev["head_back"]["new"]["pid"] != before["pid"]
    probes = {p["name"]: p for p in summary["probes"]}
    gcs = probes["gcs_recovery"]["evidence"]
    assert gcs["recovered"] and gcs["gcs_down_samples"] > 0
    assert 0 < gcs["gcs_recovery_s"] <= gcs["nodes_recovery_s"] < 120
    assert gcs["workers_lost"] == [] and len(gcs["workers_before"]) == 2
    sentinel = probes["sentinel_preserved"]["evidence"]
    assert sentinel["same_pid"] and sentinel["state_preserved"] and sentinel["after"]["count"] == 3
    assert probes["job_survival"]["evidence"]["ratio"] == 1.0
    assert {s["verdict"] for s in summary["slos"]} <= {"pass", "inconclusive"}
    assert all(r["verdict"] == "pass" for r in summary["slos"] if r["metric"] in (
        "sentinel_preserved", "job_survival_ratio")), "invariants are never inconclusive"
    assert summary["host_noise"]["baseline"]["samples"] > 0, "the host-noise sensor ran"
    for name in ("journal.json", "timeline.jsonl", "ledger.json", "junit.xml", "report.html"):
        assert (run_dir / name).exists(), name
    assert os.path.isdir(root / NAME), "the run reused the module's cluster and left it up"
    _agrees_with_the_observer(run_dir, summary, seen)


def _observer(target, seen):  # noqa: ANN001, ANN202
    return subprocess.Popen([sys.executable, str(REPO / "tests/integration/_gcs_observer.py"),
                             target.cluster.gcs_address, str(seen)])


def _host_stall_s(lines: list[str], lo: float, hi: float) -> float:
    """The longest stall of the harness's own timer the host-noise sensor saw between ``lo``
    and ``hi`` (run clock, one second of slack each side: a record covers its second)."""
    host = [json.loads(x) for x in lines if '"kind": "host"' in x]
    lags = [r.get("timer_lag_ms_max") or 0 for r in host if lo - 1 <= r["t"] <= hi + 1]
    return max(lags, default=0) / 1000


def _agrees_with_the_observer(run_dir, summary: dict, seen) -> None:  # noqa: ANN001
    """The monitor did not go blind during the outage, and the harness saw the GCS answer again
    when the independent observer did (± 0.3 s, plus its own resolution there: the longest hole
    in its samples or the longest stall of its timer the host-noise sensor recorded)."""
    gcs = next(p for p in summary["probes"] if p["name"] == "gcs_recovery")["evidence"]
    lines = (run_dir / "timeline.jsonl").read_text().splitlines()
    samples = [json.loads(x) for x in lines if '"kind": "sample"' in x]
    gaps = [b["t"] - a["t"] for a, b in zip(samples, samples[1:], strict=False)
            if a["gcs_up"] and b["gcs_up"]]
    assert sorted(gaps)[len(gaps) // 2] <= 0.5, "the monitor samples at about 200 ms"
    kill = next(json.loads(x) for x in lines if '"head_killed"' in x)
    back_t = kill["t"] + gcs["gcs_first_answer_s"]
    stall = _host_stall_s(lines, kill["t"], back_t)
    gap = summary["monitor"]["outage_max_gap_s"]
    # the monitor's resolution during the outage is reported, not assumed: its longest hole
    # (a sampler thread that waited on the interpreter or the timeline, seen 1.2 s with the
    # host-noise timer stalled 0.28 s) bounds how late it can have seen the GCS answer again
    # blind: a hole of 5 s or more that the host does not explain — a harness whose own timer
    # the host-noise sensor saw stalled as long (seen in CI: 5.4 s, run queue 375, the harness
    # given 0.016 CPUs) was not scheduled; its monitor was not blind by design
    assert gap is not None and (gap < 5 or stall >= gap - 1), (
        "the monitor went blind in the outage", summary["monitor"], stall)
    harness_first = kill["ts"] + gcs["gcs_first_answer_s"]
    polls = [json.loads(x) for x in seen.read_text().splitlines() if x.strip()]
    after = [p for p in polls if p["ts"] >= kill["ts"]]
    first_down = next(i for i, p in enumerate(after) if not p["up"])
    observer_first = next(p["ts"] for p in after[first_down:] if p["up"])
    assert abs(harness_first - observer_first) <= 0.3 + max(stall, gap), (
        harness_first, observer_first, stall, gap)
    assert any(json.loads(x).get("kind") == "load" for x in lines)


# Ray's and Locust's own log formats: Python loggers (``dashboard_sdk.py:423 -- ...``), the C++
# core (``[2026-12-01 09:07:01,123 E 123 456] rpc_client.h:153: ...``), process prefixes, Locust.
LIBRARY_LINE = re.compile(
    r"\w+\.py:\d+ -- |\w+\.(cc|h):\d+:|^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[,.]\d+ [IWEF] \d+|"
    r"^\((raylet|gcs_server|pid=\d+)|/(INFO|WARNING|ERROR)/locust|"
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+\s+(INFO|WARNING|ERROR)|^(INFO|WARNING|ERROR|DEBUG):")


def test_a_head_kill_from_the_cli_keeps_the_console_clean_and_its_report_reads(
        cluster, tmp_path):
    """The catalog's head kill through ``raychaos run`` (a subprocess, as a person runs it): the
    console holds raychaos's lines only — each with time and phase — and the verdict table the
    probes' figures; Ray's own lines are in harness.log; the report, opened in headless
    Chromium, tells the story, has per-load tables, and its timeline answers the mouse."""
    from tests._browser import CHROMIUM, check_in_chromium

    target, root = cluster

    def edit(data):
        block = raychaos_block(data)
        block["target"]["local"]["name"] = NAME
        block["monitor"]["recovery_window_s"] = 3

    exp = variant("experiments/head-kill.yaml", tmp_path / "exp.yaml", edit)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = f"{REPO / 'src'}{os.pathsep}{REPO}"
    seen = tmp_path / "observer.jsonl"
    observer = _observer(target, seen)
    try:
        proc = run_gracefully([sys.executable, "-m", "raychaos.cli", "run", str(exp),
                               "--results", str(tmp_path / "results"), "--state-root",
                               str(root)], timeout=600, cwd=REPO, env=env)
    finally:
        observer.send_signal(signal.SIGTERM)
        observer.wait(timeout=10)
    console = proc.stdout + proc.stderr
    (tmp_path / "console.txt").write_text(console)
    [run_dir] = list((tmp_path / "results").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    inconclusive = assert_healthy(proc.returncode, summary, console[-4000:])
    noise = [line for line in console.splitlines() if LIBRARY_LINE.search(line)]
    assert not noise, noise[:10]
    assert (run_dir / "harness.log").exists()
    progress = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert all(re.match(r"\[\s*\d+\.\ds\] (setup|hypothesis|method|rollbacks|finish)\s", line)
               for line in progress), progress
    assert re.search(r"^probe gcs_recovery\s+run\s+GCS back in \d+\.\d s, workers in",
                     proc.stdout, re.M), proc.stdout[-3000:]
    assert re.search(r"^probe job_survival\s+run\s+1/1 jobs survived", proc.stdout, re.M)
    _agrees_with_the_observer(run_dir, summary, seen)
    if CHROMIUM.exists():
        seen = check_in_chromium(run_dir / "report.html", tmp_path / "report.png")
        assert seen["story"].startswith("Inconclusive:" if inconclusive else "Passed: all"), \
            seen["story"]
        assert "raychaos killed the head (mode head, SIGKILL" in seen["story"]
        assert "The GCS was down for" in seen["story"]
        assert seen["loads"] == "serve_users,task_storm"
        assert re.search(r"GCS : (up|DOWN)", seen["hover"]), seen["hover"]
