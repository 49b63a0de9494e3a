"""The undo of ``restart_with_env`` has landed when the replacements exist without the
variable: the operator recreates a deleted pod from the RayCluster in its cache, which can lag
the pods' deletion on a loaded machine (seen once on the test bed: after the undo, a worker
came back with the variable and stayed). A stale replacement is deleted again."""

from __future__ import annotations

from typing import Any

import pytest

from raychaos.targets.kubernetes.rayfaults import delete_until_clean

pytestmark = pytest.mark.unit


def pod(name: str, group: str = "gpu", env: bool = False, terminating: bool = False
        ) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"ray.io/group": group,
                                                     "ray.io/node-type": "worker"}}
    if terminating:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    return {"metadata": meta, "spec": {"containers": [{"env": [
        {"name": "RAY_testing_rpc_failure", "value": "x"}] if env else []}]}}


class Cluster:
    """What the informer shows after each look: ``script`` in turn (the last one stays)."""

    def __init__(self, *script: list[dict[str, Any]]):
        self.script, self.looks, self.deleted = list(script), 0, []

    def pods(self) -> list[dict[str, Any]]:
        self.looks += 1
        return self.script[min(self.looks, len(self.script)) - 1]

    def delete(self, name: str) -> None:
        self.deleted.append(name)


def carries(p: dict[str, Any]) -> bool:
    return bool(p["spec"]["containers"][0]["env"])


def test_a_replacement_from_the_stale_template_is_deleted_again():
    cpu = pod("cpu-1", "cpu")
    c = Cluster([pod("gpu-a", env=True), cpu],          # the carrier
                [pod("gpu-a", env=True), cpu],          # its delete not seen yet
                [pod("gpu-a", terminating=True), pod("gpu-b", env=True), cpu],  # stale copy
                [pod("gpu-b", terminating=True), cpu],  # no replacement yet: waited for
                [pod("gpu-c"), cpu])                     # the restored template's pod
    out = delete_until_clean(c.pods, c.delete, carries, wait_s=30, pause_s=0)
    assert c.deleted == ["gpu-a", "gpu-b"] == out["deleted"]
    assert out["still_carrying"] == [] and out["replaced"] is True


def test_nothing_to_undo_returns_at_once():
    c = Cluster([pod("gpu-a"), pod("cpu-1", "cpu")])
    out = delete_until_clean(c.pods, c.delete, carries, wait_s=30, pause_s=0)
    assert out == {"deleted": [], "still_carrying": [], "replaced": True} and c.looks == 1


def test_carriers_that_keep_coming_are_a_failed_undo_and_a_slow_operator_is_not():
    n = iter(range(10**6))
    again: Any = Cluster()
    again.pods = lambda: [pod(f"gpu-{next(n)}", env=True)]  # something re-adds it for ever
    out = delete_until_clean(again.pods, again.delete, carries, wait_s=0.3, pause_s=0.05)
    assert out["still_carrying"] and out["replaced"] is False
    slow = Cluster([pod("gpu-a", env=True)], [])  # deleted; no replacement within the wait
    out = delete_until_clean(slow.pods, slow.delete, carries, wait_s=0.3, pause_s=0.05)
    assert out == {"deleted": ["gpu-a"], "still_carrying": [], "replaced": False}
