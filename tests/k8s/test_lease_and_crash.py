"""Kubernetes: one run at a time through a Lease, and rollback after a harness crash.

A crash is a process that stops between two API calls: here a drain and a Chaos Mesh object are
applied through a real write-ahead ledger against the world, the process "dies" (no undo, the
Lease no longer renewed), and ``raychaos rollback`` — from the ledger alone — uncordons what was
cordoned, deletes what was created and clears the dead run's Lease. (The throttle's SIGKILL case,
with qdiscs left on a node, needs real nodes: ``test_kuberay_harness.py``.)
"""

from __future__ import annotations

import json
import time

import pytest

from raychaos.errors import TargetBusy
from raychaos.results.store import Ledger
from raychaos.run.crash import rollback_results_dir
from raychaos.targets.kubernetes.lease import LeaseLock
from tests.k8s.world import resources as R
from tests.k8s.world.chaosmesh import NETWORKCHAOS_CRD

pytestmark = pytest.mark.k8s


def test_second_run_is_refused_naming_the_lease_holder(sim, make_target):
    first = make_target().run_lock()
    first.acquire("run-a")
    try:
        lease = sim.store.get("leases", "ray", "raychaos-demo")
        assert lease["spec"]["holderIdentity"].endswith("/run-a")
        with pytest.raises(TargetBusy, match=r"RayCluster ray/demo is in use by run 'run-a' "
                                             r"\(PID \d+ on .*Lease ray/raychaos-demo"):
            make_target().run_lock().acquire("run-b")
    finally:
        first.release()
    assert sim.store.get("leases", "ray", "raychaos-demo") is None


def test_expired_lease_of_a_dead_run_is_taken_over_and_renewed(sim, make_target):
    target = make_target()
    dead = LeaseLock(target._api(), "ray", "demo", duration_s=1)
    dead.acquire("crashed")
    dead._stop.set()  # the process died: no more renewals
    time.sleep(1.2)
    lock = LeaseLock(target._api(), "ray", "demo", duration_s=3)
    lock.acquire("run-new")
    try:
        assert lock.taken_over["run_id"] == "crashed"
        renewed = sim.store.get("leases", "ray", "raychaos-demo")["spec"]["renewTime"]
        # renewed every duration/3 (1 s); the deadline is a bound for a busy box, not a wait
        deadline = time.monotonic() + 15
        while (now := sim.store.get("leases", "ray", "raychaos-demo")["spec"]["renewTime"]) \
                <= renewed and time.monotonic() < deadline:
            time.sleep(0.1)
        assert now > renewed
    finally:
        lock.release()


def test_a_lease_whose_holder_died_on_this_host_is_cleared_before_it_expires(sim, make_target):
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
    sim.store.mutate("leases", "ray", "raychaos-demo", lambda lease: lease["metadata"][
        "annotations"].update({"raychaos.io/pid": dead.stdout.strip()}))
    assert not LeaseLock(target._api(), "ray", "demo").clear_stale("another-run")
    assert LeaseLock(target._api(), "ray", "demo").clear_stale("crashed")
    assert sim.store.get("leases", "ray", "raychaos-demo") is None
    alive = LeaseLock(target._api(), "ray", "demo")
    alive.acquire("running")  # this process: alive
    try:
        assert not LeaseLock(target._api(), "ray", "demo").clear_stale("running")
    finally:
        alive.release()


def test_rollback_after_crash_uncordons_and_deletes(sim, make_target, tmp_path):
    sim.api.create(R.BUILTIN["customresourcedefinitions"], "",
                   json.loads(json.dumps(NETWORKCHAOS_CRD)))
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
    sim.api.create(sim.api.resolve("chaos-mesh.org", "v1alpha1", "networkchaos"), "ray", {
        "metadata": {"name": "raychaos-net-crash"}, "spec": {"action": "bandwidth"}})
    # the crash: nothing undone, the ledger on disk is all that is left
    lease._stop.set()
    target.close()
    assert sim.store.get("nodes", "", "gpu-a")["spec"]["unschedulable"] is True
    time.sleep(1.1)  # the dead run's Lease expires

    result = rollback_results_dir(run_dir)
    assert result["undone"] == ["f2", "f1"] and result["lock_cleared"] is True
    node = sim.store.get("nodes", "", "gpu-a")
    assert not node["spec"].get("unschedulable")
    assert sim.store.get("networkchaos", "ray", "raychaos-net-crash") is None
    assert sim.store.get("leases", "ray", "raychaos-demo") is None
    assert rollback_results_dir(run_dir) == {"undone": []}, "idempotent"
