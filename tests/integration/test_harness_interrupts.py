"""The harness itself under faults, on one real local cluster: SIGINT/SIGTERM at each phase,
SIGKILL mid-fault then ``raychaos rollback``, one run at a time, secrets kept out of results.

Each test drives ``raychaos run`` as a subprocess and picks its moment from the run's own
timeline and write-ahead ledger. After every run the cluster must be as before: no qdisc, nft
table, flood or registry process, every node ALIVE with its GPU, no ledger record outstanding,
no lock left.
"""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from raychaos.results.store import read_timeline
from raychaos.targets.local.network.faults import _is_probe
from raychaos.targets.local.registry.fault import _is_registry
from raychaos.targets.local.target import LocalTarget

from ._experiments import WARM, module_cluster
from ._harness import HarnessRun, action, experiment, run_cli

pytestmark = pytest.mark.integration

if os.geteuid() != 0:
    pytest.skip("local faults need root (network namespaces, tc, nft)", allow_module_level=True)

NAME = WARM
FAULTS = {
    "kill_head": action("head", "kill_head", mode="head", wait_s=120),
    "drain_gpu_nodes": action("nodes", "drain_gpu_nodes", count=1, deadline_s=4, replace=True,
                              replace_delay_s=1),
    "throttle_registry_pulls": action("registry", "throttle_registry_pulls", rate_mbit=20,
                                      image_mb=4),
    "saturate_network": action("network", "saturate_network", pause_after=30,
                               nodes=["worker-1"], bandwidth_mbit=20, flood=True, flood_s=60),
}
SECRET = "hunter2-planted-7f3a"


@pytest.fixture(scope="module")
def cluster(warm_cluster):
    yield from module_cluster(warm_cluster)


def _alive(t: LocalTarget) -> tuple[int, float]:
    try:
        nodes = [n for n in t.nodes(timeout=2.0) if n.state == "ALIVE"]
    except Exception:
        return (0, 0.0)
    return len(nodes), sum(n.gpus for n in nodes)


def _applying(run: HarnessRun, fault: str):
    """True once the ledger (write-ahead) names what the fault is changing."""
    for rec in run.ledger()["faults"]:
        undo = rec.get("undo") or {}
        if rec["fault"] == fault and undo.get("kind") and (
                undo["kind"] != "netfault" or undo.get("qdiscs")):
            return rec
    return None


def assert_nothing_applied(target: LocalTarget, ledger: dict) -> None:
    left = [r["id"] for r in ledger["faults"]
            if r["state"] in ("pending", "applied", "failed") and not r.get("undone_at")]
    assert left == [], ledger
    assert target.netfault_leftovers() == {"qdiscs": [], "nft": []}
    for rec in ledger["faults"]:
        undo = rec.get("undo") or {}
        if undo.get("pid"):
            assert not _is_registry(undo["pid"]), "registry process left running"
        assert not [p for p in undo.get("pids", []) if _is_probe(p)], "flood left running"
    deadline = time.monotonic() + 60
    while _alive(target) != (3, 1.0) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _alive(target) == (3, 1.0), "node count and GPU capacity restored"
    assert not (target.state_dir / "run.lock").exists(), "the run lock was released"


def _interrupted(run: HarnessRun, code: int) -> dict:
    summary = run.summary()
    assert code == 2, run.err[-3000:]
    assert summary["status"] == "interrupted" and summary["exit_code"] == 2, summary
    assert (run.run_dir / "ledger.json").exists()
    return summary


# --- interruption points ------------------------------------------------------------------
def test_sigint_while_loads_start(cluster, tmp_path):
    target, root = cluster
    run = HarnessRun(tmp_path, experiment(NAME, [FAULTS["saturate_network"]], loads=True), root)
    run.wait_for(lambda: any(r.get("kind") == "sample" for r in run.timeline()), "monitor up")
    run.signal(signal.SIGINT)
    summary = _interrupted(run, run.finish())
    assert summary["reason"] == "interrupted by SIGINT"
    assert not any(r.get("event") == "fault_start" for r in run.timeline())
    assert_nothing_applied(target, run.ledger())


def test_sigterm_in_steady_state_and_no_secret_in_results(cluster, tmp_path):
    target, root = cluster
    data = experiment(NAME, [FAULTS["saturate_network"]],
                      extra={"target": {"kind": "local", "local": {
                          "name": NAME, "redis_address": f"redis://:{SECRET}@127.0.0.1:1"}}},
                      top={"configuration": {"api_token": SECRET},
                           "secrets": {"k8s": {"token": SECRET}}})
    run = HarnessRun(tmp_path, data, root)
    run.wait_event("phase", "experiment")
    run.signal(signal.SIGTERM)
    summary = _interrupted(run, run.finish())
    assert summary["reason"] == "interrupted by SIGTERM"
    assert_nothing_applied(target, run.ledger())
    for path in run.run_dir.rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path
    assert SECRET not in run.out and SECRET not in run.err
    assert "redis://***@127.0.0.1:1" in (run.run_dir / "summary.json").read_text()


