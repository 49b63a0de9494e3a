"""The bed's NetworkChaos applier (ours, in the node agent) against a fake API: a finalizer
first, then the object's action in each selected pod's namespace, Chaos Mesh's status in the
shape its CRD requires (written to the object: the CRD has no status subresource), and on
delete everything undone before the finalizer goes."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from raychaos.testbed.node import chaos

pytestmark = pytest.mark.unit

PODS = [("ray", "demo-gpu-worker-a", {"ray.io/group": "gpu"}, "rwx-p1", "198.19.1.10"),
        ("ray", "demo-cpu-worker-b", {"ray.io/group": "cpu"}, "rwx-p2", "198.19.2.10"),
        ("other", "x", {"ray.io/group": "gpu"}, "rwx-p3", "198.19.3.10")]


class FakeApi:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj, self.calls = obj, []

    def __call__(self, method: str, path: str, body: Any = None,
                 ctype: str = "application/json") -> tuple[int, Any]:
        self.calls.append((method, path, ctype))
        if path.endswith("/networkchaos") and method == "GET":
            return 200, {"items": [copy.deepcopy(self.obj)] if self.obj else []}
        if method == "GET":
            return 200, copy.deepcopy(self.obj)
        if method == "PATCH":
            self.obj["metadata"].update(body["metadata"])
            return 200, copy.deepcopy(self.obj)
        if method == "PUT":
            self.obj = copy.deepcopy(body)
            return 200, body
        raise AssertionError((method, path))


@pytest.fixture()
def ran(monkeypatch):
    seen: list[tuple[str, list[str], str | None]] = []

    def fake_sh(netns, argv, stdin=None):  # noqa: ANN001, ANN202
        seen.append((netns, argv, stdin))
    monkeypatch.setattr(chaos, "_sh", fake_sh)
    return seen


def networkchaos(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "n1", "namespace": "ray", "uid": "u1", "resourceVersion": "7",
                         "finalizers": []},
            "spec": {"mode": "all", **spec}}


def test_bandwidth_lands_on_the_named_pods_with_the_objects_limit_and_is_undone(ran):
    api = FakeApi(networkchaos({"action": "bandwidth",
                                "selector": {"pods": {"ray": ["demo-gpu-worker-a"]}},
                                "bandwidth": {"rate": "50mbit", "limit": 625000,
                                              "buffer": 10000}}))
    daemon = chaos.ChaosDaemon(api, lambda: PODS)
    daemon.reconcile()
    assert api.obj["metadata"]["finalizers"] == [chaos.FINALIZER]
    assert ran == [("rwx-p1", ["tc", "qdisc", "replace", "dev", "eth0", "root", "tbf", "rate",
                               "50mbit", "burst", "10000", "limit", "625000"], None)]
    st = api.obj["status"]
    assert {c["type"]: c["status"] for c in st["conditions"]} == {
        "AllInjected": "True", "AllRecovered": "False", "Selected": "True", "Paused": "False"}
    [record] = st["experiment"]["containerRecords"]
    # the fields Chaos Mesh's CRD requires of a record
    assert record == {"id": "ray/demo-gpu-worker-a", "selectorKey": ".", "phase": "Injected",
                      "injectedCount": 1, "recoveredCount": 0}
    assert not [c for c in api.calls if c[1].endswith("/status")], "no status subresource"
    ran.clear()
    daemon.reconcile()  # nothing new
    assert ran == []
    api.obj["metadata"]["deletionTimestamp"] = "2026-12-06T00:00:00Z"
    daemon.reconcile()
    assert [argv[0] for _, argv, _ in ran] == ["tc", "nft"] and {n for n, _, _ in ran} == \
        {"rwx-p1"}
    assert api.obj["metadata"]["finalizers"] == []
    patches = [c for c in api.calls if c[0] == "PATCH"]
    assert patches and all(c[2] == chaos.MERGE for c in patches)


def test_a_partition_by_labels_in_its_namespace_drops_all_but_loopback(ran):
    api = FakeApi(networkchaos({"action": "partition",
                                "selector": {"labelSelectors": {"ray.io/group": "gpu"}}}))
    chaos.ChaosDaemon(api, lambda: PODS).reconcile()
    [(netns, argv, script)] = ran  # the "other" namespace's gpu pod is not selected
    assert netns == "rwx-p1" and argv == ["nft", "-f", "-"]
    assert "iifname != lo drop" in script and "oifname != lo drop" in script


def test_a_duration_recovers_by_itself(ran, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(chaos.time, "monotonic", lambda: clock[0])
    api = FakeApi(networkchaos({"action": "loss", "duration": "1m30s",
                                "selector": {"namespaces": ["ray"]}, "loss": {"loss": "25"}}))
    daemon = chaos.ChaosDaemon(api, lambda: PODS)
    daemon.reconcile()
    assert len(ran) == 2 and "numgen random mod 100 < 25 drop" in ran[0][2]
    clock[0] += 89
    daemon.reconcile()
    assert len(ran) == 2
    clock[0] += 2
    daemon.reconcile()
    assert [argv[0] for _, argv, _ in ran[2:]] == ["tc", "nft", "tc", "nft"]
    conds = {c["type"]: c["status"] for c in api.obj["status"]["conditions"]}
    assert conds["AllRecovered"] == "True" and conds["AllInjected"] == "False"
    assert chaos.seconds("500ms") == 0.5 and chaos.seconds(None) is None


def test_no_crd_is_nothing_to_do(ran):
    calls: list[str] = []

    def no_crd(method: str, path: str, *_: Any) -> tuple[int, Any]:
        calls.append(path)
        return 404, "not found"
    chaos.ChaosDaemon(no_crd, lambda: PODS).reconcile()
    assert calls == [f"{chaos.API}/networkchaos"] and ran == []
