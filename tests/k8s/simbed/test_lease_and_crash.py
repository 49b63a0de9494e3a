"""Kubernetes: one run at a time through a Lease, and rollback after a harness crash.

A crash is a process that stops between two API calls: here a drain and a Chaos Mesh object are
applied through a real write-ahead ledger against the real API server (the bed with simulated
nodes: Leases, the NetworkChaos CRD and the Eviction API are the real ones), the process "dies"
(no undo, the Lease no longer renewed), and ``raychaos rollback`` — from the ledger alone —
uncordons what was cordoned, deletes what was created and clears the dead run's Lease. (The
throttle's SIGKILL case, with qdiscs left on a node, needs real nodes: ``tests/k8s/bed``.)
"""

from __future__ import annotations

import time

import pytest

from raychaos.errors import TargetBusy
from raychaos.results.store import Ledger
from raychaos.run.crash import rollback_results_dir
from raychaos.targets.kubernetes.lease import LeaseLock
from tests.k8s.simbed.conftest import admin, get

pytestmark = pytest.mark.k8s

LEASE = "/apis/coordination.k8s.io/v1/namespaces/ray/leases/raychaos-demo"
CHAOS = "/apis/chaos-mesh.org/v1alpha1/namespaces/ray/networkchaos"


def test_second_run_is_refused_naming_the_lease_holder(simbed, make_target):
    first = make_target().run_lock()
    first.acquire("run-a")
    try:
        lease = get(simbed, LEASE)
        assert lease["spec"]["holderIdentity"].endswith("/run-a")
        with pytest.raises(TargetBusy, match=r"RayCluster ray/demo is in use by run 'run-a' "
                                             r"\(PID \d+ on .*Lease ray/raychaos-demo"):
            make_target().run_lock().acquire("run-b")
    finally:
        first.release()
    assert get(simbed, LEASE) is None


def test_expired_lease_of_a_dead_run_is_taken_over_and_renewed(simbed, make_target):
    target = make_target()
    dead = LeaseLock(target._api(), "ray", "demo", duration_s=1)
    dead.acquire("crashed")
    dead._stop.set()  # the process died: no more renewals
    time.sleep(1.2)
    lock = LeaseLock(target._api(), "ray", "demo", duration_s=3)
    lock.acquire("run-new")
    try:
        assert lock.taken_over["run_id"] == "crashed"
        renewed = get(simbed, LEASE)["spec"]["renewTime"]
        # renewed every duration/3 (1 s); the deadline is a bound for a busy box, not a wait
        deadline = time.monotonic() + 15
        while (now := get(simbed, LEASE)["spec"]["renewTime"]) \
                <= renewed and time.monotonic() < deadline:
            time.sleep(0.1)
        assert now > renewed
    finally:
        lock.release()


def test_a_lease_whose_holder_died_on_this_host_is_cleared_before_it_expires(simbed, make_target):
    """``raychaos rollback`` right after a SIGKILL: the run's process is gone, its Lease not yet
    expired (60 s); clearing it lets the next run start now. A live holder's stays."""
    import subprocess
    import sys

    target = make_target()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    crashed = LeaseLock(target._api(), "ray", "demo")
    crashed.acquire("crashed")
    crashed._stop.set()
    code, body = admin(simbed).call(
        "PATCH", LEASE, {"metadata": {"annotations": {"raychaos.io/pid": dead.stdout.strip()}}},
        content_type="application/merge-patch+json")
    assert code == 200, body
    assert not LeaseLock(target._api(), "ray", "demo").clear_stale("another-run")
    assert LeaseLock(target._api(), "ray", "demo").clear_stale("crashed")
    assert get(simbed, LEASE) is None
    alive = LeaseLock(target._api(), "ray", "demo")
    alive.acquire("running")  # this process: alive
    try:
        assert not LeaseLock(target._api(), "ray", "demo").clear_stale("running")
    finally:
        alive.release()


def test_rollback_after_crash_uncordons_and_deletes(simbed, make_target, tmp_path):
    target = make_target()
    run_dir = tmp_path / "20260101T000000Z-crash"
    run_dir.mkdir()
    ledger = Ledger(run_dir / "ledger.json", "crash-run", target.describe())
    lease = LeaseLock(target._api(), "ray", "demo", duration_s=1)
    lease.acquire("crash-run")
    drained = ledger.begin("drain_gpu_nodes", {"count": 1})
    target.drain_nodes(count=1, selector=None, deadline_s=5, reason="preemption", replace=True,
                       replace_delay_s=0, record=drained)
    ledger.save()
    net = ledger.begin("saturate_network", {})
    net["undo"] = {"kind": "saturate_network", "objects": [
        {"api": "networkchaos", "namespace": "ray", "name": "raychaos-net-crash"}]}
    ledger.save()  # written ahead, then the object (as saturate_network does)
    code, body = admin(simbed).call("POST", CHAOS, {
        "apiVersion": "chaos-mesh.org/v1alpha1", "kind": "NetworkChaos",
        "metadata": {"name": "raychaos-net-crash"},
        "spec": {"action": "bandwidth", "mode": "all", "selector": {"pods": {"ray": ["x"]}},
                 "bandwidth": {"rate": "1mbps", "limit": 20971520, "buffer": 10000}}})
    assert code == 201, body
    # the crash: nothing undone, the ledger on disk is all that is left
    lease._stop.set()
    target.close()
    [node] = drained["undo"]["nodes"]
    assert get(simbed, f"/api/v1/nodes/{node}")["spec"]["unschedulable"] is True
    time.sleep(1.1)  # the dead run's Lease expires

    result = rollback_results_dir(run_dir)
    assert result["undone"] == ["f2", "f1"] and result["lock_cleared"] is True
    assert not get(simbed, f"/api/v1/nodes/{node}")["spec"].get("unschedulable")
    assert get(simbed, f"{CHAOS}/raychaos-net-crash") is None
    assert get(simbed, LEASE) is None
    assert rollback_results_dir(run_dir) == {"undone": []}, "idempotent"