@pytest.mark.parametrize("fault,sig", [("drain_gpu_nodes", "SIGTERM"),
                                       ("throttle_registry_pulls", "SIGINT"),
                                       ("saturate_network", "SIGTERM")])
def test_signal_while_fault_applies(cluster, tmp_path, fault, sig):
    target, root = cluster
    run = HarnessRun(tmp_path, experiment(NAME, [FAULTS[fault]]), root)
    run.wait_for(lambda: _applying(run, fault), f"{fault} applying")
    run.signal(getattr(signal, sig))
    summary = _interrupted(run, run.finish())
    assert summary["reason"] == f"interrupted by {sig}"
    [rec] = summary["faults"]
    assert rec["state"] == "undone", rec
    journal = json.loads((run.run_dir / "journal.json").read_text())
    assert journal["status"] == "interrupted", "chaoslib saw the stop, not a failed activity"
    assert not any(r.get("event") == "fault_applied" for r in run.timeline()), \
        "the method stopped: the interrupted fault was not reported as applied"
    assert_nothing_applied(target, run.ledger())


def test_signal_after_fault_applied_while_method_goes_on(cluster, tmp_path):
    target, root = cluster
    run = HarnessRun(tmp_path, experiment(NAME, [FAULTS["saturate_network"]]), root)
    run.wait_event("fault_applied", "saturate_network")
    assert target.netfault_leftovers()["qdiscs"], "proof the fault landed"
    run.signal(signal.SIGINT)
    _interrupted(run, run.finish())
    events = [r.get("event") for r in run.timeline() if r.get("kind") == "event"]
    assert "rollback_start" in events and "rollback_end" in events
    assert_nothing_applied(target, run.ledger())


def test_kill_head_interrupted_then_second_signals_during_rollback(cluster, tmp_path):
    target, root = cluster
    before = target.head_identity()["pid"]
    run = HarnessRun(tmp_path, experiment(NAME, [FAULTS["kill_head"]]), root)
    run.wait_for(lambda: (_applying(run, "kill_head") or {}).get("evidence", {}).get(
        "killed_pids"), "the head killed, the fault waiting for the new one")
    run.signal(signal.SIGINT)
    run.wait_event("rollback_start", "kill_head")
    run.signal(signal.SIGINT)
    time.sleep(0.5)
    run.signal(signal.SIGTERM)
    summary = _interrupted(run, run.finish())
    assert "SIGINT again: still rolling back (f1 kill_head)" in run.err, run.err[-2000:]
    assert "SIGTERM again: still rolling back" in run.err
    assert summary["faults"][0]["state"] == "undone"
    assert target.head_identity()["pid"] != before, "the head was killed and came back"
    assert_nothing_applied(target, run.ledger())


# --- one run at a time --------------------------------------------------------------------
def test_second_run_on_same_cluster_is_refused(cluster, tmp_path):
    target, root = cluster
    (tmp_path / "a").mkdir()
    first = HarnessRun(tmp_path / "a", experiment(NAME, [FAULTS["saturate_network"]]), root)
    first.wait_event("phase", "experiment")
    (tmp_path / "b").mkdir()
    second = HarnessRun(tmp_path / "b", experiment(NAME, [FAULTS["saturate_network"]]), root)
    code = second.finish()
    assert code == 2
    holder = json.loads((target.state_dir / "run.lock").read_text())
    assert holder["pid"] == first.proc.pid
    assert f"local cluster '{NAME}' is in use by run '{holder['run_id']}' " \
           f"(PID {first.proc.pid} on" in second.err, second.err[-2000:]
    assert not any(r.get("event") == "fault_start" for r in second.timeline())
    first.signal(signal.SIGINT)
    _interrupted(first, first.finish())
    assert_nothing_applied(target, first.ledger())


# --- crash: SIGKILL mid-fault, then `raychaos rollback` -----------------------------------
@pytest.mark.parametrize("fault", list(FAULTS))
def test_sigkill_mid_fault_then_rollback_is_idempotent(cluster, tmp_path, fault):
    target, root = cluster
    run = HarnessRun(tmp_path, experiment(NAME, [FAULTS[fault]]), root)
    run.wait_for(lambda: _applying(run, fault), f"{fault} applying")
    if fault == "saturate_network":
        run.wait_for(lambda: target.netfault_leftovers()["qdiscs"], "qdisc in place")
    elif fault == "throttle_registry_pulls":
        run.wait_for(lambda: (_applying(run, fault)["undo"].get("pid")), "registry started")
    elif fault == "drain_gpu_nodes":
        run.wait_for(lambda: _alive(target)[0] < 3, "the GPU node draining")
    run.proc.send_signal(signal.SIGKILL)
    run.finish()
    assert run.proc.returncode == -signal.SIGKILL
    ledger = run.ledger()
    [rec] = ledger["faults"]
    assert rec["state"] == "pending" and rec["undo"]["kind"], "the ledger knows what to undo"
    lock = json.loads((target.state_dir / "run.lock").read_text())
    assert lock["pid"] == run.proc.pid, "a crashed run leaves a stale lock behind"
    # nothing lost: the partial timeline is readable up to the crash
    records = read_timeline(run.run_dir / "timeline.jsonl")
    assert any(r.get("event") == "fault_start" for r in records)
    assert not (run.run_dir / "summary.json").exists()

    first = run_cli("rollback", str(run.run_dir))
    assert first.returncode == 0, first.stderr
    assert "undone ['f1']" in first.stdout
    again = run_cli("rollback", str(run.run_dir))
    assert again.returncode == 0 and "nothing (nothing was left applied)" in again.stdout
    assert_nothing_applied(target, json.loads((run.run_dir / "ledger.json").read_text()))


