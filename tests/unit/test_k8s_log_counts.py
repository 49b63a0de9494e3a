"""Counting lines of Ray's logs in a pod across its containers' lives: a raylet that logged a
line and exited between two looks took its files with it, and the line is read from what
``ray start --block`` printed as it ended (the pod's log, ``previous`` once restarted).

The pod, its statuses, the exec and the log API are stand-ins here (the KubeRay world runs
the real thing in ``tests/k8s``): what is under test is which container each count belongs to.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from raychaos.errors import KubeApiError
from raychaos.targets.kubernetes import rayobserve

LINE = "mistakenly been marked as dead by the GCS"


class Pod:
    """One pod's status, its running container's grep answer, and its containers' output."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {"name": "ray-worker", "containerID": "c0",
                                       "state": {"running": {}}, "lastState": {}}
        self.in_files = 0  # lines in the running container's files
        self.output: dict[str, str] = {}  # container ID -> what it printed
        self.execs = 0
        self.logs: list[bool] = []

    def restart(self, new: str | None, printed: str) -> None:
        """The running container exits having printed ``printed``; ``new`` runs (or none yet)."""
        old = self.status["containerID"]
        self.output[old] = printed
        self.status["lastState"] = {"terminated": {"containerID": old, "exitCode": 1}}
        if new is None:
            self.status.update(state={"waiting": {"reason": "CrashLoopBackOff"}})
            self.status.pop("containerID")
        else:
            self.status.update(state={"running": {}}, containerID=new)
        self.in_files = 0

    def as_dict(self) -> dict[str, Any]:
        return {"metadata": {"name": "w1", "uid": "u1"},
                "spec": {"containers": [{"name": "ray-worker"}]},
                "status": {"containerStatuses": [dict(self.status)]}}


@pytest.fixture
def world(monkeypatch):
    pod = Pod()

    def exec_in(api, ns, name, container, command, timeout):  # noqa: ANN001
        pod.execs += 1
        stdout = f"      {pod.in_files} {LINE}\n" if pod.in_files else ""
        return SimpleNamespace(code=0 if pod.in_files else 1, stdout=stdout)

    def read_log(name, ns, container, previous, **_):  # noqa: ANN001, ANN003
        pod.logs.append(previous)
        st = pod.status
        cid = (st["lastState"]["terminated"]["containerID"] if previous
               else st.get("containerID"))
        if cid not in pod.output:
            raise KubeApiError(400, "previous terminated container not found")
        return pod.output[cid]

    api = SimpleNamespace(core=SimpleNamespace(read_namespaced_pod_log=read_log),
                          read_text=lambda fn, *a, **kw: fn(*a, **kw))
    handle = SimpleNamespace(api=api, ns="ns", pod_named=lambda name: pod.as_dict())
    target = SimpleNamespace(_handle=lambda: handle, log_counts={})
    monkeypatch.setattr(rayobserve, "exec_in", exec_in)

    def count() -> int | None:
        for entry in target.log_counts.values():
            entry["at"] = -1e9  # past the 5 s between looks
        got = rayobserve.ray_log_counts(target, ["w1"], [LINE])  # type: ignore[arg-type]
        return got["w1"][LINE] if "w1" in got else None

    return pod, count


def test_a_line_logged_by_a_container_that_exited_and_restarted_counts(world):
    pod, count = world
    assert count() == 0
    pod.restart("c1", printed=f"----- BEGIN raylet.out tail -----\n[FATAL] {LINE}: x\n")
    assert count() == 1, "read from the previous container's output"
    assert pod.logs == [True]
    pod.in_files = 2  # the new container's own
    assert count() == 3


def test_a_line_logged_by_a_container_waiting_to_restart_counts(world):
    pod, count = world
    pod.in_files = 1
    assert count() == 1
    pod.restart(None, printed=f"[FATAL] {LINE}\n[FATAL] {LINE}\n")
    execs = pod.execs
    assert count() == 2, "no exec into a container that is not running: its output"
    assert pod.execs == execs
    pod.status.update(state={"running": {}}, containerID="c1")  # back; its files start empty
    assert count() == 2


def test_what_an_earlier_container_printed_before_the_first_look_is_not_counted(world):
    pod, count = world
    pod.restart("c1", printed=f"[FATAL] {LINE}\n")
    assert count() == 0, "the first look is where the count starts"
    assert pod.logs == [], "the earlier container is not the one of any look"


def test_a_pod_whose_container_cannot_be_read_either_way_is_left_out(world):
    pod, count = world
    assert count() == 0
    pod.status.update(state={"waiting": {"reason": "CrashLoopBackOff"}}, lastState={})
    pod.status.pop("containerID")
    assert count() is None, "unknown, not zero"
