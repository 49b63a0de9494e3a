"""Local drain, registry-throttle and network faults on the shared local cluster: each proven to
land, its effect measured, and nothing left behind after undo (qdiscs, nft tables, processes,
node count and GPU capacity)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from raychaos.config.settings import RaychaosSettings
from raychaos.context import Run, activate, deactivate
from raychaos.errors import ConfigError, NothingMatched, RollbackFailed
from raychaos.faults.network import saturate_network
from raychaos.faults.nodes import drain_gpu_nodes
from raychaos.faults.rollback import undo_all, undo_ledger
from raychaos.results.store import Clock, Ledger, Timeline
from raychaos.targets.local.target import LocalTarget

from ._experiments import module_cluster

pytestmark = pytest.mark.integration

if os.geteuid() != 0:
    pytest.skip("local faults need root (network namespaces, tc, nft)", allow_module_level=True)


@pytest.fixture(scope="module")
def target(warm_cluster):
    for t, _root in module_cluster(warm_cluster):  # the shared cluster, proven clean
        yield t


def net(t: LocalTarget, nodes: list[str], record: dict | None = None, bandwidth_bps: float = 0.0,
        loss_pct: float = 0.0, flood: bool = False, partition: bool = False,
        flood_s: float = 120.0) -> dict:
    return t.saturate_network(nodes=nodes, bandwidth_bps=bandwidth_bps, loss_pct=loss_pct,
                              latency_ms=0.0, flood=flood, partition=partition, flood_s=flood_s,
                              record={} if record is None else record)


def _alive(t: LocalTarget) -> tuple[int, float]:
    nodes = [n for n in t.nodes(timeout=2.0) if n.state == "ALIVE"]
    return len(nodes), sum(n.gpus for n in nodes)


def _clean(t: LocalTarget, pids: list[int]) -> None:
    assert t.netfault_leftovers() == {"qdiscs": [], "nft": []}
    for pod in t.cluster.require()["nodes"]:
        ns = pod["plan"]["netns"]
        assert "raychaos" not in subprocess.run(["ip", "netns", "exec", ns, "nft", "list",
                                                 "ruleset"], capture_output=True,
                                                text=True).stdout
    for pid in pids:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_bad_arguments_rejected_before_any_change(target):
    with pytest.raises(ConfigError, match=r"loss_pct: must be at most 100, got 150"):
        saturate_network(loss_pct=150)
    with pytest.raises(ConfigError, match=r"bandwidth_mbit: must be at least 0, got -5"):
        saturate_network(bandwidth_mbit=-5)
    with pytest.raises(NothingMatched, match=r"count=2 but only 1 ALIVE GPU nodes"):
        target.select_drain_victims(2, None)
    with pytest.raises(NothingMatched, match=r"no node named 'worker-9'"):
        net(target, ["worker-9"], bandwidth_bps=1e6)
    [(arg, why)] = target.refusals("saturate_network", {"latency_ms": 50})
    assert arg == "latency_ms" and "no tc netem" in why
    assert target.cluster.admin().draining(2.0) == set()
    assert _alive(target) == (3, 1.0)
    _clean(target, [])


def test_saturate_network_lowers_bandwidth_and_undo_removes_everything(target):
    record: dict = {}
    try:
        ev = net(target, ["worker-1"], bandwidth_bps=20e6, flood=True, flood_s=30,
                 record=record)
        assert ev["landed"]
        assert len(ev["applied"]["qdiscs"]) == 2 and all(
            "tbf" in q for q in ev["applied"]["qdiscs"].values())
        assert ev["during"]["rate_bps"] < ev["before"]["rate_bps"] / 10
        assert ev["during"]["rate_bps"] < 20e6 * 1.3  # the flood shares the 20 Mbit/s
        assert len(ev["flood_pids"]) == 2
        assert len(target.netfault_leftovers()["qdiscs"]) == 2
    finally:
        target.undo(record)
    _clean(target, record["undo"]["pids"])
    assert target.undo(record)["undone"]  # idempotent
    after = target.measure_transfer("head", "worker-1", seconds=1.0)
    assert after["rate_bps"] > 20e6 * 5


def test_random_loss_via_nft_and_undo(target):
    record: dict = {}
    try:
        ev = net(target, ["worker-1"], loss_pct=30, flood=False, record=record)
        assert "numgen random" in ev["applied"]["nft"]["worker-1"]
        assert ev["during"]["rate_bps"] < ev["before"]["rate_bps"] * 0.8
    finally:
        target.undo(record)
    _clean(target, [])


BUSY_GPU = """
import ray, time
ray.init()
@ray.remote(num_gpus=1, max_retries=0)
def hold():
    time.sleep(120)