def test_stale_lock_taken_over_and_rollback_all(cluster, tmp_path):
    """A crashed run's lock (dead PID) does not block the next run; --all finds its ledger."""
    target, root = cluster
    crashed = HarnessRun(tmp_path, experiment(NAME, [FAULTS["saturate_network"]]), root)
    crashed.wait_for(lambda: target.netfault_leftovers()["qdiscs"], "qdisc in place")
    crashed.proc.send_signal(signal.SIGKILL)
    crashed.finish()
    with open(crashed.run_dir / "timeline.jsonl", "a") as fh:
        fh.write('{"t": 99.0, "kind": "sam')  # a torn last line, as a crash mid-write leaves
    assert read_timeline(crashed.run_dir / "timeline.jsonl")[-1]["kind"] != "sam"
    (tmp_path / "next").mkdir()
    other = action("network", "saturate_network", nodes=["worker-2"], bandwidth_mbit=20,
                   flood=False)
    nxt = HarnessRun(tmp_path / "next", experiment(NAME, [other]), root)
    nxt.wait_event("phase", "experiment")
    taken = [r for r in nxt.timeline() if r.get("event") == "lock_taken_over"]
    assert taken and taken[0]["detail"]["holder"]["pid"] == crashed.proc.pid
    nxt.signal(signal.SIGINT)
    _interrupted(nxt, nxt.finish())
    result = run_cli("rollback", "--all", str(tmp_path / "results"))
    assert result.returncode == 0 and f"{crashed.run_dir.name}: undone ['f1']" in result.stdout
    again = run_cli("rollback", "--all", str(tmp_path / "results"))
    assert "nothing was left applied in any results folder" in again.stdout
    assert_nothing_applied(target, json.loads((crashed.run_dir / "ledger.json").read_text()))


# --- abort_if -----------------------------------------------------------------------------
def test_abort_if_gcs_down_stops_the_method_and_rolls_back(cluster, tmp_path):
    target, root = cluster
    data = experiment(NAME, [action("head", "kill_head", mode="head", wait_s=120),
                             FAULTS["saturate_network"]],
                      extra={"abort_if": [{"metric": "gcs_down_s", "above": 0.5}]})
    run = HarnessRun(tmp_path, data, root)
    code = run.finish()
    summary = run.summary()
    assert code == 2 and summary["status"] == "aborted", summary.get("errors")
    assert summary["reason"].startswith("aborted: abort_if[0]: gcs_down_s = "), summary["reason"]
    events = [(r.get("event"), r.get("name")) for r in run.timeline() if r.get("kind") == "event"]
    assert ("fault_start", "kill_head") in events and any(e == "abort" for e, _ in events)
    assert ("fault_start", "saturate_network") not in events, "the method stopped"
    assert_nothing_applied(target, run.ledger())


def test_sigterm_while_a_probe_waits_for_recovery(cluster, tmp_path):
    """kill_head gives up after 1 s (the head takes longer), so the gcs_recovery probe is
    still waiting for the new head when the signal comes."""
    target, root = cluster
    probe = {"type": "probe", "name": "gcs-recovery",
             "provider": {"type": "python", "module": "raychaos.probes.gcs",
                          "func": "gcs_recovery", "arguments": {"timeout_s": 120}}}
    run = HarnessRun(tmp_path, experiment(NAME, [action("head", "kill_head", mode="head",
                                                        wait_s=1), probe]), root)
    run.wait_event("activity_start", "gcs-recovery")
    run.signal(signal.SIGTERM)
    summary = _interrupted(run, run.finish())
    assert summary["probes"] == [], "the probe was cut short, not judged"
    assert summary["faults"][0]["state"] == "undone"
    assert_nothing_applied(target, run.ledger())


def test_an_uninterrupted_run_completes_and_releases_everything(cluster, tmp_path):
    """The control case: the same machinery on a run nobody stops."""
    target, root = cluster
    fault = action("network", "saturate_network", nodes=["worker-1"], bandwidth_mbit=20,
                   flood=False)
    run = HarnessRun(tmp_path, experiment(NAME, [fault]), root)
    code = run.finish()
    summary = run.summary()
    assert code == 0 and summary["status"] == "completed", summary.get("errors")
    assert json.loads((run.run_dir / "journal.json").read_text())["status"] == "completed"
    assert summary["faults"][0]["evidence"]["landed"]
    assert_nothing_applied(target, run.ledger())
