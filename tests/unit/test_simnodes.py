"""The simulated nodes' kubelet after the node lifecycle controller marked its nodes Unknown (a
loaded box: lease renewals that timed out): like a kubelet, it posts the nodes' Ready heartbeat
again, and puts back the Ready condition the controller took from their Running pods — else the
bed's pods stay unready for good and every later test waits on them."""

from __future__ import annotations

from typing import Any

from raychaos.testbed import simnodes
from raychaos.testbed.simnodes import SimNodes

NODE = {"name": "cpu-0", "cpu": "2"}


class _Api:
    """The API server as the loop sees it: one pod list, every call recorded."""

    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods, self.calls = pods, []

    def call(self, method: str, path: str, body: Any = None, timeout: float = 10.0,  # noqa: ANN401
             content_type: str = "application/json") -> tuple[int, Any]:
        self.calls.append((method, path, body))
        if method == "GET" and path == "/api/v1/pods":
            return 200, {"items": self.pods}
        return 200, {}


def _pod(ready: str) -> dict[str, Any]:
    return {"metadata": {"name": "w", "namespace": "ray", "uid": "u-1"},
            "spec": {"nodeName": "cpu-0", "containers": [{"name": "ray-worker"}]},
            "status": {"phase": "Running", "containerStatuses": [{"restartCount": 3}],
                       "conditions": [{"type": "Ready", "status": ready}]}}


def test_an_unready_running_pod_gets_its_ready_condition_back_and_keeps_its_restarts():
    api = _Api([_pod("False")])
    SimNodes(api, [NODE]).tick()
    [(_m, _p, body)] = [c for c in api.calls if c[1] == "/api/v1/namespaces/ray/pods/w/status"]
    assert {"type": "Ready", "status": "True"}.items() <= next(
        c for c in body["status"]["conditions"] if c["type"] == "Ready").items()
    assert "containerStatuses" not in body["status"], "the restart count is the pod's own"


def test_a_ready_pod_is_left_alone_and_the_node_heartbeat_goes_with_the_lease(monkeypatch):
    monkeypatch.setattr(simnodes, "RENEW_S", 0.0)
    api = _Api([_pod("True")])
    SimNodes(api, [NODE]).tick()
    paths = [p for _m, p, _b in api.calls]
    assert "/api/v1/namespaces/ray/pods/w/status" not in paths
    assert "/api/v1/nodes/cpu-0/status" in paths
    [status] = [b for _m, p, b in api.calls if p == "/api/v1/nodes/cpu-0/status"]
    assert status["status"]["conditions"][0] == status["status"]["conditions"][0] | {
        "type": "Ready", "status": "True"}
