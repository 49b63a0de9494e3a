"""Kubernetes: one run at a time through a Lease, and rollback after a harness crash.

A crash is a process that stops between two API calls: here the faults run against the fake API
server through a real write-ahead ledger, the process "dies" (no undo, the Lease no longer
renewed), and ``raychaos rollback`` — from the ledger alone — deletes what was created,
uncordons what was cordoned and clears the dead run's Lease.
"""

from __future__ import annotations

import time

import pytest

from raychaos.errors import TargetBusy
from raychaos.results.store import Ledger
from raychaos.run.crash import rollback_results_dir
from raychaos.targets.kubernetes.lease import LeaseLock
from tests.k8s._faults import drain, saturate, throttle

pytestmark = pytest.mark.k8s


def test_second_run_is_refused_naming_the_lease_holder(fake, make_target):
    first = make_target().run_lock()
    first.acquire("run-a")
    try:
        lease = fake.get("leases", "ray", "raychaos-demo")
        assert lease["spec"]["holderIdentity"].endswith("/run-a")
        with pytest.raises(TargetBusy, match=r"RayCluster ray/demo is in use by run 'run-a' "
                                             r"\(PID \d+ on .*Lease ray/raychaos-demo"):
            make_target().run_lock().acquire("run-b")
    finally:
        first.release()
    assert fake.get("leases", "ray", "raychaos-demo") is None


def test_expired_lease_of_a_dead_run_is_taken_over_and_renewed(fake, make_target):
    target = make_target()
    dead = LeaseLock(target._api(), "ray", "demo", duration_s=1)
    dead.acquire("crashed")
    dead._stop.set()  # the process died: no more renewals
    time.sleep(1.2)
    lock = LeaseLock(target._api(), "ray", "demo", duration_s=3)
    lock.acquire("run-new")
    try:
        assert lock.taken_over["run_id"] == "crashed"
        renewed = fake.get("leases", "ray", "raychaos-demo")["spec"]["renewTime"]
        time.sleep(1.3)  # renewed every duration/3
        assert fake.get("leases", "ray", "raychaos-demo")["spec"]["renewTime"] > renewed
    finally:
        lock.release()


def test_rollback_after_crash_deletes_created_objects_and_uncordons(fake, make_target, tmp_path):
    target = make_target()
    run_dir = tmp_path / "20260101T000000Z-crash"
    run_dir.mkdir()
    ledger = Ledger(run_dir / "ledger.json", "crash-run", target.describe())
    lease = LeaseLock(target._api(), "ray", "demo", duration_s=1)
    lease.acquire("crash-run")
    drained = ledger.begin("drain_gpu_nodes", {"count": 1})
    drain(target, count=1, deadline_s=2, record=drained)
    throttled = ledger.begin("throttle_registry_pulls", {})
    throttle(target, 5e6, nodes=["gpu-0"], registry_hosts=["registry.example"],
             record=throttled)
    net = ledger.begin("saturate_network", {})
    saturate(target, nodes=["gpu-0", "gpu-1"], flood_s=60, record=net)
    # the crash: nothing undone, the ledger on disk is all that is left
    lease._stop.set()
    target.close()
    assert fake.get("nodes", "", "gpu-0")["spec"]["unschedulable"] is True
    assert fake.get("daemonsets", "ray", "raychaos-pull-throttle-run1") is not None
    assert fake.get("pods", "ray", "raychaos-net-run1-0-client") is not None
    time.sleep(1.1)  # the dead run's Lease expires

    result = rollback_results_dir(run_dir)
    assert result["undone"] == ["f3", "f2", "f1"] and result["lock_cleared"] is True
    node = fake.get("nodes", "", "gpu-0")
    assert not node["spec"].get("unschedulable") and not node["spec"]["taints"]
    assert fake.items("daemonsets") == []
    assert [p for p in fake.items("pods", "ray") if p["metadata"]["name"].startswith(
        "raychaos-")] == []
    assert fake.get("leases", "ray", "raychaos-demo") is None
    assert rollback_results_dir(run_dir) == {"undone": []}, "idempotent"