ray.get(hold.remote())
"""


def test_drain_gpu_node_draining_dead_replaced(target, tmp_path):
    script = tmp_path / "busy_gpu.py"
    script.write_text(BUSY_GPU)
    job = target.submit_job(f"python {script}")
    record: dict = {}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # wait until the GPU is really taken
            if _gpu_busy(target):
                break
            time.sleep(0.5)
        assert _gpu_busy(target), (
            f"the GPU task never ran: {target.job_status(job)} {target.job_log_lines(job)[-5:]}")
        ev = target.drain_nodes(count=1, selector=None, deadline_s=4, reason="preemption",
                                replace=True, replace_delay_s=1, record=record)
        states = ev["states"]["worker-1"]
        assert states[:4] == ["ALIVE", "DRAINING", "DEAD", "REPLACED"], states
        assert ev["gpus_before"] == 1.0 and ev["gpus_after_drain"] == 0.0
        assert ev["replaced"] and ev["replacement_node_ids"][0] not in ev["node_ids"]
        assert [c["gpus"] for c in ev["gpu_capacity"]][-1] == 1.0
    finally:
        target.stop_job(job)
        target.undo(record)
    assert _alive(target) == (3, 1.0)


def _gpu_busy(t: LocalTarget) -> bool:
    from ray.util.state import list_tasks

    try:
        tasks = list_tasks(address=t.dashboard_url(), filters=[("state", "=", "RUNNING")],
                           timeout=5, raise_on_missing_output=False)
    except Exception:
        return False
    return any(task.name.endswith("hold") for task in tasks)


def test_registry_throttle_slows_pulls_and_undo(target):
    record: dict = {}
    try:
        ev = target.throttle_registry_pulls(rate_bps=40e6, latency_ms=0.0, image_mb=16,
                                            error_rate=0.1, restart_workers=["worker-2"],
                                            record=record)
        assert ev["pull_before"]["rate_bps"] > 40e6 * 3
        assert 0.5 < ev["rate_ratio"] < 1.3, ev["pull_during"]
        assert "Sent" in ev["shaped_class"] and "1:20" in ev["shaped_class"]
        [pull] = ev["restarts"]
        assert pull["node"] == "worker-2" and pull["bytes"] == 16 * 1024 * 1024
        assert pull["rate_bps"] < 40e6 * 1.3  # the supervisor's pull took the shaped path
        assert target.cluster.require()["image"] == ev["image"]
    finally:
        target.undo(record)
    assert "image" not in target.cluster.require()
    assert "htb" not in subprocess.run(["tc", "qdisc", "show", "dev", target.net.bridge],
                                       capture_output=True, text=True).stdout
    assert not Path(f"/proc/{record['undo']['pid']}/cmdline").exists() or \
        b"registry/server.py" not in Path(f"/proc/{record['undo']['pid']}/cmdline").read_bytes()
    deadline = time.monotonic() + 90
    while _alive(target) != (3, 1.0) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _alive(target) == (3, 1.0)


def test_impossible_undo_raises_rollback_failed(target, tmp_path):
    record = {"id": "f9", "fault": "drain_gpu_nodes", "state": "applied",
              "undo": {"kind": "drain", "nodes": ["worker-9"],
                       "original": {"alive": 3, "gpus": 1.0}}}
    with pytest.raises(RollbackFailed, match="has no node 'worker-9'"):
        target.undo(record)
    ledger = Ledger(tmp_path / "ledger.json", "r1", {})
    ledger.faults.append(record)
    with pytest.raises(RollbackFailed, match="still applied: f9 drain_gpu_nodes"):
        undo_ledger(ledger, target)
    assert ledger.faults[0]["undo_error"]


def test_action_through_a_run_is_ledgered_and_undone(target, tmp_path):
    clock = Clock()
    run = Run(run_id="r1", run_dir=tmp_path, settings=RaychaosSettings(), target=target,
              clock=clock, timeline=Timeline(tmp_path / "timeline.jsonl", clock),
              ledger=Ledger(tmp_path / "ledger.json", "r1", target.describe()))
    activate(run)
    try:
        ev = saturate_network(nodes=["worker-2"], bandwidth_mbit=30, flood=False)
        assert ev["during"]["rate_bps"] < 30e6 * 1.3
        [rec] = run.ledger.faults
        assert rec["state"] == "applied" and rec["undo"]["kind"] == "netfault"
        assert undo_all()["undone"] == [rec["id"]]
        assert run.ledger.faults[0]["state"] == "undone"
        with pytest.raises(NothingMatched):
            drain_gpu_nodes(count=3)
        assert run.ledger.faults[1]["state"] == "failed"
    finally:
        deactivate()
        run.timeline.close()
    _clean(target, [])
